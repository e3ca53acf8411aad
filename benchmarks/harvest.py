"""``harvest``: TAP from 10,000 data initialisations to convergence (Figs. 5-7)."""

from __future__ import annotations

import time

import torch

from benchmarks.common import binary_mnist, matmul_gflops, sync, trained_or_random
from tapmachine.core import tap

__all__ = ["bench_harvest"]


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
    sync(device)
    t0 = time.perf_counter()
    states = tap.solve(machine, x, damping=0.5, tol=1e-8, max_iter=2000)
    sync(device)
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
    sync(device)
    t0 = time.perf_counter()
    arrays = harvest.harvest(stage_machine, x.double(), harvest.HarvestSettings(max_iter=2000))
    sync(device)
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
