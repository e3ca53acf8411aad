"""``tap_epoch``: one TAP training epoch (Alg. 2) on binary-MNIST, eager, fused and (on CUDA) as
captured graphs, against scikit-learn's PCD-1."""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from benchmarks.common import binary_mnist, call_seconds, matmul_gflops
from benchmarks.tap_iteration import graph_unavailable
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine, graphs
from tapmachine.train.methods import gradients
from tapmachine.train.update import apply_update, momentum_at

__all__ = ["bench_tap_epoch", "sklearn_pcd_epoch"]


def bench_tap_epoch(device, quick: bool) -> dict:
    """One TAP training epoch (Alg. 2) on binary-MNIST: Nh=500, M=K=100, 3 damped iterations,
    eager and with the fused layer update (``tap.fuse``), from the same initial model; on CUDA
    also as captured graphs (``train.graphs.WholeSteps``: ``*_graph``, ``*_graph_fused``).

    Operation count per minibatch (M = K, Nv x Nh couplings): data term x W and x^T f(.)
    (2 x 2 M Nv Nh); per TAP iteration four matmuls (a W, c W^2, a_h W^T, c_h (W^2)^T:
    4 x 2 K Nv Nh); model term a^T a and c^T c (2 x 2 K Nv Nh). ``compile_seconds``: the first
    fused minibatch's CPU time (with the compiler's child processes) less a compiled one's
    (compilation, once per process); the matmul reference is timed in CPU seconds too;
    ``compiled_graphs``: the graphs compiled in this process by then (1: no recompilation).
    The graph epoch's ``seconds_graph`` leaves out its first minibatch (the capture, once per
    run at a constant step size: ``graph_capture_seconds``), projected to the whole epoch;
    ``graph_speedup`` is the eager epoch's seconds over it and ``graph_max_abs_diff_w`` the
    largest difference of the epoch's final couplings from the eager epoch's (float32 rounding
    expected). Elsewhere ``graph`` says why there is none.
    """
    nv, nh, m, iters = 784, 500, 100, 3
    x, source = binary_mnist(6000 if quick else None)
    x = x.to(device)
    n_batches = x.shape[0] // m
    flops = n_batches * (4 * m * nv * nh + iters * 8 * m * nv * nh + 4 * m * nv * nh)
    ref = _matmul_cpu_gflops(m, nv, nh, device)
    result = {"name": "tap_epoch", "matmul_gflops": ref, "images": int(x.shape[0]), "data": source}
    unavailable = graph_unavailable(device)
    result["graph"] = unavailable or "cuda_graph"
    for fuse in (False, True):
        compile_seconds, _ = _tap_epoch(x, m, nh, iters, fuse, device, first_batch_only=True)
        seconds, eager = _tap_epoch(x, m, nh, iters, fuse, device)
        tag = "_fused" if fuse else ""
        result[f"seconds{tag}"] = seconds
        result[f"gflops{tag}"] = flops / seconds / 1e9
        result[f"ratio_to_matmul{tag}"] = flops / seconds / 1e9 / ref
        if fuse:
            from torch._dynamo.utils import counters

            result["compile_seconds"] = compile_seconds - seconds / n_batches
            result["compiled_graphs"] = counters["stats"]["unique_graphs"]
        if unavailable is None:
            capture, graph_seconds, captured, failed = _tap_epoch_graph(
                x, m, nh, iters, fuse, device
            )
            if failed is not None:
                result[f"graph{tag}"] = f"capture failed: {failed}"
                continue
            result[f"seconds_graph{tag}"] = graph_seconds
            result[f"gflops_graph{tag}"] = flops / graph_seconds / 1e9
            result[f"ratio_to_matmul_graph{tag}"] = flops / graph_seconds / 1e9 / ref
            result[f"graph_speedup{tag}"] = seconds / graph_seconds
            result[f"graph_capture_seconds{tag}"] = capture
            result[f"graph_max_abs_diff_w{tag}"] = float((captured.W - eager.W).abs().max())
    result.update(sklearn_pcd_epoch(x.cpu().numpy(), nh, m, result["seconds"]))
    return result


def _epoch_settings(m: int, iters: int, fuse: bool) -> TrainSettings:
    return TrainSettings(
        epochs=1,
        batch_size=m,
        learning_rate=0.005,
        momentum=0.5,
        l2=0.001,
        train_iterations=iters,
        eval_samples=1,
        fuse=fuse,
    )


def _epoch_start(x, m, nh):
    """The initial model, the stream and the minibatch order every variant starts from."""
    g = seeded_generator(0, "bench")
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": nh}]}
    machine = build_machine(spec, x, 0.01, g)
    order = torch.randperm(x.shape[0], generator=g).to(x.device)
    return machine, g, order


def _tap_epoch(x, m, nh, iters, fuse, device, first_batch_only=False):
    """Seconds of one eager epoch of Alg. 2 (or of its first minibatch) from a fixed initial
    model (``call_seconds``: CPU seconds on a CPU, so the load of other processes does not
    count), and the model it ends with."""
    settings = _epoch_settings(m, iters, fuse)
    machine, g, order = _epoch_start(x, m, nh)
    n_batches = 1 if first_batch_only else x.shape[0] // m
    velocity = [torch.zeros_like(W) for W in machine.weights]

    def epoch():
        nonlocal machine
        for b in range(n_batches):
            batch = x[order[b * m : (b + 1) * m]]
            grads = gradients(machine, batch, settings, None, g)
            machine = apply_update(machine, grads, velocity, 0.005, settings)

    if first_batch_only and torch.device(device).type == "cpu":
        return _cpu_seconds_with_children(epoch), machine
    return call_seconds(epoch, device), machine


def _tap_epoch_graph(x, m, nh, iters, fuse, device):
    """The eager epoch of ``_tap_epoch`` as captured graphs (``graphs.WholeSteps`` on
    ``cuda_record``): the first minibatch's seconds (warm-up, capture and replay), the other
    minibatches' seconds projected to the whole epoch, the model it ends with, and why the capture
    failed (None: it did not; the steps then ran eagerly)."""
    settings = _epoch_settings(m, iters, fuse)
    machine, g, order = _epoch_start(x, m, nh)
    n_batches = x.shape[0] // m
    steps = graphs.WholeSteps(machine, settings, graphs.cuda_record)
    velocity = [torch.zeros_like(W) for W in machine.weights]
    steps.begin(machine, velocity, 0.005, momentum_at(settings.momentum, 1))

    def batches(start, stop):
        for b in range(start, stop):
            steps.step(x[order[b * m : (b + 1) * m]], g, {}, 1, b)

    capture = call_seconds(lambda: batches(0, 1), device)
    rest = call_seconds(lambda: batches(1, n_batches), device)
    seconds = rest * n_batches / (n_batches - 1)
    return capture, seconds, steps.end(1), steps.record.failed


def _cpu_seconds_with_children(fn) -> float:
    """CPU seconds of ``fn`` in this process and its finished child processes (the C++
    compiler that ``torch.compile`` runs)."""
    t0 = os.times()
    fn()
    t1 = os.times()
    return sum(t1[:4]) - sum(t0[:4])


def _matmul_cpu_gflops(m: int, k: int, n: int, device) -> float:
    """``matmul_gflops`` in CPU seconds on a CPU (best of 5 x 30), so that the reference and the
    epoch are timed alike whatever else loads the machine."""
    if torch.device(device).type != "cpu":
        return matmul_gflops(m, k, n, device)
    a, b = torch.rand(m, k), torch.rand(k, n)
    out = torch.empty(m, n)

    def thirty():
        for _ in range(30):
            torch.mm(a, b, out=out)

    best = min(call_seconds(thirty, device) for _ in range(5)) / 30
    return 2.0 * m * k * n / best / 1e9


def sklearn_pcd_epoch(x: np.ndarray, nh: int, m: int, tap_seconds: float) -> dict:
    """scikit-learn's BernoulliRBM (PCD-1) for one epoch on the same data, batch and Nh."""
    from sklearn.neural_network import BernoulliRBM

    rbm = BernoulliRBM(n_components=nh, batch_size=m, n_iter=1, learning_rate=0.005, random_state=0)
    t0 = time.perf_counter()
    rbm.fit(x.astype(np.float32))
    seconds = time.perf_counter() - t0
    return {"sklearn_pcd1_seconds": seconds, "tap_over_sklearn_time": tap_seconds / seconds}
