"""The lines a training job writes to its log that other code reads back: where it resumed."""

from __future__ import annotations

import re

__all__ = ["SKIPPED", "resume_message", "resumed_epoch"]

#: Prefix of the line naming a checkpoint that could not be read and was passed over.
SKIPPED = "skipping unreadable checkpoint: "

_RESUME_LINE = re.compile(r"resuming from .+ \(epoch (\d+)\)")


def resume_message(checkpoint, epoch: int) -> str:
    """The line a resumed run writes first to its log (stderr), read back by ``resumed_epoch``."""
    return f"resuming from {checkpoint} (epoch {epoch})"


def resumed_epoch(log_text: str) -> int:
    """The epoch a training job's log says its start resumed from; 0 for a fresh start.

    Snakemake writes a job's log anew at each start, so the log of a finished job is its last
    start's, the one its benchmark file times (``figures.claims.wall_times``). The resume line
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
