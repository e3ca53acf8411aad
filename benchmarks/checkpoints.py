"""The trained checkpoints that ``tap_solve`` and ``paper_profile`` measure on: binary-MNIST RBMs
of Table 1's four sizes, and (``paper_profile``) the real-MNIST and faces RBMs of the paper
config."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from benchmarks import ROOT
from benchmarks.common import binary_mnist
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainSettings, build_machine, train

__all__ = [
    "CHECKPOINTS",
    "OTHER_MODELS",
    "SOLVE_EPOCHS",
    "SOLVE_MODELS",
    "other_checkpoints",
    "solve_checkpoints",
    "train_checkpoints",
]


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


#: Models of other datasets than binary MNIST whose checkpoints ``paper_profile`` counts TAP
#: iterations on: training images (None: all) and epochs (early, middle, late) of each; quick:
#: epochs 1-2 of at most 2,000 images. Real MNIST on a sixth of its images, to keep the benchmark
#: short (minutes, not an hour, with its truncated Gauss-Bernoulli moments).
OTHER_MODELS = {
    "rmnist_h100": (10000, (1, 5, 10)),
    "rmnist_h500": (10000, (1, 5, 10)),
    "faces_h256": (None, (5, 50, 100)),
}


def other_checkpoints(directory: Path, specs: dict, quick: bool) -> dict[str, list[Path]]:
    """Per model of ``OTHER_MODELS`` (``specs``: the paper config's entries), its checkpoints at
    the listed epochs, trained where missing under ``directory/{model}`` (quick: ``quick/``) on
    the model's own dataset, priors and optimiser with 3 TAP iterations per step and no
    per-epoch evaluation, as ``train_checkpoints`` trains the binary ones."""
    from benchmarks.common import dataset_rows

    if quick:
        directory = directory / "quick"
    out = {}
    for name, (n_train, epochs) in OTHER_MODELS.items():
        if name not in specs:
            continue
        epochs = (1, 2) if quick else epochs
        want = [directory / name / f"epoch_{e}.pt" for e in epochs]
        out[name] = want
        if all(path.exists() for path in want):
            continue
        print(f"training the checkpoints of {name} under {directory}", file=sys.stderr)
        spec = specs[name]
        x, _ = dataset_rows(spec["dataset"], 2000 if quick else n_train)
        tap = {**spec.get("tap", {}), "train_iterations": 3}
        settings = TrainSettings.from_spec({**spec, "tap": tap, "epochs": max(epochs)})
        settings = dataclasses.replace(settings, evaluate=False)
        g = seeded_generator(2026, name, "train")
        machine = build_machine(spec, x, settings.weight_init_std, g)
        train(machine, x, settings, g, checkpoint_dir=directory / name, progress=False)
    return out
