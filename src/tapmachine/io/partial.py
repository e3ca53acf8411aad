"""Rows a long job has finished, kept beside its output until the output is written, so that a
job stopped part-way (a session's end, a cluster's time limit, a kill) resumes where it stopped.

Scalar rows (a score per epoch) live in ``<output>.partial.jsonl``, one JSON object a line,
rewritten whole (atomically) after each row: JSON keeps every value as it was (floats to the last
bit, strings, NaN), where a CSV round trip would not (``KeptRows``). Blocks of arrays (a harvest's
solutions, a chunk of starts at a time) live in ``<output>.partial/``, one ``.npz`` a block
(``KeptChunks``). Each row or block is kept under a key that names what it was computed from (for
example an epoch and its checkpoint's bytes), and carries the signature of the job's settings:
what was kept under other settings, or cannot be read, is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from tapmachine.io.files import atomic_write

__all__ = ["KeptChunks", "KeptRows", "file_digest", "partial_path", "settings_digest"]


def partial_path(out: str | os.PathLike) -> Path:
    """Where the finished rows of the job writing ``out`` are kept until ``out`` is written."""
    out = Path(out)
    return out.with_name(out.name + ".partial.jsonl")


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (a key that changes whenever the file does)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def settings_digest(settings: dict) -> str:
    """SHA-256 of a settings mapping as canonical JSON (keys sorted; other values as text)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value):
    """A JSON-ready value: numpy and torch scalars as Python numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"a kept row holds {type(value).__name__}, which JSON cannot keep")


class KeptRows:
    """The rows kept for the job writing ``out`` under settings ``signature``.

    ``get(key)`` returns a kept row (a copy) or None; ``keep(key, row)`` adds one and rewrites the
    file; ``discard()`` removes the file once the output is written.
    """

    def __init__(self, out: str | os.PathLike, signature: str):
        self.path = partial_path(out)
        self.signature = signature
        self.rows: dict[str, dict] = self._read()

    def _read(self) -> dict[str, dict]:
        if not self.path.exists():
            return {}
        rows = {}
        try:
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    entry = json.loads(line)
                    if entry.get("signature") == self.signature:
                        rows[str(entry["key"])] = dict(entry["row"])
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            print(
                f"{self.path}: not a file of kept rows ({err}); computing every row again",
                file=sys.stderr,
            )
            return {}
        return rows

    def get(self, key: str) -> dict | None:
        row = self.rows.get(key)
        return None if row is None else dict(row)

    def keep(self, key: str, row: dict) -> None:
        self.rows[key] = dict(row)
        lines = [
            json.dumps({"signature": self.signature, "key": k, "row": r}, default=_plain) + "\n"
            for k, r in self.rows.items()
        ]
        atomic_write(self.path, lambda fh: fh.writelines(lines), text=True)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


class KeptChunks:
    """The blocks of arrays kept for the job writing ``out`` under settings ``signature``: block
    ``index`` in ``<out>.partial/chunk_<index>.npz``.

    ``get(index)`` returns a kept block (arrays by name) or None: none kept, kept under other
    settings, or a file that cannot be read (said on stderr); ``keep(index, arrays)`` writes one
    atomically; ``discard()`` removes the folder once the output is written.
    """

    def __init__(self, out: str | os.PathLike, signature: str):
        out = Path(out)
        self.folder = out.with_name(out.name + ".partial")
        self.signature = signature

    def _path(self, index: int) -> Path:
        return self.folder / f"chunk_{index}.npz"

    def get(self, index: int) -> dict | None:
        path = self._path(index)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as npz:
                if str(npz["signature"]) != self.signature:
                    return None
                return {k: npz[k] for k in npz.files if k != "signature"}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, zlib.error) as err:
            print(f"{path}: not a kept block ({err}); computing it again", file=sys.stderr)
            return None

    def keep(self, index: int, arrays: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(
            self._path(index),
            lambda fh: np.savez(fh, signature=np.asarray(self.signature), **arrays),
        )

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
