"""The trained binary-MNIST checkpoints that ``tap_solve`` and ``paper_profile`` measure on."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks import ROOT
from benchmarks.common import binary_mnist
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine, train

__all__ = ["CHECKPOINTS", "SOLVE_EPOCHS", "SOLVE_MODELS", "solve_checkpoints", "train_checkpoints"]


#: Models (Table 1's binary-MNIST RBMs) and epochs (early, middle, late) of ``tap_solve``.
SOLVE_MODELS = {"bmnist_h25": 25, "bmnist_h50": 50, "bmnist_h100": 100, "bmnist_h500": 500}
SOLVE_EPOCHS = (1, 10, 30)


#: Where ``tap_solve`` and ``paper_profile`` find (or train) their checkpoints: DIR/{model}/
#: epoch_{e}.pt (``--checkpoints``).
CHECKPOINTS = ROOT / "results" / "bench_checkpoints"


def train_checkpoints(directory: Path, epochs: int, quick: bool) -> None:
    """Train the ``SOLVE_MODELS`` on binary MNIST with Table 1's optimiser (lr 0.005, momentum
    0.5, l2 0.001, batch 100), 3 TAP iterations per step and no per-epoch evaluation, keeping a
    checkpoint after every epoch under ``directory/{model}`` (resumed if already there).

    Not the paper's converged training (hours): the weights grow as the paper's do, and the
    solver comparison needs models at early, middle and late points of training, not the paper's
    exact parameters."""
    x, _ = binary_mnist(6000 if quick else None)
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli"}]}
    for name, nh in SOLVE_MODELS.items():
        settings = TrainSettings(
            epochs=epochs,
            batch_size=100,
            learning_rate=0.005,
            momentum=0.5,
            l2=0.001,
            train_iterations=3,
            evaluate=False,
        )
        model_spec = {**spec, "hidden": [{"prior": "bernoulli", "units": nh}]}
        g = seeded_generator(2026, name, "train")
        machine = build_machine(model_spec, x, settings.weight_init_std, g)
        train(machine, x, settings, g, checkpoint_dir=directory / name, progress=False)


def solve_checkpoints(directory: Path, quick: bool) -> list[tuple[str, int, Path]]:
    """(model, epoch, path) of ``SOLVE_MODELS`` x ``SOLVE_EPOCHS`` (quick: epochs 1-2, under
    ``directory/quick``), training what is missing.

    Quick checkpoints are trained on fewer images, so training them beside the full ones would
    find those written with other data and remove them (``train.resume_checkpoint``): they get
    a folder of their own."""
    if quick:
        directory = directory / "quick"
    epochs = (1, 2) if quick else SOLVE_EPOCHS
    want = [(n, e, directory / n / f"epoch_{e}.pt") for n in SOLVE_MODELS for e in epochs]
    if not all(path.exists() for _, _, path in want):
        print(f"training the checkpoints of tap_solve under {directory}", file=sys.stderr)
        train_checkpoints(directory, max(epochs), quick)
    return want
