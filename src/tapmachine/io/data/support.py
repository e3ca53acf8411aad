"""Where a dataset's values leave the support of the units that must take them: the first
value outside, by row and column, in the file the user gave where there is one.

Training checks every value of its dataset before it starts (``train.job.prepare``), the
estimators check the rows they are given (``learn``), so that a value no unit can take is an
error naming its place, not a model trained on it."""

from __future__ import annotations

import numpy as np
import torch

from tapmachine.io.data.own import file_cell

__all__ = ["first_outside", "place_outside"]


def first_outside(in_support, x: np.ndarray, chunk: int = 10_000) -> tuple[int, int] | None:
    """(row, column) of the first value of ``x`` (row-major) that ``in_support`` (a tensor ->
    bool tensor function, e.g. ``Prior.in_support``) refuses, or None; ``chunk`` rows at a
    time, in float64 (exact for every stored dtype)."""
    for start in range(0, x.shape[0], chunk):
        bad = ~in_support(
            torch.as_tensor(np.asarray(x[start : start + chunk]), dtype=torch.float64)
        )
        if bool(bad.any()):
            flat = int(bad.reshape(-1).nonzero()[0])
            return start + flat // x.shape[1], flat % x.shape[1]
    return None


def place_outside(dataset, data_path, in_support) -> tuple[str, float] | None:
    """The first value of ``dataset`` (training rows, then test rows) outside ``in_support``:
    (where, value), where names the user's file, row and column for a dataset read from one
    (``io.data.own``), else the dataset's file ``data_path``, split, row and column; None when
    every value is inside."""
    for split in ("train", "test"):
        x = getattr(dataset, f"x_{split}")
        found = first_outside(in_support, x)
        if found is None:
            continue
        row, column = found
        cell = file_cell(dataset.provenance, split, row, column)
        if cell is None:
            where = f"{data_path}: {split} row {row}, column {column}"
        else:
            where = f"{cell[0]}: row {cell[1]}, column {cell[2]} (dataset {data_path})"
        return where, float(x[row, column])
    return None
