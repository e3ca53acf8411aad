"""``tap_epoch_compiled``: the fixed-iteration TAP step under ``torch.compile``'s reduce-overhead
mode (its own CUDA graphs, over the compiled kernels), against the same steps eager and captured
by ``train.graphs.WholeSteps``: the two ways of replaying a step as a graph, measured alike."""

from __future__ import annotations

import time

import torch

from benchmarks.common import binary_mnist, matmul_gflops, sync
from benchmarks.tap_iteration import graph_unavailable
from tapmachine.core import tap
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.core.seeding import seeded_generator
from tapmachine.core.tap import static
from tapmachine.train import TrainSettings, build_machine, graphs
from tapmachine.train.methods import gradients
from tapmachine.train.update import apply_update, momentum_at

__all__ = ["bench_tap_epoch_compiled", "functional_step"]

NV, NH, M, ITERS, LR = 784, 500, 100, 3, 0.005
SETTINGS = TrainSettings(
    epochs=1, batch_size=M, learning_rate=LR, momentum=0.5, l2=0.001, train_iterations=ITERS
)


def functional_step(W, U_v, U_h, velocity, x):
    """One fixed-iteration TAP step (``WholeSteps``' step) as a function of tensors, returning
    the new W, U_v, U_h and velocity, for ``torch.compile``: nothing changed in place."""
    machine = RBM(W, Bernoulli(U_v), Bernoulli(U_h))
    solver = SETTINGS.solver_settings
    states = static.solve_static(machine, x, ITERS, "damped", solver.damping, solver.tol)
    grads = tap.tap_gradients(machine, x, states)
    velocity = [velocity.clone()]
    new = apply_update(machine, grads, velocity, LR, SETTINGS, momentum_at(SETTINGS.momentum, 1))
    return new.W, new.visible.U, new.hidden.U, velocity[0]


def _start(x):
    g = seeded_generator(0, "bench")
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": NH}]}
    machine = build_machine(spec, x, 0.01, g)
    order = torch.randperm(x.shape[0], generator=g).to(x.device)
    return machine, g, order


def _timed(fn, n: int, device) -> list[float]:
    """Wall seconds of ``fn(b)`` for b < n, each after the device finished the one before."""
    out = []
    for b in range(n):
        sync(device)
        t0 = time.perf_counter()
        fn(b)
        sync(device)
        out.append(time.perf_counter() - t0)
    return out


def bench_tap_epoch_compiled(device, quick: bool, mode: str = "reduce-overhead") -> dict:
    """``tap_epoch``'s steps (Nh = 500, M = K = 100, 3 iterations) on its first 100 minibatches
    (quick: 20), three ways from the same start: eager, ``WholeSteps`` (captured by
    ``graphs.cuda_record``) and ``torch.compile(functional_step, mode=...)``; seconds per step
    past the first (``compile_seconds``: the compiled path's first step, compilation included),
    the epoch (600 steps) projected, ratios to the matmul rate, and each path's final couplings
    against the eager ones. Elsewhere than CUDA ``graph`` says why there is nothing to time."""
    result = {"name": "tap_epoch_compiled", "mode": mode}
    unavailable = graph_unavailable(device)
    result["graph"] = unavailable or "cuda_graph"
    if unavailable is not None:
        return result | {"seconds": None, "gflops": None, "ratio_to_matmul": None}
    n = 20 if quick else 100
    x, source = binary_mnist(n * M)
    x = x.to(device)
    ref = matmul_gflops(M, NV, NH, device)
    flops = 32 * M * NV * NH  # tap_epoch's count per minibatch at 3 iterations
    result.update(data=source, matmul_gflops=ref, steps=n)

    def batch(order, b):
        return x[order[b * M : (b + 1) * M]]

    machine, g, order = _start(x)
    velocity = [torch.zeros_like(machine.W)]

    def eager_step(b):
        nonlocal machine
        grads = gradients(machine, batch(order, b), SETTINGS, None, g)
        machine = apply_update(machine, grads, velocity, LR, SETTINGS)

    eager = _timed(eager_step, n, device)
    eager_w = machine.W

    machine, g, order = _start(x)
    steps = graphs.WholeSteps(machine, SETTINGS, graphs.cuda_record)
    steps.begin(machine, [torch.zeros_like(machine.W)], LR, momentum_at(SETTINGS.momentum, 1))
    graph = _timed(lambda b: steps.step(batch(order, b), g, {}, 1, b), n, device)
    graph_w = steps.end(1).W

    machine, g, order = _start(x)
    state = [machine.W, machine.visible.U, machine.hidden.U, torch.zeros_like(machine.W)]
    try:
        compiled = torch.compile(functional_step, mode=mode)

        def compiled_step(b):
            nonlocal state
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            state = [t.clone() for t in compiled(*state, batch(order, b))]

        times = _timed(compiled_step, n, device)
    except Exception as exc:  # a compiler failure is a result here
        result["compiled"] = f"failed: {exc!r:.300}"
        times = None
    for tag, seconds, w in (("eager", eager, eager_w), ("graph", graph, graph_w)):
        per_step = sum(seconds[1:]) / (n - 1)
        result[f"seconds_per_step_{tag}"] = per_step
        result[f"ratio_to_matmul_{tag}"] = flops / per_step / 1e9 / ref
        result[f"max_abs_diff_w_{tag}"] = float((w - eager_w).abs().max())
    if times is not None:
        per_step = sum(times[1:]) / (n - 1)
        result["compiled"] = "ok"
        result["compile_seconds"] = times[0]
        result["seconds_per_step_compiled"] = per_step
        result["ratio_to_matmul_compiled"] = flops / per_step / 1e9 / ref
        result["max_abs_diff_w_compiled"] = float((state[0] - eager_w).abs().max())
    best = min(("graph", "compiled"), key=lambda t: result.get(f"seconds_per_step_{t}", 1e9))
    result["faster"] = best
    per_step = result[f"seconds_per_step_{best}"]
    result.update(
        seconds=per_step * 600,
        gflops=flops / per_step / 1e9,
        ratio_to_matmul=flops / per_step / 1e9 / ref,
    )
    return result
