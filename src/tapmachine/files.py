"""Atomic writes: a reader, or the next run after an interrupted job, never sees half a file."""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "write_csv"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO], object], text: bool = False, fsync: bool = False
) -> Path:
    """Call ``write(fh)`` on a fresh temporary file beside ``path``, then rename it to ``path``.

    ``fh`` is binary, or text with ``newline=""`` (what ``csv`` wants) when ``text``. With
    ``fsync`` the data reach the disk before the rename. The file gets the permissions a plain
    ``open`` would give (0666 less the umask; ``mkstemp``'s 0600 would hide results from other
    users). On any error the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w" if text else "wb", **({"newline": ""} if text else {})) as fh:
            write(fh)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv(rows: list[dict], path: str | os.PathLike, fields: list[str] | None = None) -> Path:
    """Write ``rows`` as a CSV table (atomically); columns ``fields``, by default every key in
    the order it first appears. Missing values are left empty."""
    if fields is None:
        fields = list(dict.fromkeys(key for row in rows for key in row))

    def write(fh):
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)

    return atomic_write(path, write, text=True)
