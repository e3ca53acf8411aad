"""``ais`` and ``dbm_ais``: annealed importance sampling of an RBM (App. F) and of a DBM."""

from __future__ import annotations

import time

import torch

from benchmarks.common import matmul_gflops, sync
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli

__all__ = ["bench_ais", "bench_dbm_ais"]


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
    sync(device)
    t0 = time.perf_counter()
    res = estimators.ais_log_partition(machine, n_runs=runs, betas=betas, generator=gen)
    sync(device)
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
    sync(device)
    t0 = time.perf_counter()
    res = ais.dbm_ais_log_partition(
        machine, n_runs=runs, betas=ais.segmented_schedule(n_betas), generator=gen
    )
    sync(device)
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
