"""Project benchmarks: `python benchmarks/run.py [NAME ...]`.

Each benchmark prints one JSON object per line with at least ``name``, ``seconds``, ``gflops``
(achieved GFLOP/s, from an explicit operation count) and ``ratio_to_matmul``: the achieved rate
divided by this machine's float32 matmul rate on the same operand shapes, measured in the same
run. Ratios, not absolute times, are the goals (they transfer between machines). Results are
also logged to the MLflow experiment ``benchmarks`` of the store in ``results/mlflow`` (or
``$MLFLOW_TRACKING_URI``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tapmachine import tap, tracking, training  # noqa: E402
from tapmachine.machine import RBM  # noqa: E402
from tapmachine.priors import Bernoulli  # noqa: E402


def matmul_gflops(m: int, k: int, n: int, device, repeats: int = 30) -> float:
    """Float32 rate of (m x k) @ (k x n) on this machine, best of a few timed batches."""
    a = torch.rand(m, k, device=device)
    b = torch.rand(k, n, device=device)
    out = torch.empty(m, n, device=device)
    for _ in range(5):
        torch.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            torch.matmul(a, b, out=out)
        _sync(device)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return 2.0 * m * k * n / best / 1e9


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def binary_mnist(n: int | None = None) -> tuple[torch.Tensor, str]:
    """Binary-MNIST training images from the data stage, else a stand-in with MNIST's density."""
    path = ROOT / "results" / "data" / "binary_mnist.npz"
    if path.exists():
        from tapmachine.data import load_dataset

        x = torch.as_tensor(load_dataset(path).x_train[:n], dtype=torch.float32)
        return x, "binary_mnist"
    g = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((n or 60000, 784), 0.13), generator=g)
    return x, "random binary (run `snakemake data` for real binary-MNIST)"


def bench_tap_epoch(device, quick: bool) -> dict:
    """One TAP training epoch (Alg. 2) on binary-MNIST: Nh=500, M=K=100, 3 damped iterations.

    Operation count per minibatch (M = K, Nv x Nh couplings): data term x W and x^T f(.)
    (2 x 2 M Nv Nh); per TAP iteration four matmuls (a W, c W^2, a_h W^T, c_h (W^2)^T:
    4 x 2 K Nv Nh); model term a^T a and c^T c (2 x 2 K Nv Nh).
    """
    nv, nh, m, iters = 784, 500, 100, 3
    x, source = binary_mnist(6000 if quick else None)
    x = x.to(device)
    settings = training.TrainSettings(
        epochs=1,
        batch_size=m,
        learning_rate=0.005,
        momentum=0.5,
        l2=0.001,
        train_iterations=iters,
        eval_samples=1,
    )
    g = training.seeded_generator(0, "bench")
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": nh}]}
    machine = training.build_machine(spec, x, 0.01, g)
    n_batches = x.shape[0] // m
    velocity = [torch.zeros_like(W) for W in machine.weights]
    order = torch.randperm(x.shape[0], generator=g).to(device)
    _sync(device)
    t0 = time.perf_counter()
    for b in range(n_batches):
        batch = x[order[b * m : (b + 1) * m]]
        grads = training._gradients(machine, batch, settings, None, g)
        machine = training._apply_update(machine, grads, velocity, 0.005, settings)
    _sync(device)
    seconds = time.perf_counter() - t0
    flops = n_batches * (4 * m * nv * nh + iters * 8 * m * nv * nh + 4 * m * nv * nh)
    gflops = flops / seconds / 1e9
    ref = matmul_gflops(m, nv, nh, device)
    result = {
        "name": "tap_epoch",
        "seconds": seconds,
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "images": int(x.shape[0]),
        "data": source,
    }
    result.update(sklearn_pcd_epoch(x.cpu().numpy(), nh, m, seconds))
    return result


def sklearn_pcd_epoch(x: np.ndarray, nh: int, m: int, tap_seconds: float) -> dict:
    """scikit-learn's BernoulliRBM (PCD-1) for one epoch on the same data, batch and Nh."""
    from sklearn.neural_network import BernoulliRBM

    rbm = BernoulliRBM(n_components=nh, batch_size=m, n_iter=1, learning_rate=0.005, random_state=0)
    t0 = time.perf_counter()
    rbm.fit(x.astype(np.float32))
    seconds = time.perf_counter() - t0
    return {"sklearn_pcd1_seconds": seconds, "tap_over_sklearn_time": tap_seconds / seconds}


def bench_harvest(device, quick: bool) -> dict:
    """TAP from 10,000 data initialisations of an Nh=100 binary-MNIST model, to convergence.

    Uses the trained ``bmnist_h100`` model of the workflow if present (else a random RBM, which
    converges in few iterations and says little). Operation count: 4 matmuls of K x Nv x Nh per
    iteration per still-active row, counted from the per-row iteration numbers.
    """
    nv, nh = 784, 100
    k = 2000 if quick else 10000
    x, source = binary_mnist(k)
    model_file = ROOT / "results" / "default" / "models" / "bmnist_h100" / "model.pt"
    if model_file.exists():
        machine = training.load_model(model_file, device=device, dtype=torch.float32)
        model = str(model_file.relative_to(ROOT))
    else:
        g = torch.Generator().manual_seed(0)
        W = 0.05 * torch.randn(nv, nh, generator=g)
        machine = RBM(W, Bernoulli(torch.zeros(nv)), Bernoulli(torch.zeros(nh))).to(device)
        model = "random RBM (train bmnist_h100 for a meaningful figure)"
    x = x.to(device)
    _sync(device)
    t0 = time.perf_counter()
    states = tap.solve(machine, x, damping=0.5, tol=1e-8, max_iter=2000)
    _sync(device)
    seconds = time.perf_counter() - t0
    row_iters = states.iterations.double()
    flops = float(row_iters.sum()) * 8 * nv * nh
    gflops = flops / seconds / 1e9
    ref = matmul_gflops(k, nv, nh, device, repeats=5)
    per_epoch = seconds * 10000 / k
    # The whole harvest stage as the workflow runs it (float64 by default): solve, free
    # energies and deduplication of the same initialisations.
    from tapmachine import harvest

    stage_machine = machine.to(dtype=torch.float64)
    _sync(device)
    t0 = time.perf_counter()
    arrays = harvest.harvest(stage_machine, x.double(), harvest.HarvestSettings(max_iter=2000))
    _sync(device)
    stage_seconds = time.perf_counter() - t0
    return {
        "name": "harvest",
        "seconds": seconds,
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "initialisations": k,
        "converged": int(states.converged.sum()),
        "iterations_mean": float(row_iters.mean()),
        "iterations_max": int(row_iters.max()),
        "fig5_projected_seconds": per_epoch * 100,
        "stage_float64_seconds": stage_seconds,
        "stage_n_unique": int(len(arrays["representatives"])),
        "model": model,
        "data": source,
    }


def bench_ais(device, quick: bool) -> dict:
    """AIS on a 784 x 500 binary RBM: 14,500 inverse temperatures, 100 runs (App. F).

    Operation count per temperature: v W and h W^T (2 x 2 R Nv Nh) for R runs.
    """
    from tapmachine import estimators

    nv, nh, runs = 784, 500, 100
    g = torch.Generator().manual_seed(0)
    W = 0.01 * torch.randn(nv, nh, generator=g)
    machine = RBM(W, Bernoulli(torch.zeros(nv) - 1.0), Bernoulli(torch.zeros(nh))).to(device)
    betas = estimators.salakhutdinov_schedule()
    if quick:
        betas = betas[::10]
    gen = torch.Generator(device=device).manual_seed(1)
    _sync(device)
    t0 = time.perf_counter()
    res = estimators.ais_log_partition(machine, n_runs=runs, betas=betas, generator=gen)
    _sync(device)
    seconds = time.perf_counter() - t0
    flops = len(betas) * 4 * runs * nv * nh
    gflops = flops / seconds / 1e9
    ref = matmul_gflops(runs, nv, nh, device)
    return {
        "name": "ais",
        "seconds": seconds,
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "betas": len(betas),
        "runs": runs,
        "log_z": float(res.log_z),
        "stderr": float(res.stderr),
    }


def _prior_inputs(k: int, n: int, dtype, device, hard: bool, seed: int = 0):
    """(U, V, B, A) of the ``priors`` benchmark; see its docstring."""
    g = torch.Generator().manual_seed(seed)

    def uniform(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    U = torch.randn(n, generator=g, dtype=torch.float64)
    V = 0.5 + uniform(n)
    B = torch.randn(k, n, generator=g, dtype=torch.float64)
    A = -0.1 * uniform(k, n)
    if hard:
        r = uniform(k, n)
        flat, convex, far = r < 0.1, (r >= 0.1) & (r < 0.2), (r >= 0.2) & (r < 0.3)
        A = torch.where(flat, -V + 0.02 * (uniform(k, n) - 0.5), A)
        A = torch.where(convex, -V - 5.0 - 195.0 * uniform(k, n), A)
        side = torch.where(uniform(k, n) < 0.5, -1.0, 1.0)
        B = torch.where(far, side * 50.0 * V - U, B)
        A = torch.where(far, torch.zeros_like(A), A)
    return tuple(t.to(device=device, dtype=dtype) for t in (U, V, B, A))


def _prior_calls(prior, B, A, device) -> dict:
    """The timed calls of the ``priors`` benchmark, by method name."""
    gen = torch.Generator(device=device).manual_seed(0)
    return {
        "moments": lambda: prior.moments(B, A),
        "log_partition": lambda: prior.log_partition(B, A),
        "grad_log_partition": lambda: prior.grad_log_partition(B, A),
        "sample": lambda: prior.sample(B, A, generator=gen),
    }


def bench_priors(device, quick: bool) -> dict:
    """Truncated Gaussian and truncated Gauss-Bernoulli priors: ns per element per method.

    moments, log_partition, grad_log_partition and sample on (K, Nv) = (100, 784) tensors
    ((20, 784) with --quick), in float32 and float64, for two mixes of inputs: "common", the
    regime of TAP inference on real-valued data (B ~ N(0, 1), A ~ -U(0, 0.1), U ~ N(0, 1),
    V ~ U(0.5, 1.5), bounds [0, 1], rho = 0.3), and "hard", the same with 30% of the elements
    moved to the special regimes: 10% near-flat (A + V ~ U(-0.01, 0.01)), 10% strongly convex
    (A + V ~ -U(5, 200)), 10% centre (B + U)/(A + V) = +-50 far outside the box. Each figure is
    the best of several timed calls; ``bernoulli_ns_per_element`` (Bernoulli.moments on the same
    shapes) is the reference. There is no meaningful operation count (special functions), so
    ``gflops`` and ``ratio_to_matmul`` are null for this benchmark. Run with --threads 1 for
    per-thread figures.
    """
    from tapmachine.priors import TruncatedGaussBernoulli, TruncatedGaussian

    k, n = (20, 784) if quick else (100, 784)
    repeats = 3 if quick else 7

    def best_ns(fn, reps: int) -> float:
        fn()
        best = float("inf")
        for _ in range(reps):
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            best = min(best, time.perf_counter() - t0)
        return best / (k * n) * 1e9

    t_start = time.perf_counter()
    ns, bernoulli = {}, {}
    for dtype in (torch.float32, torch.float64):
        dname = str(dtype).removeprefix("torch.")
        for mix in ("common", "hard"):
            U, V, B, A = _prior_inputs(k, n, dtype, device, mix == "hard")
            if mix == "common":
                bern = _prior_calls(Bernoulli(U), B, A, device)["moments"]
                bernoulli[dname] = best_ns(bern, 3 * repeats)
            priors = {
                "TruncatedGaussian": TruncatedGaussian(U, V, 0.0, 1.0),
                "TruncatedGaussBernoulli": TruncatedGaussBernoulli(
                    torch.full_like(U, 0.3), U, V, 0.0, 1.0
                ),
            }
            for pname, prior in priors.items():
                for mname, fn in _prior_calls(prior, B, A, device).items():
                    reps = max(2, repeats // 2) if mname == "sample" else repeats
                    ns[f"{pname}.{mname}.{dname}.{mix}"] = best_ns(fn, reps)
    return {
        "name": "priors",
        "seconds": time.perf_counter() - t_start,
        "gflops": None,
        "ratio_to_matmul": None,
        "ns_per_element": ns,
        "bernoulli_ns_per_element": bernoulli,
        "tg_moments_ns_per_element": ns["TruncatedGaussian.moments.float32.common"],
        "shape": [k, n],
    }


BENCHMARKS = {
    "tap_epoch": bench_tap_epoch,
    "harvest": bench_harvest,
    "ais": bench_ais,
    "priors": bench_priors,
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"any of {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for smoke tests")
    p.add_argument("--no-tracking", action="store_true")
    args = p.parse_args(argv)
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    manifest = None
    if not args.no_tracking:
        store = ROOT / "results" / "mlflow"
        manifest = store / "experiments.json"
        if not manifest.exists():
            tracking.init_store(store, manifest)
    env = {
        "device": args.device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }
    if torch.device(args.device).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    for name in args.names or list(BENCHMARKS):
        result = BENCHMARKS[name](args.device, args.quick)
        result.update(env)
        result["quick"] = args.quick
        print(json.dumps(result), flush=True)
        with tracking.start_run(manifest, "benchmarks", name, params=env) as run:
            run.log_metrics({k: v for k, v in result.items() if isinstance(v, int | float)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
