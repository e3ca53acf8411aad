"""``adatap``: one adaTAP (VAMP) iteration on a 784 x 500 RBM, against one TAP iteration."""

from __future__ import annotations

import time

import torch

from benchmarks.common import binary_mnist, matmul_gflops, sync
from tapmachine.core import tap
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli

__all__ = ["bench_adatap"]


def bench_adatap(device, quick: bool) -> dict:
    """One adaTAP (VAMP, Alg. 3) iteration on a 784 x 500 binary RBM at batch K = 100 (Fig. 10).

    Operation count per row (Schur complement onto the 500 hidden units, ``adatap``): forming
    S = D_h - W^T D_v^{-1} W (2 Nv Nh^2), its inverse (Nh^3: Cholesky, then the inverse from
    the factor), D_v^{-1} W S^{-1} (2 Nv Nh^2). The matmul reference is the float32 rate on
    (Nh x Nv) @ (Nv x Nh). Also the time of one TAP iteration at the same batch, and their ratio
    (the paper: ~3 orders).
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
    sync(device)
    t0 = time.perf_counter()
    adatap.solve(machine, x, tol=0.0, max_iter=iters)
    sync(device)
    seconds = (time.perf_counter() - t0) / iters
    t0 = time.perf_counter()
    tap.solve(machine, x, tol=0.0, max_iter=50)
    sync(device)
    tap_seconds = (time.perf_counter() - t0) / 50
    flops = k * (4.0 * nv * nh * nh + 1.0 * nh**3)
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
