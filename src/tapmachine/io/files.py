"""Atomic writes: a reader, or the next run after an interrupted job, never sees half a file; the
checks that find a file damaged after it was written (truncated, overwritten, half-copied); and
an array's shape read from an .npz without loading it."""

from __future__ import annotations

import csv
import errno
import io
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

__all__ = [
    "atomic_write",
    "write_csv",
    "is_disk_full",
    "remove_temporaries",
    "damage",
    "damaged",
    "set_aside_damaged",
    "npz_array_shape",
]


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


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) is a full disk or an exceeded quota.
    ``torch.save`` reports one as a RuntimeError raised from the OSError."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def remove_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files ``atomic_write`` left in ``folder`` when its process was killed
    mid-write (SIGKILL, power loss). Call only where no other process writes to ``folder``."""
    stale = sorted(Path(folder).glob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def _zip_damage(path: Path) -> str | None:
    # The central directory (at the end) and each member's extent: a cut-off or overwritten
    # archive fails; reading every byte for the CRCs would cost a pass over all results.
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"member {info.filename} runs past the end"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        return f"not a whole zip archive: {err}"
    return None


def _csv_damage(path: Path) -> str | None:
    text = path.read_text(errors="replace")
    if not text.endswith("\n"):
        return "its last line is cut off"
    rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        return f"rows of {min(widths)} to {max(widths)} fields"
    return None


def damage(path: str | os.PathLike) -> str | None:
    """Why the file at ``path`` is damaged, or None if it looks whole; a cheap check, no loading:
    ``.npz`` and torch ``.pt`` files are zip archives (a whole central directory, every member
    inside the file), a ``.csv`` ends its last line and has as many fields in every row. Other
    suffixes are not checked."""
    path = Path(path)
    if path.stat().st_size == 0:
        return "empty"
    if path.suffix in (".npz", ".pt"):
        return _zip_damage(path)
    if path.suffix == ".csv":
        return _csv_damage(path)
    return None


def damaged(paths) -> list[tuple[Path, str]]:
    """``(path, reason)`` for each damaged file of ``paths`` (``damage``); reads, writes nothing."""
    found = []
    for path in map(Path, paths):
        try:
            reason = damage(path)
        except FileNotFoundError:  # removed meanwhile
            continue
        if reason is not None:
            found.append((path, reason))
    return found


def set_aside_damaged(paths) -> list[tuple[Path, str]]:
    """Rename each damaged file of ``paths`` to ``<name>.corrupt`` (so that the rule that makes it
    runs again; the bytes stay for inspection) and return ``(path, reason)`` for each."""
    found = damaged(paths)
    for path, _ in found:
        os.replace(path, path.with_name(path.name + ".corrupt"))
    return found


def npz_array_shape(path: str | os.PathLike, key: str) -> tuple[int, ...]:
    """The shape of array ``key`` in the .npz at ``path``, from the array's header alone (a job's
    resources are sized before the job runs, from files of gigabytes). FileNotFoundError if there
    is no such file (Snakemake then sizes the job once its input exists); ValueError naming the
    file if it is not an archive or has no readable ``key``."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, _ = read_header(member)
    except KeyError:
        raise ValueError(f"{path}: no array {key!r}") from None
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise ValueError(f"{path}: cannot read the header of {key!r} ({err})") from None
    return tuple(int(n) for n in shape)
