"""What a job asks of a cluster: a harvest's memory from its size, and the time of a job that
starts over, doubled on each attempt."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from tapmachine.io.files import npz_array_shape

__all__ = ["BASE_MB", "BYTES_PER_UNIT_AND_START", "job_memory_mb", "memory_mb", "runtime_minutes"]

#: The process before its starts: Python, torch, MLflow and the dataset. Measured (peak resident
#: set, ``/usr/bin/time -v``) on the paper run's real-MNIST Nh = 500 RBM at epoch 1, float64, 1
#: thread: 1.55, 2.05 and 2.50 GB at 2,000, 6,000 and 10,000 starts, a line through 1.3 GB.
#: Asked: 2 GB, as training asks before its units.
BASE_MB = 2000

#: Each start keeps its a, c, A, B of every unit through solving, polishing and merging, with
#: copies at the passes' joins: the measurement's slope, 0.12 MB a start on 1,284 units, is
#: about 12 float64 numbers per unit and start. Asked: 16, a third above it.
BYTES_PER_UNIT_AND_START = 16 * 8


def memory_mb(starts: int, units: int) -> int:
    """Megabytes to ask for a harvest of ``starts`` initialisations of a machine of ``units``
    units in all layers (``BASE_MB`` plus ``BYTES_PER_UNIT_AND_START`` a unit and start)."""
    if starts < 1 or units < 1:
        raise ValueError(f"a harvest needs starts and units >= 1, got {starts} and {units}")
    return BASE_MB + math.ceil(starts * units * BYTES_PER_UNIT_AND_START / 1e6)


def job_memory_mb(
    data_path: str | os.PathLike, n_init: int | None, hidden_units: Sequence[int]
) -> int:
    """``memory_mb`` of a harvest from ``n_init`` training images of the dataset at
    ``data_path`` (None: all of them) on a machine with ``hidden_units`` hidden units per layer;
    the visible units and the available images are read from the dataset's header."""
    shape = npz_array_shape(data_path, "x_train")
    if len(shape) != 2:
        raise ValueError(f"{data_path}: x_train has shape {shape}, not (images, units)")
    rows, visible = shape
    starts = rows if n_init is None else min(int(n_init), rows)
    return memory_mb(starts, visible + sum(hidden_units))


def runtime_minutes(base: int, attempt: int) -> int:
    """Minutes for ``attempt`` (1, 2, ...) of a job that starts over when it is rerun: ``base``,
    doubled on each attempt, so that a job killed at its time limit is not killed again at the
    same point."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    return base * 2 ** (attempt - 1)
