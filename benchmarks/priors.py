"""``priors``: ns per element of the truncated-Gaussian priors' special functions."""

from __future__ import annotations

import time

import torch

from benchmarks.common import sync
from tapmachine.core.priors import Bernoulli

__all__ = ["bench_priors"]


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
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
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
