"""How varied a set of binary samples is, and whether it copies the training set (Fig. 2).

A DBM whose local modes collapse gives the same few images from every start; one that memorised
its data gives training images. Three numbers separate these from samples that look like the
data without copying it, all on {0, 1} images (rows):

- ``distinct``: the number of different rows;
- ``mean_pairwise_hamming``: the mean number of differing pixels over all pairs of rows
  (i < j; repeated rows count with distance 0), to set against the same number for data rows
  (collapse drives it to 0);
- ``nearest_hamming``: per row, the Hamming distance to the nearest reference (training) row
  (0 is a copy).

Hamming distances of {0, 1} rows come from one matrix product: d(a, b) = |a| + |b| - 2 a.b.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["distinct", "mean_pairwise_hamming", "nearest_hamming", "hamming_matrix"]


def _binary(x) -> Tensor:
    x = torch.as_tensor(x)
    if x.ndim != 2:
        raise ValueError(f"expected rows of pixels (2-d), got shape {tuple(x.shape)}")
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError("expected {0, 1} pixels")
    return x.to(torch.float64)


def hamming_matrix(a, b) -> Tensor:
    """(rows of a, rows of b) Hamming distances between {0, 1} rows: |a| + |b| - 2 a.b."""
    a, b = _binary(a), _binary(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"rows of {a.shape[1]} and {b.shape[1]} pixels")
    d = a.sum(1)[:, None] + b.sum(1)[None, :] - 2.0 * (a @ b.T)
    return d.round()


def distinct(x) -> int:
    """The number of different rows of ``x``."""
    return int(torch.unique(_binary(x), dim=0).shape[0])


def mean_pairwise_hamming(x) -> float:
    """Mean Hamming distance over the pairs i < j of rows of ``x`` (NaN for fewer than 2 rows)."""
    x = _binary(x)
    n = x.shape[0]
    if n < 2:
        return float("nan")
    d = hamming_matrix(x, x)
    return float(torch.triu(d, diagonal=1).sum() / (n * (n - 1) / 2))


def nearest_hamming(x, reference, batch: int = 4096) -> Tensor:
    """Per row of ``x``: Hamming distance to its nearest row of ``reference`` (0: a copy).

    The reference is taken in batches of ``batch`` rows, so memory stays rows(x) x batch.
    """
    x = _binary(x)
    best = torch.full((x.shape[0],), float("inf"), dtype=torch.float64)
    ref = torch.as_tensor(reference)
    for start in range(0, ref.shape[0], batch):
        d = hamming_matrix(x, ref[start : start + batch])
        best = torch.minimum(best, d.min(1).values)
    return best
