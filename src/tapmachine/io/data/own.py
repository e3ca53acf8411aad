"""A user's own data: rows of visible units read from a file of theirs.

Formats, by suffix: ``.npz`` (one array named by ``array``; the only one when ``array`` is not
given), ``.npy`` (one array), ``.csv`` and ``.parquet`` (through pandas; every column but the
labels' is a feature). An array of shape (n, H, W) is flattened to rows of H * W units, with
image shape (H, W).

Labels are optional: an array of the ``.npz`` or a column of the table, named by ``labels``;
without them every row has label 0. The test rows come from a second file of the same format
(read the same way) or are a seeded random ``fraction`` of the rows (``split_rows``); both
splits keep the file's order of rows, so a row of a split names its row in the file
(``file_cell``).

The sha256 of every file read is in the dataset's provenance. The values are not checked here:
what a value may be depends on the visible units of the machine trained on it, which the
training job checks (``train.job.check_support``), naming the file, row and column.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from tapmachine.io.data.formats import digest
from tapmachine.io.data.record import DataError, Dataset

__all__ = ["FORMATS", "file_cell", "read_own", "read_rows", "split_rows"]

FORMATS = (".npz", ".npy", ".csv", ".parquet")


def _read_npz(path: Path, array: str | None, labels: str | None) -> tuple:
    with np.load(path, allow_pickle=False) as npz:
        names = list(npz.files)
        if array is None:
            candidates = [n for n in names if n != labels]
            if len(candidates) != 1:
                raise DataError(f"{path}: holds arrays {names}; name the one to read (array)")
            array = candidates[0]
        for name in (array, labels):
            if name is not None and name not in names:
                raise DataError(f"{path}: has no array {name!r} (it holds {names})")
        return npz[array], (npz[labels] if labels is not None else None), None


def _read_npy(path: Path, array: str | None, labels: str | None) -> tuple:
    if labels is not None:
        raise DataError(f"{path}: a .npy file holds one array, so it has no labels {labels!r}")
    return np.load(path, allow_pickle=False), None, None


def _read_table(path: Path, labels: str | None) -> tuple:
    import pandas as pd

    table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    y = at = None
    if labels is not None:
        if labels not in table.columns:
            raise DataError(f"{path}: has no column {labels!r} (columns: {list(table.columns)})")
        at = table.columns.get_loc(labels)
        y = table.pop(labels).to_numpy()
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):
            raise DataError(f"{path}: column {column!r} is not numeric ({table[column].dtype})")
    return table.to_numpy(dtype=np.float64), y, at


def read_rows(path, array: str | None = None, labels: str | None = None) -> dict:
    """What ``path`` holds: ``x`` the rows (n, units) as float32, ``y`` the labels (n,) or None,
    ``image_shape`` (H, W) of an (n, H, W) array or None, ``labels_column`` the labels' column
    in a table or None, and ``sha256`` of the file; DataError for a file it cannot read."""
    path = Path(path)
    if path.suffix not in FORMATS:
        raise DataError(f"{path}: unknown format {path.suffix!r} (one of {', '.join(FORMATS)})")
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        if path.suffix == ".npz":
            x, y, at = _read_npz(path, array, labels)
        elif path.suffix == ".npy":
            x, y, at = _read_npy(path, array, labels)
        else:
            x, y, at = _read_table(path, labels)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - every parser's failure is a one-line data error
        what = f"{type(exc).__name__}: {exc}"
        raise DataError(f"{path}: not a readable {path.suffix} ({what})") from None
    x = np.asarray(x)
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise DataError(f"{path}: values of dtype {x.dtype} are not numbers")
    image_shape = tuple(int(s) for s in x.shape[1:]) if x.ndim == 3 else None
    if x.ndim == 3:
        x = x.reshape(x.shape[0], -1)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise DataError(f"{path}: rows of shape {x.shape}; expected (rows, units) or (rows, H, W)")
    if y is not None:
        y = np.asarray(y)
        if y.shape != (x.shape[0],):
            raise DataError(f"{path}: labels {labels!r} of shape {y.shape} for {x.shape[0]} rows")
        if not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
            raise DataError(f"{path}: labels {labels!r} are not non-negative integers")
    sha256 = digest(path.read_bytes(), "sha256")
    return {
        "x": x.astype(np.float32),
        "y": y,
        "image_shape": image_shape,
        "labels_column": at,
        "sha256": sha256,
    }


def split_rows(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and test rows of ``n``: round(n * fraction) test rows drawn by
    ``seed`` (numpy's PCG64), each split in the file's order."""
    n_test = round(n * fraction)
    if not 0 < n_test < n:
        raise DataError(
            f"a test fraction {fraction} of {n} rows leaves {n_test} test and {n - n_test} "
            "training rows; both need at least one"
        )
    test = np.sort(np.random.default_rng(seed).permutation(n)[:n_test])
    return np.setdiff1d(np.arange(n), test), test


def file_cell(provenance: dict, split: str, row: int, column: int) -> tuple[str, int, int] | None:
    """The file, row and column (0-based; a table's header is not a row, its labels column is
    counted) of the value at (``row``, ``column``) of split ``split`` ("train" or "test") of a
    dataset read by ``read_own``; None for a dataset of another source."""
    if provenance.get("source") != "file":
        return None
    at = provenance.get("labels_column")
    column += at is not None and column >= at
    test = provenance["test"]
    if "fraction" not in test:
        return (provenance["file"] if split == "train" else test["file"]), row, column
    train_rows, test_rows = split_rows(provenance["rows"], test["fraction"], test["seed"])
    return provenance["file"], int((train_rows if split == "train" else test_rows)[row]), column


def _square(units: int) -> tuple[int, int]:
    side = math.isqrt(units)
    return (side, side) if side * side == units else (1, units)


def read_own(
    name: str,
    path: str | os.PathLike,
    array: str | None = None,
    labels: str | None = None,
    test_path: str | os.PathLike | None = None,
    test_fraction: float | None = None,
    seed: int = 0,
    image_shape: tuple[int, int] | None = None,
) -> Dataset:
    """The dataset ``name`` of the rows in ``path`` (module docstring); the test rows are those
    of ``test_path`` or a ``test_fraction`` drawn by ``seed``, exactly one of the two.

    ``image_shape`` (H, W) is how the rows are drawn (montages); default: that of an (n, H, W)
    array, else square if the number of units is a square, else one row.
    """
    if (test_path is None) == (test_fraction is None):
        raise DataError(f"dataset {name!r}: give a test file or a test fraction, not both or none")
    path = Path(path)
    train = read_rows(path, array, labels)
    x, y = train["x"], train["y"]
    source = {"file": str(path.resolve()), "sha256": train["sha256"], "rows": int(x.shape[0])}
    if test_path is not None:
        other = read_rows(test_path, array, labels)
        x_test, y_test = other["x"], other["y"]
        if x_test.shape[1] != x.shape[1]:
            raise DataError(
                f"{test_path}: rows of {x_test.shape[1]} units, {path} has {x.shape[1]}"
            )
        if other["labels_column"] != train["labels_column"]:
            raise DataError(f"{test_path}: labels {labels!r} not in the column of {path}'s")
        test = {"file": str(Path(test_path).resolve()), "sha256": other["sha256"]}
        test["rows"] = int(x_test.shape[0])
    else:
        train_rows, test_rows = split_rows(x.shape[0], test_fraction, seed)
        x, x_test = x[train_rows], x[test_rows]
        y, y_test = (None, None) if y is None else (y[train_rows], y[test_rows])
        test = {"fraction": float(test_fraction), "seed": int(seed)}
    if y is None:
        y, y_test = np.zeros(len(x), np.int64), np.zeros(len(x_test), np.int64)
    from tapmachine import __version__

    provenance = {
        "dataset": name,
        "source": "file",
        "format": path.suffix[1:],
        **source,
        "array": array,
        "labels": labels,
        "labels_column": train["labels_column"],
        "test": test,
        "split": f"{len(x)} train, {len(x_test)} test",
        "dtypes": {"x": "float32", "y": "int64"},
        "tapmachine_version": __version__,
    }
    shape = tuple(image_shape or train["image_shape"] or _square(x.shape[1]))
    return Dataset(x, y.astype(np.int64), x_test, y_test.astype(np.int64), shape, provenance, name)
