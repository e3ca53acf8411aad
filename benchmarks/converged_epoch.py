"""``tap_converged_epoch``: bmnist_h500's converged training steps (Alg. 2 calling Alg. 1 until
convergence, as ``workflow/config/paper.yaml`` trains it) on a bounded number of minibatches,
projected to an epoch: eager, and on CUDA with the sweeps replayed as captured chunks
(``train.graphs.ChunkedSteps``) and against the same steps on two CPU threads."""

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

__all__ = ["PAPER_H500", "bench_tap_converged_epoch"]

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
SPEC = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 500}]}


def _model(x, device, quick: bool, checkpoints) -> tuple:
    """The machine the steps start from, and where it came from."""
    name, epoch = CHECKPOINT
    path = Path(checkpoints or CHECKPOINTS) / name / f"epoch_{epoch}.pt"
    if path.exists():
        return load_model(path, device=device, dtype=torch.float32), f"{path} ({name})"
    epochs = 1 if quick else WARM_EPOCHS
    fixed = dataclasses.replace(
        TrainSettings(**PAPER_H500), train_iterations=3, epochs=epochs, eval_samples=1
    )
    g = seeded_generator(2026, name, "train")
    machine = build_machine(SPEC, x, fixed.weight_init_std, g).to(device)
    print(f"tap_converged_epoch: {epochs} epoch(s) of 3-iteration training first", file=sys.stderr)
    machine, _ = train(machine, x.to(device), fixed, g, progress=False)
    return machine, f"{name} after {epochs} epoch(s) of 3-iteration training on {x.shape[0]} rows"


def _run_steps(
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
    ``CHECKPOINT`` under ``--checkpoints`` or else a model after ``WARM_EPOCHS`` of 3-iteration
    training; seconds per step and the epoch (600 steps) projected from them. ``seconds`` is
    the epoch by captured chunks on CUDA (``*_graph``, timed on a second pass, its graphs
    captured on the first), else the eager one.

    On CUDA also: ``graph_speedup`` (eager over captured, same steps), the captured steps'
    final couplings against the eager ones (``graph_max_abs_diff_w``, float32 rounding
    expected; the same row iteration counts), and the first 8 steps (quick: 2; those done within
    ``BUDGETS[1]`` seconds) on two CPU threads, wall seconds on this host (``*_cpu2``), with
    ``speedup_vs_cpu2`` over the same steps captured: the goal's 10x.
    """
    x, source = binary_mnist(6000 if quick else None)
    machine, model = _model(x, device, quick, checkpoints)
    settings = TrainSettings(**PAPER_H500, epochs=1)
    n_steps, n_cpu = (5, 2) if quick else (40, 8)
    per_epoch = 60000 // settings.batch_size
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))
    batches = [x[order[b * 100 : (b + 1) * 100]] for b in range(n_steps)]
    result = {"name": "tap_converged_epoch", "model": model, "data": source}
    result.update({k: v for k, v in PAPER_H500.items() if k.startswith(("train_", "solver"))})
    _run_steps(machine, batches[:1], settings, device)  # the device's start-up, untimed
    seconds, eager, stats = _run_steps(machine, batches, settings, device, budget=BUDGETS[0])
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
    _run_steps(machine, batches, settings, device, steps)  # captures every chunk's graph
    result["graph_first_pass_seconds"] = time.perf_counter() - t0
    if steps.solve.record.failed is not None:
        result["graph"] = f"capture failed: {steps.solve.record.failed}"
        return result
    graph_seconds, captured, graph_stats = _run_steps(machine, batches, settings, device, steps)
    result.update(_summary("graph", graph_seconds, graph_stats, per_epoch))
    result["seconds"] = result["epoch_seconds_graph"]
    result["graph_chunks_captured"] = len(steps.solve.graphs)
    result["graph_speedup"] = sum(seconds) / sum(graph_seconds)
    result["graph_max_abs_diff_w"] = float((captured.W - eager.W).abs().max())
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cpu_batches = [b.cpu() for b in batches[:n_cpu]]
        cpu_seconds, _, cpu_stats = _run_steps(
            machine.to("cpu"), cpu_batches, settings, "cpu", budget=BUDGETS[1]
        )
    finally:
        torch.set_num_threads(threads)
    result.update(_summary("cpu2", cpu_seconds, cpu_stats, per_epoch))
    result["speedup_vs_cpu2"] = sum(cpu_seconds) / sum(graph_seconds[: len(cpu_seconds)])
    return result
