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
import dataclasses
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
from tapmachine.core.machine import RBM  # noqa: E402
from tapmachine.core.priors import Bernoulli  # noqa: E402


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
        from tapmachine.io.data import load_dataset

        x = torch.as_tensor(load_dataset(path).x_train[:n], dtype=torch.float32)
        return x, "binary_mnist"
    g = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((n or 60000, 784), 0.13), generator=g)
    return x, "random binary (run `snakemake data` for real binary-MNIST)"


def trained_or_random(name: str, nh: int, device, runs=("default",)):
    """(machine, description): the workflow's trained model ``name`` (float32) from the first of
    ``results/{run}/models/{name}/model.pt`` that exists, else a random 784 x ``nh`` Bernoulli
    RBM, W ~ N(0, 0.05^2) (it converges in few iterations and says little)."""
    for run in runs:
        model_file = ROOT / "results" / run / "models" / name / "model.pt"
        if model_file.exists():
            machine = training.load_model(model_file, device=device, dtype=torch.float32)
            return machine, str(model_file.relative_to(ROOT))
    nv = 784
    g = torch.Generator().manual_seed(0)
    W = 0.05 * torch.randn(nv, nh, generator=g)
    machine = RBM(W, Bernoulli(torch.zeros(nv)), Bernoulli(torch.zeros(nh))).to(device)
    return machine, f"random RBM (train {name} for a meaningful figure)"


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
    machine, model = trained_or_random("bmnist_h100", nh, device)
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
    from tapmachine.tap_paper import harvest

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
    from tapmachine.core import estimators

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
    from tapmachine.core.priors import TruncatedGaussBernoulli, TruncatedGaussian

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


# ----------------------------------------------------------------------------------------------
# paper_profile: projected wall time of the binary-MNIST paper targets
# ----------------------------------------------------------------------------------------------

#: Rows from which ``paper_profile`` counts TAP iterations on each checkpoint.
PROFILE_ROWS = 100


def measured_iterations(cfg: dict, checkpoints: Path, quick: bool) -> dict:
    """Mean TAP iterations per row that the paper targets' jobs pay, counted on the
    ``tap_solve`` checkpoints (trained if missing, ``_checkpoints``) at each of their epochs
    (early, middle, late) and averaged over them, ``PROFILE_ROWS`` training images each:

    - ``train_converge`` per model: one converged training step (Alg. 1 or ``tap.solver`` from
      a batch, tol ``train_tol``, cap ``train_max_iter``);
    - ``eval`` per model: the per-epoch evaluation (tol, cap ``max_iter``, second pass at
      ``retry_damping``; second-pass iterations included);
    - ``harvest``: bmnist_h100's harvest (float64, its tol, max_iter, second pass, plus the
      polishing iterations of converged rows).

    Models are matched to the checkpoints by hidden units; the CD/PCD models (784 x 500) are
    counted on the TAP-trained bmnist_h500 checkpoints (no CD checkpoints are trained here)."""
    from tapmachine.tap_paper import harvest as harvest_module

    ckpts = _checkpoints(checkpoints, quick)
    x, _ = binary_mnist(PROFILE_ROWS)
    models = cfg["models"]
    by_units = {
        nh: [path for n, _, path in ckpts if SOLVE_MODELS[n] == nh] for nh in (25, 50, 100, 500)
    }
    train, evals, solved = {}, {}, {}
    for name, spec in models.items():
        nh = spec["hidden"][0]["units"] if len(spec.get("hidden", [])) == 1 else None
        if spec.get("dataset") != "binary_mnist" or nh not in by_units:
            continue
        settings = training.TrainSettings.from_spec(spec)
        t_counts, e_counts = [], []
        for path in by_units[nh]:
            machine = training.load_model(path, dtype=torch.float32)
            xs = x.to(torch.float32)
            if settings.method == "tap" and settings.train_iterations == "converge":
                st = tap.solve(
                    machine,
                    xs[: settings.batch_size],
                    damping=settings.damping,
                    tol=settings.train_tol,
                    max_iter=settings.train_max_iter,
                    solver=settings.solver,
                )
                t_counts.append(float(st.iterations.double().mean()))
            key = (path, settings.damping, settings.tol, settings.max_iter)
            key += (settings.retry_damping, settings.solver)
            if key not in solved:  # the CD/PCD models share bmnist_h500's checkpoints
                st = tap.solve_with_retry(
                    machine,
                    xs,
                    damping=settings.damping,
                    tol=settings.tol,
                    max_iter=settings.max_iter,
                    retry_damping=settings.retry_damping,
                    solver=settings.solver,
                )
                solved[key] = float(st.iterations.double().mean())
            e_counts.append(solved[key])
        if t_counts:
            train[name] = sum(t_counts) / len(t_counts)
        evals[name] = sum(e_counts) / len(e_counts)
    h = cfg["harvest"]["bmnist_h100"]
    settings = harvest_module.HarvestSettings(
        **{k: v for k, v in h.items() if k not in ("epochs", "dtype")}
    )
    h_counts = []
    for path in by_units[100]:
        machine = training.load_model(path, dtype=torch.float64)
        arrays = harvest_module.harvest(machine, x.double(), settings)
        h_counts.append(float((arrays["iterations"] + arrays["polish_iterations"]).mean()))
    return {"train_converge": train, "eval": evals, "harvest": sum(h_counts) / len(h_counts)}


#: Targets of the profile (workflow/config/paper.yaml).
PAPER_TARGETS = ("fig3 (binary panel)", "fig4", "fig5", "fig6", "fig7", "fig12", "likelihood_table")


def _timed(fn, repeats: int) -> float:
    """CPU seconds per call of ``fn`` in this process (one warm-up call, then the mean of
    ``repeats``). With one torch thread this is the wall time on an idle core, whatever else
    runs on the machine; wall-clock timing on a shared machine would project its contention."""
    fn()
    t0 = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - t0) / repeats


def _paper_config() -> dict:
    from tapmachine.pipeline.configuration import load_config, validate

    cfg = load_config([ROOT / "workflow" / "config" / "paper.yaml"], default=ROOT / "config.yaml")
    return validate(cfg, ROOT / "workflow" / "schemas" / "config.schema.yaml")


def bench_paper_profile(device, quick: bool, checkpoints: Path | None = None) -> dict:
    """Projected wall time of the binary-MNIST paper targets from measured per-epoch costs.

    Targets: fig3 (binary panel: bmnist_h25/50/100/500), fig4 (its binary models), fig5-7
    (bmnist_h100 harvest), fig12 (per-epoch scores of bmnist_h500) and the likelihood table
    (TAP, CD-1, CD-25 and PCD-1 on 784 x 500), all with workflow/config/paper.yaml. Measured
    here: one training minibatch of each model (TAP at 1 and 11 iterations, so cost = a + b
    iterations; CD/PCD directly), one TAP iteration over 10,000 rows (per-epoch evaluation and
    harvest), one AIS temperature with 100 runs, and the pseudo-likelihood of 100 images. The
    projection multiplies them by the counts in the config (epochs, 600 minibatches of 60,000
    images, schedule length, initialisations) and by the TAP iterations per row counted on
    trained checkpoints (``measured_iterations``) where that number depends on the model.
    ``serial_hours`` is the sum of all jobs;
    ``wall_hours_2_cores`` spreads the single-threaded jobs over 2 cores (the longest chain,
    bmnist_h500 training then its per-epoch scoring, is a lower bound and is reported too).
    Fig. 12's scoring takes TAP's ln Z from training's per-epoch evaluation when that is the same
    solve (``likelihood.evaluation_differs``; paper.yaml: 10,000 rows at tol 1e-8 both), so its
    TAP part is not counted again; ``fig12_tap_reuse_saved_hours`` is what that saves.
    Costs are CPU seconds of one thread (``_timed``), so the projection is for an idle machine.
    """

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time of one thread = idle-core wall time (see _timed)
    try:
        return _paper_profile(quick, Path(checkpoints or CHECKPOINTS))
    finally:
        torch.set_num_threads(threads)


def _paper_profile(quick: bool, checkpoints: Path) -> dict:
    from tapmachine.core import estimators
    from tapmachine.tap_paper import likelihood

    cfg = _paper_config()
    counts = measured_iterations(cfg, checkpoints, quick)
    eval_iterations = counts["eval"]
    models, harvest_cfg, lik = cfg["models"], cfg["harvest"], cfg["likelihood"]
    x, source = binary_mnist(None if not quick else 12000)
    n_train = 60000
    g = training.seeded_generator(0, "paper_profile")
    reps = 2 if quick else 5
    jobs: dict[str, float] = {}
    detail: dict[str, dict] = {}
    fixed3: dict[str, float] = {}  # training seconds of the TAP models at 3 iterations per step

    def machine_for(spec):
        return training.build_machine(spec, x[:1000], 0.05, g)

    # Training: seconds per minibatch, per model.
    fig3 = [m for m in cfg["figures"]["fig3"]["models"] if models[m]["dataset"] == "binary_mnist"]
    table_models = list(lik["table"]["models"])
    for name in dict.fromkeys(fig3 + table_models + [lik["fig12"]["model"]]):
        spec = models[name]
        settings = training.TrainSettings.from_spec(spec)
        machine = machine_for(spec)
        batch = x[: settings.batch_size]
        chains = None
        if settings.method == "pcd":
            from tapmachine.core import contrastive

            chains = contrastive.PersistentChains.from_data(
                x[:1000], n_chains=settings.batch_size, generator=g
            )
        if settings.method == "tap":

            def step(it, settings=settings, machine=machine, batch=batch):
                s = dataclasses.replace(settings, train_iterations=it)
                training._gradients(machine, batch, s, None, g)

            one = _timed(lambda step=step: step(1), reps)
            eleven = _timed(lambda step=step: step(11), reps)
            per_iter = max(0.0, (eleven - one) / 10)
            iters = settings.train_iterations
            if iters == "converge":
                iters = counts["train_converge"][name]
            per_batch = one + per_iter * (iters - 1)
            fixed3[name] = settings.epochs * (one + 2 * per_iter) * (n_train // settings.batch_size)
        else:

            def step_cd(settings=settings, machine=machine, batch=batch, chains=chains):
                training._gradients(machine, batch, settings, chains, g)

            per_batch = _timed(step_cd, reps)
            iters = None
        n_batches = n_train // settings.batch_size
        # Per-epoch evaluation: TAP from eval_samples images (eq. 39, Fig. 3).
        nh = spec["hidden"][0]["units"]
        rows = min(settings.eval_samples, x.shape[0])
        probe = x[:rows]
        W = 0.05 * torch.randn(784, nh, generator=g)
        rbm = RBM(W, Bernoulli(torch.zeros(784) - 1.0), Bernoulli(torch.zeros(nh)))
        per_eval_iter = _timed(
            lambda rbm=rbm, probe=probe: tap.solve(rbm, probe, tol=0.0, max_iter=1), reps
        )
        per_eval_iter *= settings.eval_samples / rows
        eval_epoch = per_eval_iter * eval_iterations[name]
        train_epoch = per_batch * n_batches
        jobs[f"train {name}"] = settings.epochs * (train_epoch + eval_epoch)
        detail[name] = {
            "epochs": settings.epochs,
            "train_iterations": iters,
            "seconds_per_batch": per_batch,
            "train_seconds_per_epoch": train_epoch,
            "eval_seconds_per_epoch": eval_epoch,
            "eval_samples": settings.eval_samples,
        }

    # Harvest (Figs. 5-7): float64 TAP from n_init images at each listed epoch.
    h = harvest_cfg["bmnist_h100"]
    rows = min(h["n_init"], x.shape[0])
    W = 0.05 * torch.randn(784, 100, generator=g, dtype=torch.float64)
    rbm = RBM(
        W,
        Bernoulli(torch.zeros(784, dtype=torch.float64) - 1.0),
        Bernoulli(torch.zeros(100, dtype=torch.float64)),
    )
    xd = x[:rows].double()
    per_iter = _timed(lambda: tap.solve(rbm, xd, tol=0.0, max_iter=1), reps)
    per_iter *= h["n_init"] / rows
    jobs["harvest bmnist_h100"] = len(h["epochs"]) * per_iter * counts["harvest"]
    detail["harvest"] = {
        "epochs": len(h["epochs"]),
        "n_init": h["n_init"],
        "seconds_per_iteration": per_iter,
    }

    # Scoring (Fig. 12 per epoch; the table once per model): AIS + TAP ln Z + PL + data terms.
    # Fig. 12 takes TAP's ln Z from training's per-epoch evaluation when that was the same solve
    # (likelihood.recorded_tap_partition); the TAP part is then not paid again.
    def score_seconds(section: dict, nh: int) -> dict:
        """Seconds of one checkpoint's AIS and pseudo-likelihood, and of one TAP iteration over
        the section's ``tap_inits`` rows (its ln Z)."""
        W = 0.01 * torch.randn(784, nh, generator=g)
        rbm = RBM(W, Bernoulli(torch.zeros(784) - 1.0), Bernoulli(torch.zeros(nh)))
        ais = section["ais"]
        n_betas = ais["n_betas"] or len(estimators.salakhutdinov_schedule())
        probe_betas = likelihood.ais_schedule("linear", 50 if quick else 200)
        t = _timed(
            lambda: estimators.ais_log_partition(
                rbm, n_runs=ais["n_runs"], betas=probe_betas, generator=g
            ),
            1,
        )
        rows = min(section["tap_inits"], x.shape[0])
        it = _timed(lambda: tap.solve(rbm, x[:rows], tol=0.0, max_iter=1), reps)
        n_images = (section["n_train"] or n_train) + (section["n_test"] or 10000)
        pl_s = (
            _timed(
                lambda: likelihood.pseudo_log_likelihood_blocks(
                    rbm, x[:100], section["pl_sites"], g
                ),
                reps,
            )
            * n_images
            / 100
        )
        return {
            "ais": t * n_betas / len(probe_betas),
            "pl": pl_s,
            "betas": n_betas,
            "tap_per_iteration": it * section["tap_inits"] / rows,
        }

    fig12_model = lik["fig12"]["model"]
    fig12_settings = likelihood.ScoreSettings.from_config(lik["fig12"], models[fig12_model])
    trained = dataclasses.asdict(training.TrainSettings.from_spec(models[fig12_model]))
    reused = not likelihood.evaluation_differs(trained, fig12_settings)
    parts = score_seconds(lik["fig12"], models[fig12_model]["hidden"][0]["units"])
    # what the reuse saves, measured in this run
    tap_solved = parts["tap_per_iteration"] * eval_iterations[fig12_model]
    per_epoch = parts["ais"] + parts["pl"] + (0.0 if reused else tap_solved)
    n_scored = (
        models[fig12_model]["epochs"]
        if lik["fig12"]["epochs"] == "all"
        else len(lik["fig12"]["epochs"])
    )
    jobs[f"score_epochs {fig12_model}"] = n_scored * per_epoch
    detail["fig12_scoring"] = {
        "epochs": n_scored,
        "seconds_per_epoch": per_epoch,
        **parts,
        "tap_reused": reused,
        "tap_if_solved": tap_solved,
    }
    parts = score_seconds(lik["table"], 500)
    table_reused = []
    for name in table_models:
        spec = models[name]
        table_settings = likelihood.ScoreSettings.from_config(lik["table"], spec)
        trained = dataclasses.asdict(training.TrainSettings.from_spec(spec))
        same = not likelihood.evaluation_differs(trained, table_settings)
        tap_s = 0.0 if same else parts["tap_per_iteration"] * eval_iterations[name]
        jobs[f"score_final {name}"] = parts["ais"] + parts["pl"] + tap_s
        table_reused += [name] if same else []
    detail["table_scoring"] = {**parts, "tap_reused_for": table_reused}

    serial = sum(jobs.values())
    chain = jobs[f"train {fig12_model}"] + jobs[f"score_epochs {fig12_model}"]
    wall = max(serial / 2.0, chain)
    # The same targets with the default's 3 TAP iterations per training step.
    saved = sum(
        models[n]["epochs"] * detail[n]["train_seconds_per_epoch"] - fixed3[n] for n in fixed3
    )
    serial3 = serial - saved
    chain3 = chain - (
        models[fig12_model]["epochs"] * detail[fig12_model]["train_seconds_per_epoch"]
        - fixed3.get(fig12_model, 0.0)
    )
    return {
        "name": "paper_profile",
        "seconds": serial,
        "gflops": None,
        "ratio_to_matmul": None,
        "targets": list(PAPER_TARGETS),
        "measured_iterations": counts,
        "iterations_from": f"checkpoints {checkpoints} (epochs {list(SOLVE_EPOCHS)})",
        "jobs_hours": {k: v / 3600 for k, v in sorted(jobs.items(), key=lambda kv: -kv[1])},
        "detail": detail,
        "serial_hours": serial / 3600,
        "fig12_tap_reuse_saved_hours": (n_scored * tap_solved / 3600 if reused else 0.0),
        "longest_chain_hours": chain / 3600,
        "wall_hours_2_cores": wall / 3600,
        "with_3_iterations": {
            "serial_hours": serial3 / 3600,
            "wall_hours_2_cores": max(serial3 / 2.0, chain3) / 3600,
        },
        "goal_hours": 2.0,
        "basis": "CPU seconds of one torch thread (idle-machine projection)",
        "data": source,
    }


def bench_ucd_coupling(device, quick: bool) -> dict:
    """UCD-LMI estimate of grad ln Z for a 784 x 500 RBM from 1,000 chains (second paper, Alg. 2).

    The machine is initialised as the paper trains it (spin units, orthogonal W, Logistic(0, 0.5)
    biases). One estimate = local search (Alg. 1) + one Gibbs sweep + the MH coupling (Alg. 3) of
    the marginalised estimator (eq. 27, the default ``UCDSettings``); the plain estimator (eq. 11)
    is timed too. Operation count (matmuls only, per chain, in units of Nv Nh): local search
    4 per step (two fields per step), the Gibbs sweep 4, and per marginalised target the energy of
    X_0 and of the first proposal (2 + 2), the statistic f(X_0) (2 for the conditional mean of the
    summed layer, 2 for the outer product) and 10 per further coupling step (tau - 1, bounded by
    the larger tau of the two targets). ``corrected_fraction``: chains whose estimate has a
    correction term (tau > 1).
    """
    from tapmachine import ucd
    from tapmachine.train.training import seeded_generator

    nv, nh = 784, 500
    chains = 200 if quick else 1000
    repeats = 2 if quick else 5
    machine = ucd.random_machine([nv, nh], seeded_generator(0, "bench_ucd")).to(device=device)
    g = seeded_generator(0, "bench_ucd", "chains", device=device)
    out = {}
    for label, settings in (
        ("marginalised", ucd.UCDSettings()),
        ("plain", ucd.UCDSettings(marginalise=False)),
    ):
        ucd.model_expectation(machine, chains, settings, g)  # warm-up
        best, est = float("inf"), None
        for _ in range(repeats):
            _sync(device)
            t0 = time.perf_counter()
            est = ucd.model_expectation(machine, chains, settings, g)
            _sync(device)
            best = min(best, time.perf_counter() - t0)
        targets = 2 if settings.marginalise else 1
        per_target = 8 if settings.marginalise else 6
        units = (
            4 * float(est.steps.sum())
            + 4 * chains
            + targets * (per_target * chains + 10 * float((est.tau - 1).sum()))
        )
        out[label] = {
            "seconds": best,
            "gflops": units * nv * nh / best / 1e9,
            **est.summary(),
        }
    ref = matmul_gflops(chains, nv, nh, device)
    main = out["marginalised"]
    return {
        "name": "ucd_coupling",
        "seconds": main["seconds"],
        "gflops": main["gflops"],
        "ratio_to_matmul": main["gflops"] / ref,
        "matmul_gflops": ref,
        "chains": chains,
        "T_mean": main["T_mean"],
        "tau_mean": main["tau_mean"],
        "corrected_fraction": main["corrected_fraction"],
        "plain_seconds": out["plain"]["seconds"],
        "plain_ratio_to_matmul": out["plain"]["gflops"] / ref,
        "plain_tau_mean": out["plain"]["tau_mean"],
        "plain_corrected_fraction": out["plain"]["corrected_fraction"],
    }


#: Layer sizes and batch of ``ucd_train_step`` (``--ucd-sizes``, ``--ucd-batch``).
UCD_STEP = {"sizes": [784, 784, 784], "batch": 1000}
#: Training steps run before ``ucd_train_step`` times one: T falls over the first steps of a
#: fresh machine, so the step time depends on when it is taken; the benchmark states this point.
UCD_WARMUP_STEPS = 20


def bench_ucd_train_step(device, quick: bool) -> dict:
    """One UCD-LMI training step of a DBM (default 784-784-784, batch 1,000; Alg. 2), timed after
    ``UCD_WARMUP_STEPS`` steps at lr 1e-3 from the initial machine, with the tau and T of the
    timed steps and the seconds of one local-search sweep beside it.

    A step = the positive phase (one posterior coupling per row, eq. 28) + the negative phase
    (``batch`` joint couplings, eq. 11), both marginalised (eq. 27), and the SGD update, through
    the training loop's own functions. Operation count (matmuls only, 2 flops per multiply-add),
    in units of S = Nv N1 + N1 N2 (all couplings once) per chain: local search 2 per step (each
    block update computes the fields of its layers), the Gibbs sweep 2, per marginalised target
    about 4 for the energies and statistics of X_0 and 10 per further coupling step (tau - 1).
    The local-search sweep (both block updates of ``batch`` chains, 2 S per chain) is timed alone
    (best of 10, as the matmul reference): its rate over the matmul rate on (batch x Nv) @
    (Nv x N1) is the goal ratio (>= 0.8).
    The paper's size (6,272-6,272-6,272, batch 1,000) is projected unless run (``--ucd-sizes``):
    memory per step = weights + velocity + gradient (3 x 4 bytes per coupling) + the states of
    both phases (float32), and hours for 100,000 steps = measured seconds x (paper S / this S) x
    100,000.
    """
    from tapmachine.train import training
    from tapmachine.ucd import Target, block_update, dbm

    sizes = list(UCD_STEP["sizes"])
    batch = 200 if quick else UCD_STEP["batch"]
    repeats = 2 if quick else 3
    warmup = 3 if quick else UCD_WARMUP_STEPS
    lr = 1e-3
    g = training.seeded_generator(0, "bench_ucd_train")
    opts = dbm.DBMOptions()
    machine = dbm.build_dbm(sizes, g, opts, 0.01).to(device=device)
    g = training.seeded_generator(0, "bench_ucd_train", "steps", device=device)
    x, _ = binary_mnist(batch)
    if x.shape[1] != sizes[0]:  # the 8-bit layout's width, or a stand-in: random rows
        x = (torch.rand(batch, sizes[0], generator=torch.Generator().manual_seed(0)) < 0.2).float()
    x = dbm.data_for(machine, x.to(device))
    settings = training.TrainSettings(
        batch_size=batch, learning_rate=lr, momentum=0.0, l2=0.0, method="ucd_lmi"
    )
    state = dbm.init_state(machine, x, "ucd_lmi", opts, batch, g)
    velocity = [torch.zeros_like(W) for W in machine.weights]

    def step(m):
        grads = dbm.gradients(m, x, "ucd_lmi", opts, state, 1, g)
        return training._apply_update(m, grads, velocity, lr, settings)

    t_warm = time.perf_counter()
    for _ in range(warmup):
        machine = step(machine)
    _sync(device)
    t_warm = time.perf_counter() - t_warm
    times, taus, Ts = [], [], []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        machine = step(machine)
        _sync(device)
        times.append(time.perf_counter() - t0)
        taus.append(state.metrics["tau_mean"])
        Ts.append(state.metrics["T_mean"])
    best = min(times)
    mt = state.metrics
    # one local-search sweep of `batch` joint chains (both block updates), timed alone
    target = Target.joint(machine)
    chains = target.uniform(target.blank(batch), g)
    block_update(target, block_update(target, chains, 0), 1)  # warm-up
    sweep_seconds = float("inf")  # best of 10, as the matmul reference is a best
    for _ in range(10):
        _sync(device)
        t0 = time.perf_counter()
        chains = block_update(target, block_update(target, chains, 0), 1)
        _sync(device)
        sweep_seconds = min(sweep_seconds, time.perf_counter() - t0)
    S = sum(a * b for a, b in zip(sizes, sizes[1:], strict=False))
    per_chain = 2 * (mt["pos_T_mean"] + mt["neg_T_mean"]) + 2 * 2 + 2 * 2 * 4
    per_chain += 2 * 10 * ((mt["pos_tau_mean"] - 1) + (mt["neg_tau_mean"] - 1))
    flops = 2.0 * per_chain * batch * S
    gflops = flops / best / 1e9
    ref = matmul_gflops(batch, sizes[0], sizes[1], device)
    sweep_gflops = 2.0 * 2 * batch * S / sweep_seconds / 1e9
    paper = [6272, 6272, 6272]
    S_paper = paper[0] * paper[1] + paper[1] * paper[2]
    mem_paper = 3 * 4 * S_paper + 4 * 1000 * sum(paper) * 2 * 3
    return {
        "name": "ucd_train_step",
        "sizes": sizes,
        "batch": batch,
        "warmup_steps": warmup,
        "warmup_seconds": t_warm,
        "learning_rate": lr,
        "seconds": best,
        "seconds_mean": sum(times) / len(times),
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "tau_mean": sum(taus) / len(taus),
        "T_mean": sum(Ts) / len(Ts),
        "pos_T_mean": mt["pos_T_mean"],
        "neg_T_mean": mt["neg_T_mean"],
        "corrected_fraction": mt["corrected_fraction"],
        "sweep_seconds": sweep_seconds,
        "sweep_gflops": sweep_gflops,
        "sweep_ratio_to_matmul": sweep_gflops / ref,
        "paper_sizes": paper,
        "paper_memory_per_step_gb": mem_paper / 1e9,
        "paper_projected_hours_100k_steps": best * (S_paper / S) * 100_000 / 3600,
    }


def _seconds(fn, device) -> float:
    """Seconds of one call of ``fn``: CPU time of this process on a CPU (with one torch thread,
    the wall time on an idle core whatever else runs, see ``_timed``), wall time on a GPU."""
    if torch.device(device).type == "cuda":
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        return time.perf_counter() - t0
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def bench_dbm_ais(device, quick: bool) -> dict:
    """AIS of a 784-500-500 binary DBM on its odd layer (``ucd.ais``): 100 runs, 1,000
    temperatures (the default config's; S&H 2009 used 20,000), a random orthogonal machine.

    Operation count per temperature (2 flops per multiply-add, R runs): the even layers' input
    from h1 (h1 W1^T and h1 W2: 2 R N1 (Nv + N2)) and h1's input from them (the same again).
    """
    from tapmachine.ucd import ais
    from tapmachine.ucd.init import random_machine

    sizes, runs = [784, 500, 500], 100
    n_betas = 200 if quick else 1000
    g = torch.Generator().manual_seed(0)
    machine = random_machine(sizes, g, units="binary").to(device=device)
    gen = torch.Generator(device=device).manual_seed(1)
    _sync(device)
    t0 = time.perf_counter()
    res = ais.dbm_ais_log_partition(
        machine, n_runs=runs, betas=ais.segmented_schedule(n_betas), generator=gen
    )
    _sync(device)
    seconds = time.perf_counter() - t0
    flops = n_betas * 4 * runs * sizes[1] * (sizes[0] + sizes[2])
    gflops = flops / seconds / 1e9
    ref = matmul_gflops(runs, sizes[0], sizes[1], device)
    return {
        "name": "dbm_ais",
        "sizes": sizes,
        "seconds": seconds,
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "betas": n_betas,
        "runs": runs,
        "log_z": float(res.log_z),
        "stderr": float(res.stderr),
    }


def bench_denoise(device, quick: bool) -> dict:
    """TAP denoising of the binary symmetric channel (Fig. 8): 1,000 test digits x 11 values of
    p (0, 0.05, ..., 0.5) stacked into one (11,000, 784) batch, ``denoise.tap_denoise`` on an
    Nh = 500 RBM from the OPE to tol 1e-8 (cap 1,000), as the ``denoise_bsc`` stage runs it.

    Model: the trained ``bmnist_h500`` of the workflow (``results/default``, else
    ``results/paper``) if present, else a random RBM (W ~ N(0, 0.05^2), ~14 iterations a row).

    What the ratio measures: achieved flop rate of the whole denoiser call (OPE, channel field,
    the blocked TAP solve, bookkeeping) over the float32 matmul rate on the shapes the solve
    multiplies. Flops: 4 matmuls of Nv x Nh per iteration per still-active row (2 flops per
    multiply-add, 8 Nv Nh per row-iteration), from the per-row iteration numbers; the p = 0.5
    rows are one row solved and copied (``tap_denoise``), counted once. Reference
    (``matmul_gflops``): the float32 rate of (B, 784) @ (784, 500) into a preallocated output,
    with B = min(rows, ``denoise.SOLVE_BLOCK``), the row block the solver works on (half of the
    solver's matmuls are this shape, the other half (B, 500) @ (500, 784), the same flops); also
    reported against the whole stacked batch, (11,000, 784) @ (784, 500)
    (``ratio_to_matmul_full_batch``; on one CPU thread that matmul is slower per flop, so this
    ratio is the higher one). The issue's goal is ratio_to_matmul >= 0.7.

    Timing: on a CPU with one torch thread (the previous setting is restored), CPU time of this
    process, so other processes on a shared machine do not count; the solve and both matmul
    references are timed in turn ``repeats`` times (interleaved, so a slow spell hits both) and
    the best of each is used. On a GPU, wall time. The machine's own load can still slow the
    core (caches, memory bandwidth), which is why repeats are interleaved.
    """
    from tapmachine.tap_paper import denoise

    nv, nh = 784, 500
    n_images = 200 if quick else 1000
    repeats = 2 if quick else 3
    ps = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5]
    x_train, source = binary_mnist(20000)
    path = ROOT / "results" / "data" / "binary_mnist.npz"
    if path.exists():
        from tapmachine.io.data import load_dataset

        x = torch.as_tensor(load_dataset(path).x_test[:n_images], dtype=torch.float32)
    else:
        x = x_train[-n_images:]
    machine, model = trained_or_random("bmnist_h500", nh, device, runs=("default", "paper"))
    y, p_rows, clean = denoise.stack_noise(x, ps, training.seeded_generator(0, "bench"))
    m = denoise.magnetisations(x_train).to(device)
    y = y.to(device)
    k = y.shape[0]
    block = min(k, denoise.SOLVE_BLOCK)

    def matmul_seconds(rows: int):
        a = torch.rand(rows, nv, device=device)
        b = torch.rand(nv, nh, device=device)
        out = torch.empty(rows, nh, device=device)
        reps = max(3, 60000 // rows)

        def run():
            for _ in range(reps):
                torch.matmul(a, b, out=out)

        run()  # warm-up
        return lambda: _seconds(run, device) / reps

    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        time_block, time_full = matmul_seconds(block), matmul_seconds(k)
        solve_s, block_s, full_s, states = [], [], [], []

        def solve():
            states[:] = [denoise.tap_denoise(machine, y, p_rows, m, tol=1e-8, max_iter=1000)]

        for _ in range(repeats):
            solve_s.append(_seconds(solve, device))
            block_s.append(time_block())
            full_s.append(time_full())
    finally:
        torch.set_num_threads(threads)
    seconds, state = min(solve_s), states[-1]
    row_iters = state.iterations.double()
    solved = p_rows < 0.5
    flops = (float(row_iters[solved].sum()) + float(row_iters[~solved][:1].sum())) * 8 * nv * nh
    gflops = flops / seconds / 1e9
    ref = 2.0 * block * nv * nh / min(block_s) / 1e9
    ref_full = 2.0 * k * nv * nh / min(full_s) / 1e9
    mcc = denoise.mcc(state.a[0].round().cpu(), clean).reshape(len(ps), -1).mean(1)
    return {
        "name": "denoise",
        "seconds": seconds,
        "seconds_all": solve_s,
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "matmul_shape": [block, nv, nh],
        "ratio_to_matmul_full_batch": gflops / ref_full,
        "matmul_gflops_full_batch": ref_full,
        "timing": "cpu time, 1 thread" if torch.device(device).type == "cpu" else "wall time",
        "repeats": repeats,
        "rows": k,
        "converged": int(state.converged.sum()),
        "iterations_mean": float(row_iters.mean()),
        "iterations_max": int(row_iters.max()),
        "mcc_by_p": {f"{p:g}": float(v) for p, v in zip(ps, mcc, strict=True)},
        "model": model,
        "data": source,
    }


def _iteration_and_matmuls(machine, x, iters: int, device, g) -> tuple[float, float]:
    """Seconds per TAP iteration of ``machine`` from ``x`` and per four matmuls of the same
    shapes (best of 3 each)."""
    W = machine.weights[0]
    W2 = W.square()
    k, (nv, nh) = x.shape[0], W.shape
    a_v = torch.rand(k, nv, generator=g).to(device)
    a_h = torch.rand(k, nh, generator=g).to(device)

    def solve():
        tap.solve(machine, x, tol=0.0, max_iter=iters)

    def four_matmuls():
        for _ in range(iters):
            torch.mm(a_v, W), torch.mm(a_v, W2), torch.mm(a_h, W.T), torch.mm(a_h, W2.T)

    seconds = min(_seconds(solve, device) for _ in range(3)) / iters
    return seconds, min(_seconds(four_matmuls, device) for _ in range(3)) / iters


def _damped_bernoulli_update(field, A, a_old, c_old, damping: float):
    """The elementwise rest of one binary layer's damped TAP update, written out of place for
    ``torch.compile`` to fuse (``tap.solve`` runs it eagerly, in place: ``_eager_update``)."""
    a_new = torch.sigmoid(field + A * a_old)
    diff = a_new - a_old
    step = diff.square().sum(1) * (1.0 - damping) ** 2
    return a_old + (1.0 - damping) * diff, torch.lerp(a_new * (1.0 - a_new), c_old, damping), step


def _eager_update(field, A, a_old, c_old, damping: float):
    """``_damped_bernoulli_update`` as ``tap.solve`` computes it (``field`` is overwritten)."""
    B = field.addcmul_(A, a_old)
    a_new = torch.sigmoid(B)
    c_new = a_new * (1.0 - a_new)
    diff = a_new.sub_(a_old)
    step = torch.linalg.vector_norm(diff, dim=1).square_().mul_((1.0 - damping) ** 2)
    return torch.add(a_old, diff, alpha=1.0 - damping), c_new.lerp_(c_old, damping), step


def _fusion_speedup(k: int, n: int, device) -> float:
    """Time of the solver's eager elementwise update over the ``torch.compile``d one on (k, n)
    operands (best of 5 x 200 calls each; the results agree to 1e-5); NaN where compiling
    fails here."""
    args = [torch.rand(k, n, device=device) for _ in range(4)]
    try:
        fused = torch.compile(_damped_bernoulli_update, dynamic=False)
        want = fused(*args, 0.5)
    except Exception as exc:  # no compiler toolchain: say so, measure the rest
        print(f"tap_iteration: torch.compile unavailable ({exc!r:.200})", file=sys.stderr)
        return float("nan")
    got = _eager_update(args[0].clone(), *args[1:], 0.5)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(w, g, rtol=1e-5, atol=1e-5)

    def calls(fn):
        for _ in range(200):
            fn(args[0].clone() if fn is _eager_update else args[0], *args[1:], 0.5)

    def clones():
        for _ in range(200):
            args[0].clone()

    eager = min(_seconds(lambda: calls(_eager_update), device) for _ in range(5))
    eager -= min(_seconds(clones, device) for _ in range(5))  # the copy only the timing needs
    return eager / min(_seconds(lambda: calls(fused), device) for _ in range(5))


def bench_tap_iteration(device, quick: bool) -> dict:
    """One TAP iteration (Alg. 1, both layers, damped) at the paper's batch K = 100, Nh = 100
    and 500: the unit of converged training (up to 100 per minibatch), of Figs. 5-7's harvest
    and of the evaluation.

    Operation count per iteration: four matmuls (a W, c W^2, a_h W^T, c_h (W^2)^T), 4 x 2 K Nv
    Nh. ``matmul_share_nh{N}`` is the time of those four matmuls alone over the iteration's: what
    is left (priors' moments, damping, the step norm) is all that fusing the elementwise work
    (e.g. ``torch.compile``) could save. ``hidden_update_fusion_speedup_nh{N}``: how much faster
    ``torch.compile`` makes the hidden layer's elementwise update (``_damped_bernoulli_update``;
    not with ``--quick``, which skips the compile).
    """
    nv, k = 784, 100
    iters = 20 if quick else 100
    x, source = binary_mnist(k)
    x = x.to(device)
    g = torch.Generator().manual_seed(0)
    result = {"name": "tap_iteration", "batch": k, "iterations": iters, "data": source}
    for nh in (100, 500):
        W = 0.05 * torch.randn(nv, nh, generator=g)
        machine = RBM(W, Bernoulli(torch.zeros(nv)), Bernoulli(torch.zeros(nh))).to(device)
        seconds, matmul_seconds = _iteration_and_matmuls(machine, x, iters, device, g)
        gflops = 8.0 * k * nv * nh / seconds / 1e9
        ref = matmul_gflops(k, nv, nh, device)
        result[f"seconds_nh{nh}"] = seconds
        result[f"ratio_to_matmul_nh{nh}"] = gflops / ref
        result[f"matmul_share_nh{nh}"] = matmul_seconds / seconds
        fusion = _fusion_speedup(k, nh, device) if not quick else float("nan")
        result[f"hidden_update_fusion_speedup_nh{nh}"] = fusion
    # the headline numbers are Nh = 500's (the paper run's longest job)
    result.update(seconds=seconds, gflops=gflops, ratio_to_matmul=gflops / ref, matmul_gflops=ref)
    return result


def bench_adatap(device, quick: bool) -> dict:
    """One adaTAP (VAMP, Alg. 3) iteration on a 784 x 500 binary RBM at batch K = 100 (Fig. 10).

    Operation count per row (Schur complement onto the 500 hidden units, ``adatap``): forming
    S = D_h - W^T D_v^{-1} W (2 Nv Nh^2), its inverse (2 Nh^3, LU and solve), D_v^{-1} W S^{-1}
    (2 Nv Nh^2). The matmul reference is the float32 rate on (Nh x Nv) @ (Nv x Nh). Also the
    time of one TAP iteration at the same batch, and their ratio (the paper: ~3 orders).
    """
    from tapmachine.core import adatap

    nv, nh = 784, 500
    k = 20 if quick else 100
    g = torch.Generator().manual_seed(0)
    W = 0.01 * torch.randn(nv, nh, generator=g)
    machine = RBM(W, Bernoulli(torch.zeros(nv)), Bernoulli(torch.zeros(nh))).to(device)
    x, source = binary_mnist(k)
    x = x.to(device)
    adatap.solve(machine, x, tol=0.0, max_iter=1)  # warm-up
    iters = 2
    _sync(device)
    t0 = time.perf_counter()
    adatap.solve(machine, x, tol=0.0, max_iter=iters)
    _sync(device)
    seconds = (time.perf_counter() - t0) / iters
    t0 = time.perf_counter()
    tap.solve(machine, x, tol=0.0, max_iter=50)
    _sync(device)
    tap_seconds = (time.perf_counter() - t0) / 50
    flops = k * (4.0 * nv * nh * nh + 2.0 * nh**3)
    gflops = flops / seconds / 1e9
    ref = matmul_gflops(nh, nv, nh, device, repeats=5)
    return {
        "name": "adatap",
        "seconds": seconds,
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "batch": k,
        "tap_seconds_per_iteration": tap_seconds,
        "adatap_over_tap": seconds / tap_seconds,
        "data": source,
    }


# ----------------------------------------------------------------------------------------------
# tap_solve: the accelerated TAP solver against Alg. 1 on trained checkpoints
# ----------------------------------------------------------------------------------------------

#: Models (Table 1's binary-MNIST RBMs) and epochs (early, middle, late) of ``tap_solve``.
SOLVE_MODELS = {"bmnist_h25": 25, "bmnist_h50": 50, "bmnist_h100": 100, "bmnist_h500": 500}
SOLVE_EPOCHS = (1, 10, 30)
#: Where ``tap_solve`` and ``paper_profile`` find (or train) their checkpoints: DIR/{model}/
#: epoch_{e}.pt (``--checkpoints``).
CHECKPOINTS = ROOT / "results" / "bench_checkpoints"


def train_checkpoints(directory: Path, epochs: int, quick: bool) -> None:
    """Train the ``SOLVE_MODELS`` on binary MNIST with Table 1's optimiser (lr 0.005, momentum
    0.5, l2 0.001, batch 100), 3 TAP iterations per step and no per-epoch evaluation, keeping a
    checkpoint after every epoch under ``directory/{model}`` (resumed if already there).

    Not the paper's converged training (hours): the weights grow as the paper's do, and the
    solver comparison needs models at early, middle and late points of training, not the paper's
    exact parameters."""
    x, _ = binary_mnist(6000 if quick else None)
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli"}]}
    for name, nh in SOLVE_MODELS.items():
        settings = training.TrainSettings(
            epochs=epochs,
            batch_size=100,
            learning_rate=0.005,
            momentum=0.5,
            l2=0.001,
            train_iterations=3,
            evaluate=False,
        )
        model_spec = {**spec, "hidden": [{"prior": "bernoulli", "units": nh}]}
        g = training.seeded_generator(2026, name, "train")
        machine = training.build_machine(model_spec, x, settings.weight_init_std, g)
        training.train(machine, x, settings, g, checkpoint_dir=directory / name, progress=False)


def _checkpoints(directory: Path, quick: bool) -> list[tuple[str, int, Path]]:
    """(model, epoch, path) of ``SOLVE_MODELS`` x ``SOLVE_EPOCHS`` (quick: epochs 1-2),
    training what is missing."""
    epochs = (1, 2) if quick else SOLVE_EPOCHS
    want = [(n, e, directory / n / f"epoch_{e}.pt") for n in SOLVE_MODELS for e in epochs]
    if not all(path.exists() for _, _, path in want):
        print(f"training the checkpoints of tap_solve under {directory}", file=sys.stderr)
        train_checkpoints(directory, max(epochs), quick)
    return want


def _cpu_timed(fn):
    """(result, CPU seconds of this process): one torch thread's time, not the shared load's."""
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def _quantiles(t: torch.Tensor) -> tuple[float, float]:
    t = t.double()
    return float(t.median()), float(torch.quantile(t, 0.9))


def _continued(machine, state, **kw):
    """``tap.solve`` from where ``state`` stopped (its a, c of every layer)."""
    return tap.solve(
        machine, state.a[0], c_visible=state.c[0], a_hidden=state.a[1:], c_hidden=state.c[1:], **kw
    )


def _tight(machine, state, solver: str, tol: float, max_iter: int):
    """``state`` continued by ``solver`` to ``tol``; for Alg. 1, rows still not converged get
    the 0.95-damped second pass (``tap.solve_with_retry``'s, at its tolerance)."""
    out = _continued(machine, state, solver=solver, tol=tol, max_iter=max_iter)
    if solver == "damped" and not bool(out.converged.all()):
        rows = torch.nonzero(~out.converged, as_tuple=True)[0]
        retry_tol = tap.retry_tolerance(tol, 0.5, 0.95)
        again = _continued(
            machine, out.select(rows), damping=0.95, tol=retry_tol, max_iter=max_iter
        )
        for merged, new in zip(out.a, again.a, strict=True):
            merged[rows] = new
        out.converged[rows] = again.converged
    return out


def solver_comparison(machine, x, tol=1e-8, cap=1000, ref_tol=1e-16) -> dict:
    """Alg. 1 (damped 0.5) against the Anderson solver from the same starts ``x`` (float64).

    Both to ``tol`` (cap ``cap``): iterations per row (median, 90th percentile; unconverged rows
    count as ``cap``), converged share, CPU seconds. The fixed point each start reaches under
    Alg. 1 is its damped iterate continued to ``ref_tol`` (up to 2 ``cap`` more iterations, then
    the 0.95-damped second pass for rows that cycle); each Anderson result is continued by
    Anderson to ``ref_tol`` too and compared with it (max-abs over all units:
    ``same_fixed_point_share`` within 1e-4, over rows converged in both): the basin agreement.
    ``*_stop_error_median``: how far the rows stopped at ``tol`` lie from their own solver's
    tight fixed point.
    """
    kw = {"damping": 0.5, "tol": tol, "max_iter": cap}
    damped, t_damped = _cpu_timed(lambda: tap.solve(machine, x, **kw))
    fast, t_fast = _cpu_timed(lambda: tap.solve(machine, x, solver="anderson", **kw))
    ref = _tight(machine, damped, "damped", ref_tol, 2 * cap)
    fast_ref = _tight(machine, fast, "anderson", ref_tol, 2 * cap)
    both = ref.converged & fast_ref.converged
    gap = (ref.magnetisations() - fast_ref.magnetisations()).abs().amax(1)[both]

    def stop_error(stopped, tight):
        rows = stopped.converged & tight.converged
        err = (stopped.magnetisations() - tight.magnetisations()).abs().amax(1)[rows]
        return float(err.median()) if rows.any() else float("nan")

    d_med, d_p90 = _quantiles(damped.iterations)
    a_med, a_p90 = _quantiles(fast.iterations)
    return {
        "rows": int(x.shape[0]),
        "iterations_damped_median": d_med,
        "iterations_damped_p90": d_p90,
        "iterations_anderson_median": a_med,
        "iterations_anderson_p90": a_p90,
        "iterations_ratio": d_med / a_med,
        "seconds_damped": t_damped,
        "seconds_anderson": t_fast,
        "seconds_ratio": t_damped / t_fast,
        "converged_share_damped": float(damped.converged.double().mean()),
        "converged_share_anderson": float(fast.converged.double().mean()),
        "reference_converged_share": float(ref.converged.double().mean()),
        "anderson_tight_converged_share": float(fast_ref.converged.double().mean()),
        "same_fixed_point_share": float((gap <= 1e-4).double().mean()) if both.any() else None,
        "same_fixed_point_rows": int(both.sum()),
        "max_abs_delta_a": float(gap.max()) if both.any() else None,
        "median_abs_delta_a": float(gap.median()) if both.any() else None,
        "damped_stop_error_median": stop_error(damped, ref),
        "anderson_stop_error_median": stop_error(fast, fast_ref),
    }


def bench_tap_solve(device, quick: bool, checkpoints: Path | None = None) -> list[dict]:
    """Anderson mixing against Alg. 1 on trained binary-MNIST checkpoints (issue item 2): one
    result per checkpoint of ``SOLVE_MODELS`` x ``SOLVE_EPOCHS`` (``solver_comparison`` on the
    first 500 training images, float64, one torch thread, CPU seconds). Checkpoints are read
    from ``--checkpoints`` (default ``CHECKPOINTS``) or trained there (``train_checkpoints``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        directory = Path(checkpoints or CHECKPOINTS)
        rows = 100 if quick else 500
        x, source = binary_mnist(rows)
        x = x.to(device=device, dtype=torch.float64)
        out = []
        for name, epoch, path in _checkpoints(directory, quick):
            machine = training.load_model(path, device=device, dtype=torch.float64)
            result = {"name": "tap_solve", "model": name, "epoch": epoch, "data": source}
            result.update(solver_comparison(machine, x, cap=300 if quick else 1000))
            result.update(seconds=result["seconds_anderson"], gflops=None, ratio_to_matmul=None)
            print(json.dumps(result), flush=True)
            out.append(result)
        return out
    finally:
        torch.set_num_threads(threads)


BENCHMARKS = {
    "tap_epoch": bench_tap_epoch,
    "tap_iteration": bench_tap_iteration,
    "denoise": bench_denoise,
    "harvest": bench_harvest,
    "ais": bench_ais,
    "priors": bench_priors,
    "paper_profile": bench_paper_profile,
    "tap_solve": bench_tap_solve,
    "adatap": bench_adatap,
    "ucd_coupling": bench_ucd_coupling,
    "ucd_train_step": bench_ucd_train_step,
    "dbm_ais": bench_dbm_ais,
}

#: Benchmarks that take ``checkpoints`` (``--checkpoints``).
_USES_CHECKPOINTS = {"tap_solve", "paper_profile"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"any of {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for smoke tests")
    p.add_argument("--no-tracking", action="store_true")
    p.add_argument(
        "--ucd-sizes",
        default=None,
        help="ucd_train_step's layer sizes, e.g. 784,784,784 (default) or 6272,6272,6272",
    )
    p.add_argument("--ucd-batch", type=int, default=None, help="ucd_train_step's batch (1,000)")
    p.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        help=f"tap_solve, paper_profile: DIR/{{model}}/epoch_{{e}}.pt to read or train "
        f"(default {CHECKPOINTS.relative_to(ROOT)})",
    )
    args = p.parse_args(argv)
    if args.ucd_sizes:
        UCD_STEP["sizes"] = [int(n) for n in args.ucd_sizes.split(",")]
    if args.ucd_batch:
        UCD_STEP["batch"] = args.ucd_batch
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
        fn = BENCHMARKS[name]
        if name in _USES_CHECKPOINTS:
            results = fn(args.device, args.quick, checkpoints=args.checkpoints)
        else:
            results = fn(args.device, args.quick)
        printed = isinstance(results, list)  # one line per checkpoint, printed as measured
        for result in results if printed else [results]:
            result.update(env)
            result["quick"] = args.quick
            if not printed:
                print(json.dumps(result), flush=True)
            with tracking.start_run(manifest, "benchmarks", name, params=env) as run:
                run.log_metrics({k: v for k, v in result.items() if isinstance(v, int | float)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
