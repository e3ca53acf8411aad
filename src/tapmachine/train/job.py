"""One training job from a config entry to ``model.pt``, for every model of both papers: the
entry's settings, its training rows, its random stream and initial machine (``prepare``), then
greedy pretraining where the entry asks for it and the loop (``train_from_spec``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.seeding import seeded_generator
from tapmachine.io import data, modelfile
from tapmachine.io.files import write_csv
from tapmachine.io.modelfile import ModelFile
from tapmachine.train.build import initial_machine
from tapmachine.train.loop import train
from tapmachine.train.pretrain import pretrain_from_spec
from tapmachine.train.settings import TrainingError, TrainSettings
from tapmachine.train.tap_gradient import check_train_noise
from tapmachine.ucd import dbm

__all__ = ["Prepared", "prepare", "train_from_spec"]


@dataclasses.dataclass
class Prepared:
    """What a training job starts from: its settings, the machine, the training rows in the
    machine's units and device (``x``), the dataset and its rows as stored (``rows``, the first
    ``n_train``) and the training generator."""

    settings: TrainSettings
    machine: BoltzmannMachine
    x: Tensor
    dataset: data.Dataset
    rows: Tensor
    generator: torch.Generator


def prepare(
    name: str,
    spec: dict,
    data_path,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    n_train: int | None = None,
) -> Prepared:
    """The start of the training job of config entry ``name`` on the dataset at ``data_path``.

    ``n_train`` (default: the entry's ``n_train``) keeps the first rows. RBMs and deep TAP
    machines draw from the stream (seed, name, "train") and are built on ``device`` from the
    rows there. A DBM needs binary {0, 1} data, draws from (seed, "ucd_dbm", "{dataset}/{name}",
    "train") (the same entry is trained on several datasets), is built on the CPU (the same
    initial machine on every device) and then moved, with a generator on ``device`` seeded from
    that stream; its rows are mapped to its units (``ucd.dbm.data_for``).
    """
    settings = TrainSettings.from_spec(spec)
    ds = data.load_dataset(data_path)
    is_dbm = settings.method in dbm.DBM_METHODS
    if is_dbm:  # {0, 1} pixels, whatever the visible units (``dbm.data_for``)
        check_support(ds, data_path, _binary, "{0, 1}", f"the data of model {name} (a DBM)")
    rows = torch.as_tensor(ds.x_train, dtype=getattr(torch, dtype))
    n_train = n_train or spec.get("n_train")
    if n_train:
        rows = rows[:n_train]
    if rows.shape[0] < settings.batch_size:
        raise TrainingError(
            f"model {name}: {rows.shape[0]} training rows is fewer than batch_size "
            f"{settings.batch_size}"
        )
    if not is_dbm:
        generator = seeded_generator(seed, name, "train")
        x = rows.to(device)
        machine = initial_machine(spec, x, settings, generator)
        visible = machine.visible
        what = f"the {type(visible).__name__} visible units of model {name}"
        check_support(ds, data_path, visible.in_support, visible.support, what)
        check_train_noise(machine, settings.train_noise)
        return Prepared(settings, machine, x, ds, rows, generator)
    generator = seeded_generator(seed, "ucd_dbm", f"{ds.name}/{name}", "train")
    machine = initial_machine(spec, rows, settings, generator)
    if torch.device(device).type != "cpu":
        machine = machine.to(device)
        generator = _device_generator(generator, device)
    return Prepared(settings, machine, dbm.data_for(machine, rows), ds, rows, generator)


def _binary(x: Tensor) -> Tensor:
    return (x == 0) | (x == 1)


def first_outside(in_support, x: np.ndarray, chunk: int = 10_000) -> tuple[int, int] | None:
    """(row, column) of the first value of ``x`` (row-major) that ``in_support`` refuses, or
    None; ``chunk`` rows at a time."""
    for start in range(0, x.shape[0], chunk):
        bad = ~in_support(torch.as_tensor(x[start : start + chunk], dtype=torch.float64))
        if bad.any():
            flat = int(bad.reshape(-1).nonzero()[0])
            return start + flat // x.shape[1], flat % x.shape[1]
    return None


def check_support(ds: data.Dataset, data_path, in_support, support: str, what: str) -> None:
    """Raise TrainingError at the first value of the dataset (training rows, then test rows)
    outside the support of ``what``, naming the file it came from (a user's own file, else the
    dataset's .npz), its row and its column."""
    for split in ("train", "test"):
        x = getattr(ds, f"x_{split}")
        found = first_outside(in_support, x)
        if found is None:
            continue
        row, column = found
        value = x[row, column].item()
        cell = data.file_cell(ds.provenance, split, row, column)
        if cell is None:
            where = f"{data_path}: {split} row {row}, column {column}"
        else:
            where = f"{cell[0]}: row {cell[1]}, column {cell[2]} (dataset {data_path})"
        raise TrainingError(f"{where}: {value:g} is outside {support}, the values of {what}")


def _device_generator(generator: torch.Generator, device) -> torch.Generator:
    """A generator on ``device`` seeded from the CPU ``generator`` (torch draws on a device only
    from a generator of that device)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def train_from_spec(
    name: str,
    spec: dict,
    data_path: str,
    outdir: str,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    on_start=None,
    on_epoch=None,
    on_pretrain_epoch=None,
) -> BoltzmannMachine:
    """Train the model ``name`` of the config on ``data_path``; write model.pt and metrics.csv.

    ``on_start(params, tags)`` is called once the initial machine is built, before the first
    epoch, with a description of the run; it may return the run's id, stored in model.pt as its
    provenance. ``on_epoch(epoch, metrics, machine)`` is called after every epoch. A model with
    ``pretrain:`` settings (a deep TAP machine) is first pretrained greedily (Alg. 4,
    ``pretrain.pretrain_from_spec``), calling ``on_pretrain_epoch(layer, epoch, metrics)`` after
    each greedy RBM epoch. The stage layer (``pipeline.stages.train``) passes callbacks that
    log to MLflow; this module knows nothing of tracking.
    """
    job = prepare(name, spec, data_path, seed, device, dtype)
    settings, machine, ds = job.settings, job.machine, job.dataset
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    this_job = {"dataset_file": str(data_path), "seed": seed, "device": str(device), "dtype": dtype}
    params = {"model": name, **this_job, **spec, "sizes": [int(n) for n in machine.sizes]}
    tags = {"model": name, "dataset": ds.name, "method": settings.method}
    if ds.provenance.get("substitute"):
        tags["substitute"] = str(ds.provenance["substitute"])
    run_id = on_start(params, tags) if on_start is not None else None
    if spec.get("pretrain"):  # deep TAP machines: greedy pretraining first (Alg. 4)
        machine = pretrain_from_spec(
            machine, job.x, spec, settings, job.generator, outdir, on_epoch=on_pretrain_epoch
        )
    machine, history = train(
        machine,
        job.x,
        settings,
        job.generator,
        checkpoint_dir=modelfile.checkpoint_dir(outdir),
        on_epoch=on_epoch,
    )
    ModelFile.from_machine(
        machine,
        name,
        spec=spec,
        history=history,
        dataset=ds.name,
        substitute=ds.provenance.get("substitute"),
        mlflow_run_id=run_id,
    ).save(modelfile.model_path(outdir))
    write_csv(history, outdir / "metrics.csv")
    return machine
