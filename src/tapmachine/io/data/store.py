"""The npz store of a dataset: written atomically, checked on load."""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from tapmachine.io.data.record import DataError, Dataset
from tapmachine.io.files import atomic_write

# --------------------------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------------------------

_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test", "image_shape", "provenance")


def save_dataset(ds: Dataset, path: str | os.PathLike, compress: bool = True) -> Path:
    """Write ``ds`` to ``path`` (.npz) atomically: temp file in the same dir, fsync, replace."""
    path = Path(path)
    try:
        provenance = json.dumps(ds.provenance, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: provenance is not JSON-serialisable ({exc})") from None
    savez = np.savez_compressed if compress else np.savez
    atomic_write(
        path,
        lambda f: savez(
            f,
            x_train=ds.x_train,
            y_train=ds.y_train,
            x_test=ds.x_test,
            y_test=ds.y_test,
            image_shape=np.asarray(ds.image_shape, dtype=np.int64),
            provenance=np.asarray(provenance),
            name=np.asarray(ds.name),
        ),
        fsync=True,
    )
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return path


def load_dataset(path: str | os.PathLike) -> Dataset:
    """Read a dataset written by :func:`save_dataset`; DataError if missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"dataset file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in _NPZ_KEYS if k not in npz.files]
            if missing:
                raise DataError(f"{path}: not a tapmachine dataset (missing {', '.join(missing)})")
            arrays = {k: npz[k] for k in npz.files}
    except DataError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, zlib.error) as exc:
        raise DataError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from None
    try:
        provenance = json.loads(str(arrays["provenance"]))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: provenance is not valid JSON ({exc})") from None
    name = str(arrays["name"]) if "name" in arrays else path.stem
    return Dataset(
        arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"],
        tuple(int(s) for s in arrays["image_shape"]), provenance, name,
    )  # fmt: skip
