"""``tap_rounding_drift``: how far two converged trainings drift apart when their couplings start
a rounding error apart. Captured CUDA steps and eager ones differ by float32 rounding; this is
the same question on any device, with the difference made on purpose: bmnist_h500's converged
steps (``converged_epoch.PAPER_H500``) from one machine and from the same machine with its
couplings scaled by 1 + ``RELATIVE``, side by side."""

from __future__ import annotations

import dataclasses

from benchmarks.common import binary_mnist
from benchmarks.converged_epoch import (
    CHECKPOINT,
    PAPER_H500,
    checkpoint_or_warm,
    first_batches,
    run_steps,
)
from tapmachine.train import TrainSettings

__all__ = ["bench_tap_rounding_drift"]

#: The relative change of every coupling: about one float32 rounding step (2^-23 = 1.2e-7).
RELATIVE = 1e-7
#: Steps after which the two trainings are compared (quick: the first two).
STEPS = (1, 3, 10, 40)


def bench_tap_rounding_drift(device, quick: bool, checkpoints=None) -> dict:
    """max |W - W'| after each of ``STEPS`` steps of the two trainings, with the model term over
    the unique solutions (``unique``, as paper.yaml trains) and over every converged row
    (``all``), and the mean sweeps a row of each; from checkpoint ``CHECKPOINT`` under
    ``--checkpoints``, else a model after 2 epochs of 3-iteration training (quick: 1, on 6,000
    rows). A distance that stays near ``RELATIVE`` times the couplings means the steps are
    continuous there; one that jumps means a start reached another fixed point in one run, and
    the two runs go on from different models."""
    x, source = binary_mnist(6000 if quick else None)
    machine, model = checkpoint_or_warm(CHECKPOINT[0], 500, x, device, quick, checkpoints)
    bumped = machine.replace(weights=[W * (1 + RELATIVE) for W in machine.weights])
    steps = STEPS[:2] if quick else STEPS
    batches = first_batches(x, max(steps))
    result = {"name": "tap_rounding_drift", "model": model, "data": source, "steps": list(steps)}
    result["start_max_abs_diff_w"] = float((bumped.W - machine.W).abs().max())
    for unique, tag in ((True, "unique"), (False, "all")):
        settings = dataclasses.replace(TrainSettings(**PAPER_H500, epochs=1), train_unique=unique)
        distances, sweeps = [], []
        for k in steps:
            _, a, stats_a = run_steps(machine, batches[:k], settings, device)
            _, b, stats_b = run_steps(bumped, batches[:k], settings, device)
            distances.append(float((a.W - b.W).abs().max()))
            sweeps.append([s["iterations"] / s["steps"] for s in (stats_a, stats_b)])
        result[f"max_abs_diff_w_{tag}"] = distances
        result[f"mean_row_sweeps_{tag}"] = sweeps
    result.update(seconds=None, gflops=None, ratio_to_matmul=None)
    return result
