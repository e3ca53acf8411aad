"""The lines a long job writes to its log that other code reads back: where a training job
resumed, which epochs a scoring job and which chunks a harvest kept from its earlier starts."""

from __future__ import annotations

import re

__all__ = [
    "SKIPPED",
    "kept_message",
    "kept_epochs",
    "kept_chunk_message",
    "kept_chunk_seconds",
    "resume_message",
    "resumed_epoch",
    "resume_within_message",
    "resumed_within",
]

#: Prefix of the line naming a checkpoint that could not be read and was passed over.
SKIPPED = "skipping unreadable checkpoint: "

_KEPT_LINE = re.compile(r" epoch (\d+): kept from an earlier start")
_KEPT_CHUNK_LINE = re.compile(
    r"chunk \d+ of \d+ kept from an earlier start \(([0-9.]+) s, ([0-9.]+) CPU s\)"
)
_RESUME_LINE = re.compile(r"resuming from .+ \(epoch (\d+)\)")
_WITHIN_LINE = re.compile(
    r"resuming epoch \d+ after its batch \d+"
    r"(?: \(([0-9.]+) s, ([0-9.]+) CPU s of it trained before this start\))?"
)


def resume_message(checkpoint, epoch: int) -> str:
    """The line a resumed run writes first to its log (stderr), read back by ``resumed_epoch``."""
    return f"resuming from {checkpoint} (epoch {epoch})"


def resumed_epoch(log_text: str) -> int:
    """The epoch a training job's log says its start resumed from; 0 for a fresh start.

    Snakemake writes a job's log anew at each start, so the log of a finished job is its last
    start's, the one its benchmark file times (``figures.job_times.wall_times``). The resume line
    is the first thing training writes; lines before it from elsewhere (unreadable checkpoints
    skipped; a tracking library's notices) are passed over, up to the first epoch's output.
    """
    for line in log_text.split("\n"):
        match = _RESUME_LINE.fullmatch(line.strip())
        if match:
            return int(match.group(1))
        if line.startswith(("epoch ", "progress ")):
            return 0
    return 0


def resume_within_message(epoch: int, batches: int, seconds: float, cpu_seconds: float) -> str:
    """The line a start that continues an epoch part-way writes to its log (after
    ``resume_message`` when there is an epoch checkpoint), read back by ``resumed_within``:
    the epoch, the minibatches done before this start and the wall and CPU seconds they took."""
    return (
        f"resuming epoch {epoch} after its batch {batches} "
        f"({seconds:.1f} s, {cpu_seconds:.1f} CPU s of it trained before this start)"
    )


def resumed_within(log_text: str) -> tuple[float, float]:
    """The wall and CPU seconds of the unfinished epoch that earlier starts trained, as a
    training job's log names them (``resume_within_message``); (0, 0) where its start began at
    an epoch's beginning, and where an older log names no seconds."""
    for line in log_text.split("\n"):
        match = _WITHIN_LINE.fullmatch(line.strip())
        if match:
            seconds, cpu = match.groups()
            return (float(seconds), float(cpu)) if seconds is not None else (0.0, 0.0)
        if line.startswith(("epoch ", "progress ")):
            break
    return 0.0, 0.0


def kept_message(name: str, epoch: int) -> str:
    """The line a scoring job that resumes (``likelihood.score_checkpoints``,
    ``likelihood.exact_curve``) writes for an epoch whose row an earlier start computed and
    kept, read back by ``kept_epochs``."""
    return f"{name} epoch {epoch}: kept from an earlier start"


def kept_epochs(log_text: str) -> list[int]:
    """The epochs a scoring job's log says it kept from earlier starts (``kept_message``): their
    rows' time was spent before the start its benchmark file times."""
    return [
        int(match.group(1)) for line in log_text.split("\n") if (match := _KEPT_LINE.search(line))
    ]


def kept_chunk_message(chunk: int, chunks: int, seconds: float, cpu_seconds: float) -> str:
    """The line a harvest that resumes (``harvest.harvest`` with kept chunks) writes for a chunk
    of starts an earlier start solved and kept, with the wall and CPU seconds it took then; read
    back by ``kept_chunk_seconds``."""
    return (
        f"chunk {chunk} of {chunks} kept from an earlier start "
        f"({seconds:.3f} s, {cpu_seconds:.3f} CPU s)"
    )


def kept_chunk_seconds(log_text: str) -> tuple[float, float, int]:
    """The wall and CPU seconds that earlier starts spent on the chunks a harvest's log says it
    kept (``kept_chunk_message``), and how many chunks; (0, 0, 0) for a harvest that kept none.
    A line may follow a progress bar's carriage returns."""
    wall = cpu = 0.0
    count = 0
    for line in log_text.split("\n"):
        match = _KEPT_CHUNK_LINE.search(line)
        if match:
            wall += float(match.group(1))
            cpu += float(match.group(2))
            count += 1
    return wall, cpu, count
