"""The names a real run gives its models and datasets, and tiny outputs renamed to them (not a
test module itself): the figure tests' own names ("tiny" on "synth") are shorter than any a
figure prints in a real run, so a title or label that runs past the canvas at real length would
pass unnoticed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tapmachine.io.data.faces import SUBSTITUTE_NOTE
from tapmachine.io.modelfile import ModelFile

#: (model, dataset, substitute) as the shipped configs name them, the longest of each figure's
#: kind; the faces substitute is described as its data code describes it.
BINARY = ("bmnist_h500_noiseaug", "binary_mnist", "")
BINARY_SMALL = ("bmnist_h25", "binary_mnist", "")
REAL = ("rmnist_h100", "real_mnist", "")
FACES = ("faces_h256", "real_faces", SUBSTITUTE_NOTE)
LIKE_FOR_LIKE = ("sbmnist_h500_cd25", "stochastic_binary_mnist", "")
FIG10 = ("bmnist_fig10_adatap100", "binary_mnist", "")
#: The models of the default run's Figs. 3 and 4 (three datasets, one a substitute).
DEFAULT_FIG3 = (BINARY_SMALL, BINARY, REAL, FACES)


def renamed_model(model_file, folder, name: str, dataset: str, substitute: str = "") -> Path:
    """A copy of ``model_file`` in ``folder/name/model.pt`` that names itself ``name``, trained on
    ``dataset`` (a substitute when ``substitute`` says so)."""
    model = dataclasses.replace(
        ModelFile.load(model_file), name=name, dataset=dataset, substitute=substitute or None
    )
    path = Path(folder) / name / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    return path


def renamed_solutions(files, folder, name: str, dataset: str, substitute: str = "") -> list[Path]:
    """Copies of the harvests ``files`` in ``folder/name/`` under the model ``name``."""
    out = []
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays.update(
            model=np.asarray(name), dataset=np.asarray(dataset), substitute=np.asarray(substitute)
        )
        path = Path(folder) / name / Path(f).name
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, **arrays)
        out.append(path)
    return out


def renamed_dataset(data_file, folder, dataset: str) -> Path:
    """A copy of the dataset file ``data_file`` in ``folder/dataset.npz`` that names itself
    ``dataset`` (Fig. 7 finds a column's data by the name its harvest records)."""
    with np.load(data_file, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["name"] = np.asarray(dataset)
    path = Path(folder) / f"{dataset}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return path
