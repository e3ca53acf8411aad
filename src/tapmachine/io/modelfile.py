"""The files of a trained model: ``model.pt`` and the per-epoch checkpoints beside it.

This module is the only place that knows their layout. Both are plain dicts of tensors, numbers,
strings, lists and dicts, so they load with ``torch.load(weights_only=True)`` (no pickled
classes, nothing executed on load)::

    results/models/{model}/model.pt                  ModelFile: machine, spec, history, provenance
    results/models/{model}/checkpoints/epoch_{e}.pt  Checkpoint: the training state after epoch e
    results/models/{model}/checkpoints/in_progress.pt  EpochInProgress: part-way through the next

A machine is stored as its weights and, per layer, the prior's class name, tensor parameters and
plain configuration (``machine_state``); the class is looked up in ``tapmachine.core.priors``.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from pathlib import Path

import torch

from tapmachine.core.errors import TapmachineError
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.files import atomic_write

__all__ = [
    "CHECKPOINT_FORMAT",
    "ModelFileError",
    "CheckpointFormatError",
    "ModelFile",
    "Checkpoint",
    "EpochInProgress",
    "machine_state",
    "machine_from_state",
    "model_path",
    "checkpoint_dir",
    "checkpoint_path",
    "in_progress_path",
    "checkpoint_epochs",
    "latest_checkpoint",
]

MODEL_FILE = "model.pt"
CHECKPOINT_DIR = "checkpoints"
IN_PROGRESS_FILE = "in_progress.pt"

#: Layout of a checkpoint, stored in it (``format``); a checkpoint of another layout is refused
#: with ``CheckpointFormatError``. 2: a gradient method's persistent state under ``state``
#: (``train.methods.GradientMethod.save_state``), where 1 (unversioned) kept PCD chains under
#: ``chains`` and a DBM's under ``dbm_state``.
CHECKPOINT_FORMAT = 2


class ModelFileError(TapmachineError):
    """A model or checkpoint file is missing, unreadable or not of this layout."""


class CheckpointFormatError(ModelFileError):
    """A whole checkpoint of another layout (``CHECKPOINT_FORMAT``) than this code reads."""


def model_path(model_dir: str | os.PathLike) -> Path:
    """``{model_dir}/model.pt``."""
    return Path(model_dir) / MODEL_FILE


def checkpoint_dir(model_dir: str | os.PathLike) -> Path:
    """The folder of per-epoch checkpoints of a model."""
    return Path(model_dir) / CHECKPOINT_DIR


def checkpoint_path(model_dir: str | os.PathLike, epoch: int) -> Path:
    """The checkpoint written by training after ``epoch`` (1-based)."""
    return checkpoint_dir(model_dir) / f"epoch_{int(epoch)}.pt"


def in_progress_path(ckpt_dir: str | os.PathLike) -> Path:
    """Where training keeps its state part-way through an epoch (not an ``epoch_*.pt``)."""
    return Path(ckpt_dir) / IN_PROGRESS_FILE


def checkpoint_epochs(ckpt_dir: str | os.PathLike) -> list[int]:
    """Epochs that have a checkpoint in ``ckpt_dir``, ascending."""
    return sorted(int(p.stem.split("_")[1]) for p in Path(ckpt_dir).glob("epoch_*.pt"))


def latest_checkpoint(ckpt_dir: str | os.PathLike) -> Path | None:
    """The checkpoint of the highest epoch in ``ckpt_dir`` (None if there is none)."""
    epochs = checkpoint_epochs(ckpt_dir)
    return Path(ckpt_dir) / f"epoch_{epochs[-1]}.pt" if epochs else None


def machine_state(machine: BoltzmannMachine) -> dict:
    """A plain description of a machine (weights, prior types, parameters and configuration)."""
    return {
        "weights": [W.detach().cpu() for W in machine.weights],
        "priors": [
            {
                "type": type(p).__name__,
                "params": {k: v.detach().cpu() for k, v in p.params().items()},
                "config": p.config(),
            }
            for p in machine.priors
        ],
    }


def machine_from_state(state: dict, device="cpu", dtype=None) -> BoltzmannMachine:
    """Inverse of ``machine_state``."""
    from tapmachine.core import priors as priors_module

    priors = []
    for p in state["priors"]:
        cls = getattr(priors_module, p["type"], None)
        if cls is None:
            raise ModelFileError(f"unknown prior type {p['type']!r} in a stored machine")
        priors.append(cls(**p["params"], **p["config"]))
    machine = BoltzmannMachine(priors=tuple(priors), weights=tuple(state["weights"]))
    return machine.to(device=device, dtype=dtype)


def _read_blob(path: Path, what: str) -> dict:
    if not path.exists():
        raise ModelFileError(f"{path} not found: train the model first")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, KeyError, OSError) as err:
        # truncated, overwritten or half-copied: the reason's first sentence (torch's are long)
        reason = str(err).strip().split(". ")[0] if str(err).strip() else type(err).__name__
        raise ModelFileError(f"{path} is not a readable {what} ({reason})") from err
    if not isinstance(blob, dict):
        raise ModelFileError(f"{path} is not a {what}")
    return blob


def _read(path: Path, what: str) -> dict:
    blob = _read_blob(path, what)
    if "machine" not in blob:
        raise ModelFileError(f"{path} is not a {what} (no machine in it)")
    return blob


def _blob(record) -> dict:
    """A ModelFile or Checkpoint as the dict stored on disk: its fields, ``machine_state`` under
    the key ``machine``."""
    return {
        "machine" if f.name == "machine_state" else f.name: getattr(record, f.name)
        for f in dataclasses.fields(record)
    }


def _write(blob: dict, path: Path) -> None:
    atomic_write(path, lambda fh: torch.save(blob, fh))


@dataclasses.dataclass
class ModelFile:
    """A trained model: its machine, config entry, per-epoch metrics and provenance."""

    machine_state: dict
    name: str
    spec: dict = dataclasses.field(default_factory=dict)
    history: list[dict] = dataclasses.field(default_factory=list)
    dataset: str = "?"
    substitute: str | None = None
    mlflow_run_id: str | None = None
    #: Plain per-stage extras (numbers, strings, lists, dicts): the DBM stage stores the method,
    #: image shape, training seconds, step count and tau summary here.
    extras: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_machine(cls, machine: BoltzmannMachine, name: str, **fields) -> ModelFile:
        return cls(machine_state=machine_state(machine), name=name, **fields)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ModelFile:
        path = Path(path)
        blob = _read(path, "model file")
        return cls(
            machine_state=blob["machine"],
            name=str(blob.get("name") or path.parent.name),
            spec=dict(blob.get("spec") or {}),
            history=list(blob.get("history") or []),
            dataset=str(blob.get("dataset") or "?"),
            substitute=blob.get("substitute") or None,
            mlflow_run_id=blob.get("mlflow_run_id") or None,
            extras=dict(blob.get("extras") or {}),
        )

    def save(self, path: str | os.PathLike) -> None:
        _write(_blob(self), Path(path))

    def machine(self, device="cpu", dtype=None) -> BoltzmannMachine:
        return machine_from_state(self.machine_state, device=device, dtype=dtype)

    @property
    def sizes(self) -> tuple[int, ...]:
        weights = self.machine_state["weights"]
        return (int(weights[0].shape[0]), *(int(W.shape[1]) for W in weights))

    @property
    def n_epochs(self) -> int:
        """Epochs trained (the length of the history; the spec's epochs if there is none)."""
        return len(self.history) or int(self.spec.get("epochs", 0))


@dataclasses.dataclass
class Checkpoint:
    """The full training state after one epoch: enough to resume with identical numbers."""

    machine_state: dict
    epoch: int
    history: list[dict]
    velocity: list
    generator: torch.Tensor
    fingerprint: str
    settings: dict
    #: The gradient method's persistent state (``GradientMethod.save_state``: plain CPU tensors,
    #: lists and dicts), None for a method without one.
    state: dict | None = None

    @classmethod
    def load(cls, path: str | os.PathLike) -> Checkpoint:
        path = Path(path)
        blob = _read(path, "checkpoint")
        found = blob.get("format", 1)
        if found != CHECKPOINT_FORMAT:
            raise CheckpointFormatError(
                f"{path} is a checkpoint of format {found}; this version of tapmachine reads "
                f"format {CHECKPOINT_FORMAT} only and cannot resume or score it"
            )
        return cls.from_blob(blob, path)

    @classmethod
    def from_blob(cls, blob: dict, path: Path) -> Checkpoint:
        """The checkpoint stored as ``blob`` (read from ``path``); its format already checked."""
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "machine_state"]
        missing = [name for name in fields if name not in blob] + (
            [] if "machine" in blob else ["machine"]
        )
        if missing:
            raise ModelFileError(f"{path} is not a whole checkpoint (no {', '.join(missing)})")
        return cls(machine_state=blob["machine"], **{name: blob[name] for name in fields})

    def save(self, path: str | os.PathLike) -> None:
        _write({**_blob(self), "format": CHECKPOINT_FORMAT}, Path(path))

    def machine(self, device="cpu", dtype=None) -> BoltzmannMachine:
        return machine_from_state(self.machine_state, device=device, dtype=dtype)


@dataclasses.dataclass
class EpochInProgress:
    """Training part-way through epoch ``checkpoint.epoch + 1``: ``checkpoint`` holds the state
    after the epoch's first ``batches`` minibatches (machine, momentum, the method's state and
    the random stream as they are then; the history of the epochs before), ``order`` the epoch's
    row order, ``step_stats`` its per-step tallies so far, and ``seconds`` and ``cpu_seconds``
    the wall and CPU time it has taken. A job stopped mid-epoch resumes at that batch with the
    numbers of an uninterrupted one."""

    checkpoint: Checkpoint
    batches: int
    order: torch.Tensor
    step_stats: dict
    seconds: float
    cpu_seconds: float

    @property
    def epoch(self) -> int:
        """The last whole epoch (this state is part-way through the next)."""
        return self.checkpoint.epoch

    @classmethod
    def load(cls, path: str | os.PathLike) -> EpochInProgress:
        path = Path(path)
        blob = _read_blob(path, "training state part-way through an epoch")
        found = blob.get("format", 1)
        if found != CHECKPOINT_FORMAT or "checkpoint" not in blob:
            raise CheckpointFormatError(f"{path} is not of format {CHECKPOINT_FORMAT}")
        missing = [
            name
            for name in ("batches", "order", "step_stats", "seconds", "cpu_seconds")
            if name not in blob
        ]
        if missing:
            raise ModelFileError(f"{path} is not whole (no {', '.join(missing)})")
        checkpoint = Checkpoint.from_blob(blob["checkpoint"], path)
        return cls(
            checkpoint,
            int(blob["batches"]),
            blob["order"],
            dict(blob["step_stats"]),
            float(blob["seconds"]),
            float(blob["cpu_seconds"]),
        )

    def save(self, path: str | os.PathLike) -> None:
        blob = {
            "format": CHECKPOINT_FORMAT,
            "checkpoint": _blob(self.checkpoint),
            "batches": self.batches,
            "order": self.order.detach().cpu(),
            "step_stats": self.step_stats,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
        }
        _write(blob, Path(path))
