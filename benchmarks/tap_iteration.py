"""``tap_iteration``: one TAP iteration (Alg. 1) at the paper's batch, against its four matmuls,
a ``torch.compile``d elementwise update and, on CUDA, the same sweeps replayed as a captured
graph."""

from __future__ import annotations

import sys

import torch

from benchmarks.common import binary_mnist, call_seconds, matmul_gflops
from tapmachine.core import tap
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.core.tap import static
from tapmachine.train import graphs

__all__ = ["bench_tap_iteration"]


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

    seconds = min(call_seconds(solve, device) for _ in range(3)) / iters
    return seconds, min(call_seconds(four_matmuls, device) for _ in range(3)) / iters


def graph_unavailable(device) -> str | None:
    """Why this device has no captured graphs to time (None on CUDA)."""
    if torch.device(device).type != "cuda":
        return f"unavailable: CUDA graphs need a CUDA device, not {torch.device(device).type}"
    return None


def _graph_iteration(machine, x, iters: int, device) -> float:
    """Seconds per TAP iteration of ``machine`` from ``x`` as ``iters`` sweeps at fixed shapes
    (``tap.static.run_sweeps``, no row converging) captured in one CUDA graph and replayed (best
    of 3): the same work as ``_iteration_and_matmuls``' eager solve, one launch."""
    buffers = static.StaticSolve.start(machine, x, iters)
    maps = static.StaticMaps.of(machine).maps()
    sweeps = static.chunk_key(range(2, iters + 2), "damped")

    def fn():
        static.run_sweeps(buffers, maps, sweeps, "damped", 0.5, 0.0)

    replay = graphs.cuda_record(fn, static.buffer_tensors(buffers))
    replay()
    return min(call_seconds(replay, device) for _ in range(3)) / iters


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

    eager = min(call_seconds(lambda: calls(_eager_update), device) for _ in range(5))
    eager -= min(call_seconds(clones, device) for _ in range(5))  # the copy only the timing needs
    return eager / min(call_seconds(lambda: calls(fused), device) for _ in range(5))


def bench_tap_iteration(device, quick: bool) -> dict:
    """One TAP iteration (Alg. 1, both layers, damped) at the paper's batch K = 100, Nh = 100
    and 500: the unit of converged training (up to 100 per minibatch), of Figs. 5-7's harvest
    and of the evaluation.

    Operation count per iteration: four matmuls (a W, c W^2, a_h W^T, c_h (W^2)^T), 4 x 2 K Nv
    Nh. ``matmul_share_nh{N}`` is the time of those four matmuls alone over the iteration's: what
    is left (priors' moments, damping, the step norm) is all that fusing the elementwise work
    (e.g. ``torch.compile``) could save. ``hidden_update_fusion_speedup_nh{N}``: how much faster
    ``torch.compile`` makes the hidden layer's elementwise update (``_damped_bernoulli_update``;
    not with ``--quick``, which skips the compile). On CUDA, ``seconds_graph_nh{N}`` and
    ``ratio_to_matmul_graph_nh{N}``: the iteration replayed as a captured graph
    (``_graph_iteration``); elsewhere ``graph`` says why there is none.
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
        if graph_unavailable(device) is None:
            graph_seconds = _graph_iteration(machine, x, iters, device)
            result[f"seconds_graph_nh{nh}"] = graph_seconds
            result[f"ratio_to_matmul_graph_nh{nh}"] = 8.0 * k * nv * nh / graph_seconds / 1e9 / ref
    result["graph"] = graph_unavailable(device) or "cuda_graph"
    if "ratio_to_matmul_graph_nh500" in result:
        result["ratio_to_matmul_graph"] = result["ratio_to_matmul_graph_nh500"]
    # the headline numbers are Nh = 500's (the paper run's longest job)
    result.update(seconds=seconds, gflops=gflops, ratio_to_matmul=gflops / ref, matmul_gflops=ref)
    return result
