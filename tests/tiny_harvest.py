"""A tiny trained model with checkpoints and harvested solutions, shared by the harvest and
figure tests (not a test module itself)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tapmachine.core.seeding import seeded_generator
from tapmachine.io import data
from tapmachine.tap_paper import harvest
from tapmachine.train import TrainSettings, build_machine, train, train_from_spec

SIDE = 6
EPOCHS = 8
N_PROTOTYPES = 5


def synthetic_images(n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Five 6x6 binary prototypes with 8% flipped pixels; the label is the prototype."""
    rng = np.random.default_rng(0)
    protos = rng.integers(0, 2, (N_PROTOTYPES, SIDE * SIDE))
    labels = rng.integers(0, N_PROTOTYPES, n)
    flip = rng.random((n, SIDE * SIDE)) < 0.08
    return np.where(flip, 1 - protos[labels], protos[labels]).astype(np.uint8), labels


def synthetic_dataset(
    path: Path, n: int = 300, substitute: str | None = None, name: str = "synth", one_label=False
) -> Path:
    """``synthetic_images`` saved as a dataset file named ``name``; with ``one_label``, every
    image labelled 1 and no test images (as the faces: one class, no test split)."""
    x, labels = synthetic_images(n)
    provenance = {"source": "synthetic prototypes"}
    if substitute:
        provenance["substitute"] = substitute
    test = slice(0, 0) if one_label else slice(0, 20)
    if one_label:
        labels = np.ones_like(labels)
    ds = data.Dataset(x, labels, x[test], labels[test], (SIDE, SIDE), provenance, name)
    data.save_dataset(ds, path)
    return path


SPEC = {
    "dataset": "synth",
    "visible": {"prior": "bernoulli"},
    "hidden": [{"prior": "bernoulli", "units": 8}],
    "epochs": EPOCHS,
    "batch_size": 20,
    "learning_rate": 0.1,
    "momentum": 0.5,
    "l2": 0.0,
    "weight_init_std": 0.01,
    "eval": {"n_samples": 50},
}


#: A second model for figures of several columns: truncated-Gaussian visible units (not binary),
#: 12 hidden units, on a dataset of one label (as the faces).
REAL_SPEC = {
    **SPEC,
    "dataset": "synth_one",
    "visible": {"prior": "truncated_gaussian", "lower": 0.0, "upper": 1.0},
    "hidden": [{"prior": "bernoulli", "units": 12}],
}


def build(
    root: Path,
    epochs=(1, 3, EPOCHS),
    n_init: int = 200,
    substitute=None,
    name: str = "tiny",
    spec: dict = SPEC,
) -> dict:
    """Dataset, trained model ``name`` (float64, checkpoints each epoch) and harvests at
    ``epochs``; ``spec`` names its dataset (``REAL_SPEC``'s: one label, no test images)."""
    root.mkdir(parents=True, exist_ok=True)
    dataset = spec["dataset"]
    data_file = synthetic_dataset(
        root / f"{dataset}.npz", substitute=substitute, name=dataset, one_label=dataset != "synth"
    )
    model_dir = root / "models" / name
    train_from_spec(name, spec, str(data_file), str(model_dir), dtype="float64")
    settings = harvest.HarvestSettings(n_init=n_init, max_iter=2000)
    files = []
    for e in epochs:
        npz = root / "solutions" / name / f"epoch_{e}.npz"
        harvest.run_harvest(
            model_dir / "model.pt",
            model_dir / "checkpoints" / f"epoch_{e}.pt",
            e,
            data_file,
            settings,
            npz,
            npz.with_suffix(".csv"),
            progress=False,
        )
        files.append(npz)
    return {
        "data": data_file,
        "model_dir": model_dir,
        "model": model_dir / "model.pt",
        "metrics": model_dir / "metrics.csv",
        "solutions": files,
        "settings": settings,
    }


def prototype_machine(epochs: int = 15):
    """A float64 RBM trained in memory on the synthetic prototypes (several TAP solutions), and
    its training images as a tensor."""
    x = torch.as_tensor(synthetic_images()[0], dtype=torch.float64)
    settings = TrainSettings(
        epochs=epochs,
        batch_size=20,
        learning_rate=0.1,
        l2=0.0,
        weight_init_std=0.01,
        eval_samples=20,
    )
    g = seeded_generator(0, "prototypes")
    machine = build_machine(SPEC, x, 0.01, g)
    machine, _ = train(machine, x, settings, g, progress=False)
    return machine, x
