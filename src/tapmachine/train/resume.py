"""Resuming a training run: its identity (the fingerprint), the checkpoint to resume from, and
bringing a resumed run's earlier evaluations in line with its settings."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path

from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.files import is_disk_full
from tapmachine.io.modelfile import (
    Checkpoint,
    CheckpointFormatError,
    ModelFileError,
    checkpoint_epochs,
)
from tapmachine.io.runlog import SKIPPED
from tapmachine.train.evaluation import (
    evaluate_tap_log_likelihood,
    evaluated,
    evaluation_signature,
    expected_signature,
    latest_evaluation,
)
from tapmachine.train.methods import method
from tapmachine.train.settings import TrainingError, TrainSettings

__all__ = [
    "NUMERICS_VERSION",
    "fingerprint",
    "resume_checkpoint",
    "save_checkpoint",
    "evaluated_alike",
    "reevaluate_history",
]

#: Version of the arithmetic that produces a training run's numbers, part of the resume
#: fingerprint: a checkpoint written under another version is not resumed (its epochs would mix
#: two versions of the arithmetic). Bump it in the commit that changes any number a training run
#: produces from the same settings, data and seed: the update rule, the gradients (tap,
#: contrastive), the priors' functions, the machine's energies, the random streams, the
#: evaluation. Do not bump it for refactors, comments or formatting that leave the numbers equal;
#: a change of the checkpoint's layout is ``modelfile.CHECKPOINT_FORMAT``.
NUMERICS_VERSION = 1


#: Settings added after checkpoints were first written, with the value that trains as before.
_LATER_KEYS = {
    "prior_momentum": False,
    "resample": None,
    "visible_init": "data_mean",
    "relaxation": 1.4,
}


def fingerprint(machine: BoltzmannMachine, x_train: Tensor, settings: TrainSettings) -> str:
    """Identity of a training run for resuming: settings, initial machine, training data,
    ``NUMERICS_VERSION``, the gradient method's own version (``GradientMethod.version``) and,
    with ``inference: adatap``, ``adatap.NUMERICS_VERSION``.

    Left out, since they change no number training produces: the number of epochs when the
    step size is constant (so a finished run can be extended; a decaying schedule depends on
    it), the converged mode's tolerance, cap and weighting in a fixed-iteration run, and the
    evaluation's second pass (``retry_damping``: each history row records what it did, and a
    resumed run evaluates its earlier epochs again, ``reevaluate_history``), ``fuse``
    (compiled or eager sweeps: the same iterates up to rounding; leaving it out also keeps the
    checkpoints written before the key existed), and ``cuda_graphs``, ``cuda_graph_sweeps``
    (captured or eager steps, ``train.graphs``: the same numbers up to rounding), and
    ``checkpoint_every`` (which checkpoints stay on disk; so a run can change it and resume) and
    ``eval_every`` (which epochs are evaluated; the rows already recorded stay). The keys of
    ``_LATER_KEYS`` enter only when set (off, they train as before them, and the checkpoints
    written before them still resume).
    """
    h = hashlib.sha256(f"numerics {NUMERICS_VERSION}".encode())
    h.update(method(settings.method).version().encode())
    if settings.inference == "adatap":
        from tapmachine.core import adatap

        h.update(f"adatap {adatap.NUMERICS_VERSION}".encode())
    fields = dataclasses.asdict(settings)
    if not isinstance(settings.learning_rate, dict):
        fields.pop("epochs")
    if settings.train_iterations != "converge":
        for key in ("train_tol", "train_max_iter", "train_unique"):
            fields.pop(key)
    fields.pop("retry_damping")
    for key in ("fuse", "cuda_graphs", "cuda_graph_sweeps", "checkpoint_every", "eval_every"):
        fields.pop(key)
    for key, off in _LATER_KEYS.items():
        if fields[key] == off:
            fields.pop(key)
    h.update(repr(sorted(fields.items())).encode())
    for W in machine.weights:
        h.update(W.detach().cpu().contiguous().numpy().tobytes())
    for prior in machine.priors:
        h.update(type(prior).__name__.encode() + repr(prior.config()).encode())
        for v in prior.params().values():
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
    h.update(x_train.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def resume_checkpoint(ckpt_dir: Path, fingerprint: str) -> tuple[Path, Checkpoint] | None:
    """The newest checkpoint in ``ckpt_dir`` that reads whole and was written with
    ``fingerprint``, with its path; None to start afresh.

    A checkpoint that cannot be read (truncated, overwritten) is named in one line on stderr and
    removed: it holds nothing, and an older one resumes instead, so corruption costs only the
    epochs after the newest whole checkpoint. If the newest readable checkpoint was written with
    other settings or data, every checkpoint is stale and all are removed. A checkpoint of
    another layout (``modelfile.CheckpointFormatError``) stops training with a ``TrainingError``
    that says so: removing it is left to the user.
    """
    for epoch in reversed(checkpoint_epochs(ckpt_dir)):
        path = ckpt_dir / f"epoch_{epoch}.pt"
        try:
            ckpt = Checkpoint.load(path)
        except CheckpointFormatError as err:
            raise TrainingError(f"{err}; remove {ckpt_dir} to train this model afresh") from None
        except ModelFileError as err:
            print(f"{SKIPPED}{err}", file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        if ckpt.fingerprint == fingerprint:
            return path, ckpt
        print(
            f"checkpoints in {ckpt_dir} come from other settings, data or numerics: "
            "starting afresh",
            file=sys.stderr,
        )
        for stale in ckpt_dir.glob("epoch_*.pt"):
            stale.unlink()
        return None
    return None


def save_checkpoint(ckpt: Checkpoint, path: Path) -> None:
    """``ckpt.save(path)``; a full disk stops training with one line that says what is kept."""
    try:
        ckpt.save(path)
    except (OSError, RuntimeError) as err:
        if not is_disk_full(err):
            raise
        kept = f"epoch {ckpt.epoch - 1}" if ckpt.epoch > 1 else "no epoch"
        raise TrainingError(
            f"no space left on device writing {path}: the checkpoints up to {kept} are whole "
            "and kept; free some space and run again to resume from them"
        ) from None


def evaluated_alike(ckpt: Checkpoint, settings: TrainSettings) -> bool:
    """Whether a checkpoint's latest evaluation (``latest_evaluation``: the epochs between two
    evaluated ones record none) is the one ``settings`` would make now; True when its history
    records none. Every other evaluation setting is in the fingerprint."""
    row = latest_evaluation(ckpt.history)
    if not row:
        return True
    return evaluation_signature(ckpt.settings, row) == expected_signature(settings.solver_settings)


def reevaluate_history(
    ckpt_dir: Path,
    history: list[dict],
    machine: BoltzmannMachine,
    x_eval: Tensor,
    settings: TrainSettings,
    progress: bool = False,
) -> list[dict]:
    """The history of a resumed run with every epoch evaluated as ``settings`` evaluate.

    A run may resume with another ``retry_damping`` or second-pass tolerance (not in the
    fingerprint; ``evaluation_signature``). Each earlier epoch whose checkpoint was evaluated
    otherwise is evaluated again from that checkpoint's parameters (in ``machine``'s dtype and
    device), and the checkpoint is rewritten with the new row and settings, one epoch at a time,
    so an interrupted pass resumes where it stopped and Fig. 12's reuse of an epoch's record
    (``likelihood.recorded_tap_partition``) sees the new one. The timing columns stay those of
    the original epoch. Epochs without a readable checkpoint keep their rows. An epoch that was
    not evaluated (``TrainSettings.eval_every``) stays so; its checkpoint is rewritten with the
    history so far, whose evaluated rows are the new ones.
    """
    from tqdm import tqdm

    history = [dict(row) for row in history]
    stale = []
    for i, row in enumerate(history):
        path = ckpt_dir / f"epoch_{row['epoch']}.pt"
        if not path.exists():
            continue
        try:
            ckpt = Checkpoint.load(path)
        except ModelFileError as err:  # its row stays as recorded
            print(f"{SKIPPED}{err}", file=sys.stderr)
            continue
        if evaluated_alike(ckpt, settings):
            history[i] = dict(ckpt.history[-1])  # possibly evaluated again by an earlier pass
        else:
            stale.append((i, path, ckpt))
    again = sum(evaluated(history[i]) for i, _, _ in stale)
    if again:
        print(
            f"evaluating {again} epochs again: the evaluation's second pass changed "
            "(retry_damping or its tolerance)",
            file=sys.stderr,
        )
    for i, path, ckpt in tqdm(stale, desc="re-evaluating", file=sys.stderr, disable=not progress):
        if evaluated(history[i]):
            earlier = ckpt.machine(machine.device, machine.dtype)
            history[i].update(
                evaluate_tap_log_likelihood(
                    earlier, x_eval, settings.solver_settings, settings.dedup_tol
                )
            )
        ckpt.history = history[: i + 1]
        ckpt.settings = dataclasses.asdict(settings)
        ckpt.save(path)
    return history
