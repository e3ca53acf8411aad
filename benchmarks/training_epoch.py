"""``tap_epoch``: one TAP training epoch (Alg. 2) on binary-MNIST, against scikit-learn's PCD-1."""

from __future__ import annotations

import time

import numpy as np
import torch

from benchmarks.common import binary_mnist, matmul_gflops, sync
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine
from tapmachine.train.methods import gradients
from tapmachine.train.update import apply_update

__all__ = ["bench_tap_epoch", "sklearn_pcd_epoch"]


def bench_tap_epoch(device, quick: bool) -> dict:
    """One TAP training epoch (Alg. 2) on binary-MNIST: Nh=500, M=K=100, 3 damped iterations.

    Operation count per minibatch (M = K, Nv x Nh couplings): data term x W and x^T f(.)
    (2 x 2 M Nv Nh); per TAP iteration four matmuls (a W, c W^2, a_h W^T, c_h (W^2)^T:
    4 x 2 K Nv Nh); model term a^T a and c^T c (2 x 2 K Nv Nh).
    """
    nv, nh, m, iters = 784, 500, 100, 3
    x, source = binary_mnist(6000 if quick else None)
    x = x.to(device)
    settings = TrainSettings(
        epochs=1,
        batch_size=m,
        learning_rate=0.005,
        momentum=0.5,
        l2=0.001,
        train_iterations=iters,
        eval_samples=1,
    )
    g = seeded_generator(0, "bench")
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": nh}]}
    machine = build_machine(spec, x, 0.01, g)
    n_batches = x.shape[0] // m
    velocity = [torch.zeros_like(W) for W in machine.weights]
    order = torch.randperm(x.shape[0], generator=g).to(device)
    sync(device)
    t0 = time.perf_counter()
    for b in range(n_batches):
        batch = x[order[b * m : (b + 1) * m]]
        grads = gradients(machine, batch, settings, None, g)
        machine = apply_update(machine, grads, velocity, 0.005, settings)
    sync(device)
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
