"""What training keeps in its checkpoint folder, and when: each epoch's ``Checkpoint``
(``EpochCheckpoints``: every epoch, or for a model with ``checkpoint_every`` > 1 the kept ones at
once and the others at most every ``UNKEPT_CHECKPOINT_SECONDS``), the state part-way through an
epoch (``InProgressWriter``, every ``IN_PROGRESS_SECONDS`` and at a stop) and reading that state
back (``resume_in_progress``). The loop (``train.loop``) calls them; which epochs stay on disk is
``io.retention``'s, the files' format ``io.modelfile``'s.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from pathlib import Path

from tapmachine.core.errors import StoppedBySignal
from tapmachine.io import retention
from tapmachine.io.modelfile import (
    Checkpoint,
    EpochInProgress,
    ModelFileError,
    in_progress_path,
    machine_state,
)
from tapmachine.io.runlog import SKIPPED, resume_within_message
from tapmachine.train.methods import method
from tapmachine.train.resume import save_checkpoint
from tapmachine.train.settings import TrainSettings

__all__ = [
    "IN_PROGRESS_SECONDS",
    "UNKEPT_CHECKPOINT_SECONDS",
    "EpochCheckpoints",
    "InProgressWriter",
    "resume_in_progress",
    "restore",
    "stopped_message",
    "training_checkpoint",
]

#: Seconds of training between two writes of the state part-way through an epoch: a late
#: real-MNIST epoch of the paper-size run takes most of an hour on a shared core, and a job
#: stopped mid-epoch would otherwise train it again from its start.
IN_PROGRESS_SECONDS = 600.0

#: Seconds between two writes of an epoch checkpoint that ``checkpoint_every`` does not keep.
#: Each checkpoint carries the whole history, which a model of many short epochs (the faces
#: substitute's 15,000 of under a second) would pickle again every epoch: 7% of its epoch time
#: at epoch 4,900, growing with the history. The newest state not yet written is held in memory
#: and written before any later state (a stop, the part-way state), so a stopped job resumes
#: where it stopped; a killed one trains these seconds again.
UNKEPT_CHECKPOINT_SECONDS = 60.0


def stopped_message(epoch: int, path: Path, batches: int | None = None) -> str:
    where = f"epoch {epoch}" if batches is None else f"batch {batches} of epoch {epoch}"
    return f"training state after {where} kept in {path}: run the job again to resume it there"


def training_checkpoint(carried, machine, generator, identity: str, settings) -> Checkpoint:
    """The training state: ``machine`` with ``carried``'s momentum, method state, history and
    epochs done, and the stream ``generator`` is at."""
    state = carried.state
    return Checkpoint(
        machine_state=machine_state(machine),
        epoch=carried.epoch,
        history=carried.history,
        velocity=[v.cpu() for v in carried.velocity],
        generator=generator.get_state(),
        fingerprint=identity,
        settings=dataclasses.asdict(settings),
        state=None if state is None else method(settings.method).save_state(state),
    )


def restore(carried, ckpt: Checkpoint, generator, gradient) -> None:
    """Load ``ckpt``'s machine, momentum, method state and stream into ``carried`` and
    ``generator`` (on the device and dtype of ``carried``'s machine)."""
    machine = carried.machine
    carried.machine = ckpt.machine(machine.device, machine.dtype)
    carried.velocity = [v.to(machine.device) for v in ckpt.velocity]
    generator.set_state(ckpt.generator)
    if ckpt.state is not None:
        carried.state = gradient.load_state(ckpt.state, machine.device)


class EpochCheckpoints:
    """Writes each epoch's ``Checkpoint`` to ``ckpt_dir/epoch_{e}.pt``: at once where
    ``checkpoint_every`` keeps it (``retention.kept``) or when forced (a stop), else once
    ``every`` seconds have passed since the last write, holding a copy of the newest unwritten
    one until then or until ``flush`` (before the part-way state is written on top of it, and at
    the end). After each write it removes the epoch written before, unless that one is kept."""

    def __init__(self, ckpt_dir: Path, settings: TrainSettings, every: float, written: int):
        self.dir, self.settings, self.every = ckpt_dir, settings, every
        self.written = written  # the newest epoch on disk (resumed from), or 0
        self.pending: Checkpoint | None = None
        self.last = time.perf_counter()

    def after_epoch(self, checkpoint: Checkpoint, force: bool = False) -> None:
        s = self.settings
        due = retention.kept(checkpoint.epoch, s.checkpoint_every, s.epochs)
        if due or force or time.perf_counter() - self.last >= self.every:
            self._write(checkpoint)
        else:
            self.pending = _held(checkpoint)

    def flush(self) -> None:
        if self.pending is not None:
            self._write(self.pending)

    def _write(self, checkpoint: Checkpoint) -> None:
        save_checkpoint(checkpoint, self.dir / f"epoch_{checkpoint.epoch}.pt")
        before, s = self.written, self.settings
        if 1 <= before < checkpoint.epoch and not retention.kept(
            before, s.checkpoint_every, s.epochs
        ):
            (self.dir / f"epoch_{before}.pt").unlink(missing_ok=True)
        self.written, self.pending, self.last = checkpoint.epoch, None, time.perf_counter()


def _held(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` with its own copies of what training goes on changing in place (the
    tensors, the method's state, the history list; the history's rows stay as they are)."""
    return dataclasses.replace(
        checkpoint,
        machine_state=copy.deepcopy(checkpoint.machine_state),
        velocity=[v.clone() for v in checkpoint.velocity],
        history=list(checkpoint.history),
        state=copy.deepcopy(checkpoint.state),
    )


class InProgressWriter:
    """``run_epoch``'s ``pause``: writes ``EpochInProgress`` once ``every`` seconds have passed
    since the last write (or since the writer began), and at once when ``stop`` (a
    ``StopRequests``) has noted a signal, then raises ``StoppedBySignal``. ``epochs`` (an
    ``EpochCheckpoints``): the epoch the part-way state starts from is written first, if it is
    held unwritten (resuming reads that epoch's checkpoint, then the part-way state)."""

    def __init__(
        self, ckpt_dir, identity, settings, carried, generator, every, stop=None, epochs=None
    ):
        self.path = in_progress_path(ckpt_dir)
        self.identity, self.settings, self.every = identity, settings, every
        self.carried, self.generator, self.stop = carried, generator, stop
        self.epochs = epochs
        self.last = time.perf_counter()

    def __call__(self, machine, batches, order, step_stats, seconds, cpu_seconds) -> None:
        stopping = self.stop is not None and self.stop.requested is not None
        if not stopping and time.perf_counter() - self.last < self.every:
            return
        checkpoint = training_checkpoint(
            self.carried, machine, self.generator, self.identity, self.settings
        )
        record = EpochInProgress(checkpoint, batches, order, step_stats, seconds, cpu_seconds)
        if self.epochs is not None:
            self.epochs.flush()
        save_checkpoint(record, self.path)
        self.last = time.perf_counter()
        if stopping:
            epoch = self.carried.epoch + 1
            message = stopped_message(epoch, self.path, batches)
            raise StoppedBySignal(self.stop.requested, message)


def resume_in_progress(ckpt_dir: Path, identity: str, carried, generator, gradient):
    """The ``EpochInProgress`` of the epoch after ``carried.epoch`` kept in ``ckpt_dir``, with
    its state loaded into ``carried`` and ``generator``; None (and the file removed) where there
    is none, or it is of another run or epoch, or cannot be read."""
    path = in_progress_path(ckpt_dir)
    if not path.exists():
        return None
    try:
        within = EpochInProgress.load(path)
    except ModelFileError as err:
        print(f"{SKIPPED}{err}", file=sys.stderr)
        path.unlink(missing_ok=True)
        return None
    ckpt = within.checkpoint
    if ckpt.fingerprint != identity or ckpt.epoch != carried.epoch:
        path.unlink(missing_ok=True)
        return None
    restore(carried, ckpt, generator, gradient)
    message = resume_within_message(
        ckpt.epoch + 1, within.batches, within.seconds, within.cpu_seconds
    )
    print(message, file=sys.stderr)
    return within
