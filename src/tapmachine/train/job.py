"""One training job from a config entry to ``model.pt``, for every model of both papers: the
entry's settings, its training rows, its random stream and initial machine (``prepare``), then
greedy pretraining where the entry asks for it and the loop (``train_from_spec``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli
from tapmachine.io import data, modelfile
from tapmachine.io.files import write_csv
from tapmachine.io.modelfile import ModelFile
from tapmachine.train.loop import train
from tapmachine.train.methods import method
from tapmachine.train.pretrain import pretrain_from_spec
from tapmachine.train.settings import TrainingError, TrainSettings

__all__ = ["Prepared", "initial_machine", "prepare", "resampled_support", "train_from_spec"]


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

    ``n_train`` (default: the entry's ``n_train``) keeps the first rows. The entry's gradient
    method (``train.methods``) gives the random stream, the initial machine and the rows in its
    units (``GradientMethod.start``): RBMs and deep TAP machines draw from (seed, name, "train")
    and are built on ``device`` from the rows there; the DBM methods their own
    (``ucd.training``).
    """
    settings = TrainSettings.from_spec(spec)
    ds = data.load_dataset(data_path)
    rows = torch.as_tensor(ds.x_train, dtype=getattr(torch, dtype))
    n_train = n_train or spec.get("n_train")
    if n_train:
        rows = rows[:n_train]
    if rows.shape[0] < settings.batch_size:
        raise TrainingError(
            f"model {name}: {rows.shape[0]} training rows is fewer than batch_size "
            f"{settings.batch_size}"
        )
    gradient = method(settings.method)
    try:
        machine, x, generator = gradient.start(name, spec, ds, rows, settings, seed, device)
    except TrainingError as exc:
        raise TrainingError(f"{data_path}: {exc}") from None
    in_support, support, units = gradient.data_support(machine)
    if settings.resample is not None:
        in_support, support, units = resampled_support(machine, settings.resample)
    outside = data.place_outside(ds, data_path, in_support)
    if outside is not None:
        where, value = outside
        raise TrainingError(
            f"{where}: {value:g} is outside {support}, the values of {units} of model {name}"
        )
    return Prepared(settings, machine, x, ds, rows, generator)


def _unit_interval(x: Tensor) -> Tensor:
    return (x >= 0) & (x <= 1)


def resampled_support(machine: BoltzmannMachine, resample: str):
    """What the stored rows of a model that draws its rows anew (``resample``,
    ``loop.present``) must lie in: probabilities in [0, 1] for bernoulli visible units (grey
    levels), whose draws are then in {0, 1}; ``(in_support, support, units)`` as
    ``GradientMethod.data_support``. Other visible units are refused."""
    if not isinstance(machine.visible, Bernoulli):
        raise TrainingError(
            f"resample: {resample} draws binary rows: the visible units must be bernoulli, "
            f"not {type(machine.visible).__name__}"
        )
    units = f"the grey levels (probabilities) that resample: {resample} draws rows of {{0, 1}} from"
    return _unit_interval, "[0, 1]", units


def initial_machine(
    spec: dict, x: Tensor, settings: TrainSettings, generator: torch.Generator
) -> BoltzmannMachine:
    """The machine training starts from, for a config entry and its training rows ``x``, as its
    gradient method builds it (``GradientMethod.build``)."""
    return method(settings.method).build(spec, x, settings, generator)


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
    on_history=None,
    on_pretrain_epoch=None,
    on_step=None,
    extras=None,
    n_train: int | None = None,
    progress: bool = True,
) -> BoltzmannMachine:
    """Train the model ``name`` of the config on ``data_path``, by any registered gradient
    method; write model.pt and metrics.csv.

    ``on_start(params, tags, job)`` is called once the initial machine is built, before the
    first epoch, with a description of the run and the ``Prepared`` job; it may return the run's
    id, stored in model.pt as its provenance. ``on_epoch(epoch, metrics, machine)`` is called
    after every epoch, ``on_history(rows, machine)`` once with the epochs a resumed job trained
    before, and ``on_step(step, metrics)`` after every update with the method's per-step
    numbers (``train.loop``). A model with ``pretrain:`` settings (a deep TAP machine)
    is first pretrained greedily (Alg. 4, ``pretrain.pretrain_from_spec``), calling
    ``on_pretrain_epoch(layer, epoch, metrics)`` after each greedy RBM epoch. ``extras(history)``
    gives what model.pt keeps besides (``ModelFile.extras``). ``n_train``: as ``prepare``.
    The stage layer (``pipeline.stages``) passes callbacks that log to MLflow; this module knows
    nothing of tracking.
    """
    job = prepare(name, spec, data_path, seed, device, dtype, n_train)
    settings, machine, ds = job.settings, job.machine, job.dataset
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    this_job = {"dataset_file": str(data_path), "seed": seed, "device": str(device), "dtype": dtype}
    params = {"model": name, **this_job, **spec, "sizes": [int(n) for n in machine.sizes]}
    tags = {"model": name, "dataset": ds.name, "method": settings.method}
    if ds.provenance.get("substitute"):
        tags["substitute"] = str(ds.provenance["substitute"])
    run_id = on_start(params, tags, job) if on_start is not None else None
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
        progress=progress,
        on_step=on_step,
        on_history=on_history,
    )
    ModelFile.from_machine(
        machine,
        name,
        spec=spec,
        history=history,
        dataset=ds.name,
        substitute=ds.provenance.get("substitute"),
        mlflow_run_id=run_id,
        extras=extras(history) if extras is not None else {},
    ).save(modelfile.model_path(outdir))
    write_csv(history, outdir / "metrics.csv")
    return machine
