"""``tap_converged_epoch``: bmnist_h500's converged training steps (Alg. 2 calling Alg. 1 until
convergence, as ``workflow/config/paper.yaml`` trains it) on a bounded number of minibatches,
projected to an epoch: eager, and on CUDA with the sweeps replayed as captured chunks
(``train.graphs.ChunkedSteps``) and against the same steps on two CPU threads. On CUDA also the
chunk sizes (``tap.cuda_graph_sweeps``) and the fused update (``tap.fuse``) side by side, the
share of a step spent in its solve, and the captured steps' distance from the eager ones step
by step, with the model term over unique solutions and over all of them."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch

from benchmarks.checkpoints import CHECKPOINTS
from benchmarks.common import binary_mnist, sync
from benchmarks.tap_iteration import graph_unavailable
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine, graphs, load_model, train
from tapmachine.train.tap_gradient import tap_step_gradients
from tapmachine.train.update import apply_update, check_finite, momentum_at

__all__ = [
    "PAPER_H500",
    "bench_tap_converged_epoch",
    "checkpoint_or_warm",
    "first_batches",
    "run_steps",
]

#: paper.yaml's bmnist_h500 (Table 1, converged steps by ``newton_sor`` within 2,000 sweeps, the
#: model term over unique solutions), without the per-epoch evaluation.
PAPER_H500 = {
    "batch_size": 100,
    "n_solutions": 100,
    "learning_rate": 0.005,
    "momentum": 0.5,
    "l2": 0.001,
    "weight_init_std": 0.001,
    "train_iterations": "converge",
    "train_tol": 1e-8,
    "train_max_iter": 2000,
    "train_unique": True,
    "solver": "newton_sor",
    "tol": 1e-8,
    "evaluate": False,
}
#: The checkpoint measured on when ``--checkpoints`` holds it (``checkpoints.solve_checkpoints``).
CHECKPOINT = ("bmnist_h500", 10)
#: Without it: epochs of 3-iteration training from the paper's start that give the steps
#: weights of a model in training (a fresh one converges in a few sweeps).
WARM_EPOCHS = 2
#: Seconds after which the eager steps and the CPU's stop (at the step that passes them): a
#: late model's steps take up to ``train_max_iter`` sweeps.
BUDGETS = (20.0, 15.0)
#: Sweeps per captured chunk compared on CUDA (``tap.cuda_graph_sweeps``; the config's default
#: is 10): fewer host synchronisations against more sweeps past the slowest row's last.
CHUNK_SIZES = (5, 10, 20, 40, 80)


def _checkpoint(directory: Path, name: str, epoch: int) -> Path | None:
    """``directory/name/epoch_{epoch}.pt``, else that model's latest epoch there, else None."""
    wanted = directory / name / f"epoch_{epoch}.pt"
    if wanted.exists():
        return wanted
    found = sorted(
        (directory / name).glob("epoch_*.pt"), key=lambda p: int(p.stem.removeprefix("epoch_"))
    )
    return found[-1] if found else None


def checkpoint_or_warm(
    name: str, nh: int, x, device, quick: bool, checkpoints, epoch: int = CHECKPOINT[1]
) -> tuple:
    """The binary-MNIST RBM of ``nh`` hidden units the steps start from, and where it came
    from: checkpoint ``epoch`` of model ``name`` under ``checkpoints`` (``CHECKPOINTS`` when
    None), else its latest checkpoint there, else a machine after ``WARM_EPOCHS`` (quick: 1) of
    3-iteration training from the paper's start."""
    path = _checkpoint(Path(checkpoints or CHECKPOINTS), name, epoch)
    if path is not None:
        return load_model(path, device=device, dtype=torch.float32), f"{path} ({name})"
    epochs = 1 if quick else WARM_EPOCHS
    fixed = dataclasses.replace(
        TrainSettings(**PAPER_H500), train_iterations=3, epochs=epochs, eval_samples=1
    )
    g = seeded_generator(2026, name, "train")
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": nh}]}
    machine = build_machine(spec, x, fixed.weight_init_std, g).to(device)
    print(f"{name}: {epochs} epoch(s) of 3-iteration training first", file=sys.stderr)
    machine, _ = train(machine, x.to(device), fixed, g, progress=False)
    return machine, f"{name} after {epochs} epoch(s) of 3-iteration training on {x.shape[0]} rows"


def first_batches(x, n: int, size: int = PAPER_H500["batch_size"]) -> list:
    """The first ``n`` minibatches of ``size`` rows of ``x`` in one fixed order (seed 0): every
    benchmark of converged steps times the same ones."""
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))
    return [x[order[b * size : (b + 1) * size]] for b in range(n)]


def run_steps(
    machine, batches, settings, device, steps=None, budget=float("inf")
) -> tuple[list, object, dict]:
    """Alg. 2's steps from ``machine`` on ``batches`` (eager, or by ``steps``: captured chunks),
    stopping after the step that passes ``budget`` seconds: each step's wall seconds (the device
    waited for), the final machine, the steps' statistics."""
    velocity = [torch.zeros_like(W) for W in machine.weights]
    eta = momentum_at(settings.momentum, 1)
    g = torch.Generator().manual_seed(0)
    stats: dict = {}
    seconds = []
    if steps is not None:
        steps.begin(machine, velocity, settings.learning_rate, eta)
    for b, x in enumerate(batches):
        x = x.to(device)
        sync(device)
        t0 = time.perf_counter()
        if steps is None:
            grads = tap_step_gradients(machine, x, settings, g, stats)
            machine = apply_update(machine, grads, velocity, settings.learning_rate, settings, eta)
            check_finite(machine, 1, b)
        else:
            steps.step(x, g, stats, 1, b)
        sync(device)
        seconds.append(time.perf_counter() - t0)
        if sum(seconds) > budget:
            break
    return seconds, (machine if steps is None else steps.end(1)), stats


def _captured_seconds(machine, batches, settings, device) -> float | None:
    """Seconds per step of ``batches`` as captured chunks (``ChunkedSteps``), timed on a second
    pass whose graphs the first captured; None where a capture failed."""
    steps = graphs.ChunkedSteps(machine, settings, graphs.cuda_record)
    run_steps(machine, batches, settings, device, steps)
    if steps.solve.record.failed is not None:
        return None
    seconds, _, _ = run_steps(machine, batches, settings, device, steps)
    return sum(seconds) / len(seconds)


def _chunk_sizes(machine, batches, settings, device) -> dict:
    """Captured seconds per step at each of ``CHUNK_SIZES`` sweeps a chunk, and with the fused
    damped update (``tap.fuse``, compiled) at the configured chunk size."""
    out = {
        f"seconds_per_step_graph_chunk{size}": _captured_seconds(
            machine, batches, dataclasses.replace(settings, cuda_graph_sweeps=size), device
        )
        for size in CHUNK_SIZES
    }
    fused = dataclasses.replace(settings, fuse=True)
    out["seconds_per_step_graph_fused"] = _captured_seconds(machine, batches, fused, device)
    return out


class _TimedSolve:
    """A step's solve (``ChunkedSolver``) that adds its wall seconds, the device waited for on
    entry and exit, to ``seconds``."""

    def __init__(self, solve, device):
        self.solve, self.device, self.seconds = solve, device, 0.0

    def __call__(self, *args, **kwargs):
        sync(self.device)
        t0 = time.perf_counter()
        state = self.solve(*args, **kwargs)
        sync(self.device)
        self.seconds += time.perf_counter() - t0
        return state


def _solve_share(machine, batches, settings, device) -> float:
    """The share of a captured step's wall time spent in its solve (the chunks and the host
    check between them); the rest is the eager part of the step (the unique solutions, eqs.
    (40)-(42), the update and its finiteness check)."""
    steps = graphs.ChunkedSteps(machine, settings, graphs.cuda_record)
    run_steps(machine, batches, settings, device, steps)
    timed = _TimedSolve(steps.solve, device)
    steps.solve = timed
    seconds, _, _ = run_steps(machine, batches, settings, device, steps)
    return timed.seconds / sum(seconds)


#: Steps after which the captured and eager couplings are compared (``_distance_by_step``).
DISTANCE_STEPS = (1, 3, 10)
#: Minibatches of the comparisons on CUDA (chunk sizes, solve share, distances): a late
#: model's step can run its slowest row to ``train_max_iter`` sweeps.
EXTRA_STEPS = 10


def _distance_by_step(machine, batches, settings, device) -> list[float]:
    """max |W_captured - W_eager| after each of ``DISTANCE_STEPS`` steps (those within
    ``batches``) from one machine: float32 rounding after one step, and how far a rounding
    difference carries, e.g. through a row that converges one sweep apart or a pair of
    solutions that counts as one in one run and as two in the other."""
    steps = graphs.ChunkedSteps(machine, settings, graphs.cuda_record)
    out = []
    for k in (k for k in DISTANCE_STEPS if k <= len(batches)):
        _, eager, _ = run_steps(machine, batches[:k], settings, device)
        _, captured, _ = run_steps(machine, batches[:k], settings, device, steps)
        out.append(float((captured.W - eager.W).abs().max()))
    return out


def _top_device_ops(machine, batches, settings, device, n: int = 12) -> list | str:
    """The ``n`` operations with the most device time over captured steps of ``batches``
    (``torch.profiler``; graphs captured on a first pass), as [name, calls, device ms, CPU ms];
    the error where the profiler fails."""
    steps = graphs.ChunkedSteps(machine, settings, graphs.cuda_record)
    run_steps(machine, batches, settings, device, steps)
    try:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=activities) as prof:
            run_steps(machine, batches, settings, device, steps)
        rows = []
        for e in prof.key_averages():
            device_us = getattr(e, "self_device_time_total", None)
            if device_us is None:
                device_us = getattr(e, "self_cuda_time_total", 0.0)
            rows.append([e.key, e.count, device_us / 1e3, e.self_cpu_time_total / 1e3])
        return sorted(rows, key=lambda r: -r[2])[:n]
    except Exception as exc:  # a profiler that cannot run here is a result, not a failure
        return f"profiler failed: {exc!r:.300}"


def _summary(tag: str, seconds: list, stats: dict, per_epoch: int) -> dict:
    per_step = sum(seconds) / len(seconds)
    return {
        f"seconds_per_step_{tag}": per_step,
        f"epoch_seconds_{tag}": per_step * per_epoch,
        f"steps_{tag}": len(seconds),
        f"mean_row_iterations_{tag}": stats["iterations"] / stats["steps"],
        f"converged_fraction_{tag}": stats["converged"] / stats["steps"],
    }


def bench_tap_converged_epoch(device, quick: bool, checkpoints: Path | None = None) -> dict:
    """bmnist_h500's converged steps (``PAPER_H500``) on the first minibatches of a fixed order
    (40, or those done within ``BUDGETS[0]`` seconds eager; quick: 5), from checkpoint
    ``CHECKPOINT`` under ``--checkpoints`` (``checkpoint_or_warm``: else its latest there, else
    a model after ``WARM_EPOCHS`` of 3-iteration training); seconds per step and the epoch (600
    steps) projected from them. ``seconds`` is the epoch by captured chunks on CUDA
    (``*_graph``, timed on a second pass, its graphs captured on the first), else the eager one.

    On CUDA also: ``graph_speedup`` (eager over captured, same steps), the captured steps'
    final couplings against the eager ones (``graph_max_abs_diff_w``, float32 rounding
    expected, though a start that converges a sweep apart can carry a run off:
    ``rounding_drift``), and the first 8 steps (quick: 2; those done within ``BUDGETS[1]``
    seconds) on two CPU threads, wall seconds on this host (``*_cpu2``), with
    ``speedup_vs_cpu2`` over the same steps captured: the goal's 10x. On the first
    ``EXTRA_STEPS`` minibatches: ``_chunk_sizes``, ``_solve_share``, ``_distance_by_step`` with
    the model term over unique and over all solutions, and ``_top_device_ops`` (5 steps).
    """
    x, source = binary_mnist(6000 if quick else None)
    machine, model = checkpoint_or_warm(CHECKPOINT[0], 500, x, device, quick, checkpoints)
    settings = TrainSettings(**PAPER_H500, epochs=1)
    n_steps, n_cpu = (5, 2) if quick else (40, 8)
    per_epoch = 60000 // settings.batch_size
    batches = first_batches(x, n_steps)
    result = {"name": "tap_converged_epoch", "model": model, "data": source}
    result.update({k: v for k, v in PAPER_H500.items() if k.startswith(("train_", "solver"))})
    run_steps(machine, batches[:1], settings, device)  # the device's start-up, untimed
    seconds, eager, stats = run_steps(machine, batches, settings, device, budget=BUDGETS[0])
    batches = batches[: len(seconds)]
    result.update(_summary("eager", seconds, stats, per_epoch))
    unavailable = graph_unavailable(device)
    result["graph"] = unavailable or "cuda_graph"
    result["seconds"] = result["epoch_seconds_eager"]
    result.update(gflops=None, ratio_to_matmul=None)
    if unavailable is not None:
        return result
    steps = graphs.ChunkedSteps(machine, settings, graphs.cuda_record)
    t0 = time.perf_counter()
    run_steps(machine, batches, settings, device, steps)  # captures every chunk's graph
    result["graph_first_pass_seconds"] = time.perf_counter() - t0
    if steps.solve.record.failed is not None:
        result["graph"] = f"capture failed: {steps.solve.record.failed}"
        return result
    graph_seconds, captured, graph_stats = run_steps(machine, batches, settings, device, steps)
    result.update(_summary("graph", graph_seconds, graph_stats, per_epoch))
    result["seconds"] = result["epoch_seconds_graph"]
    result["graph_chunks_captured"] = len(steps.solve.graphs)
    result["graph_speedup"] = sum(seconds) / sum(graph_seconds)
    result["graph_max_abs_diff_w"] = float((captured.W - eager.W).abs().max())
    few = batches[:EXTRA_STEPS]
    result.update(_chunk_sizes(machine, few, settings, device))
    result["solve_share_graph"] = _solve_share(machine, few, settings, device)
    for unique in (True, False):
        s = dataclasses.replace(settings, train_unique=unique)
        distances = _distance_by_step(machine, few, s, device)
        result[f"graph_max_abs_diff_w_by_step_unique_{str(unique).lower()}"] = distances
    result["top_device_ops"] = _top_device_ops(machine, batches[:5], settings, device)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cpu_batches = [b.cpu() for b in batches[:n_cpu]]
        cpu_seconds, _, cpu_stats = run_steps(
            machine.to("cpu"), cpu_batches, settings, "cpu", budget=BUDGETS[1]
        )
    finally:
        torch.set_num_threads(threads)
    result.update(_summary("cpu2", cpu_seconds, cpu_stats, per_epoch))
    result["speedup_vs_cpu2"] = sum(cpu_seconds) / sum(graph_seconds[: len(cpu_seconds)])
    return result
