"""Merging TAP solutions that are the same fixed point: by their means or by free energy."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from tapmachine.core.tap.state import TAPState

__all__ = ["unique", "unique_free_energy"]


def unique(states: TAPState, tol: float) -> tuple[Tensor, Tensor, Tensor]:
    """Group converged solutions whose means (all layers' a) agree within ``tol`` (max-abs).

    Rule (independent of the order of the rows): the converged rows are put in a canonical
    order -- lexicographic order of their concatenated means, with the column of largest range
    compared first (ties to the lowest column) and the others in natural order. Walking that
    order, each row not yet assigned becomes the representative of a new group, and every
    unassigned row within max-abs distance ``tol`` of it joins that group (leader clustering;
    a row joins the first representative in canonical order that is within ``tol``). Groups are
    numbered in canonical order of their representatives. Rows that are not converged are
    excluded. Exactly equal rows always share a group.

    Returns
    -------
    representatives : Tensor (G,), int64
        Row index of each group's representative.
    inverse : Tensor (K,), int64
        Group of each row, -1 for rows that are not converged.
    counts : Tensor (G,), int64
        Group sizes.
    """
    device = states.a[0].device
    K = states.n_rows
    inverse = torch.full((K,), -1, dtype=torch.long)
    rows = torch.nonzero(states.converged.cpu(), as_tuple=True)[0]
    if rows.numel() == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty.to(device), inverse.to(device), empty.to(device)
    X = torch.cat([t.detach().cpu() for t in states.a], dim=1)[rows].to(torch.float64)
    Xn = X.numpy()
    spread = Xn.max(0) - Xn.min(0)
    lead = int(np.argmax(spread))
    # np.lexsort sorts by the last key first.
    keys = [Xn[:, j] for j in range(Xn.shape[1] - 1, -1, -1)] + [Xn[:, lead]]
    perm = torch.from_numpy(np.lexsort(keys))
    X = X[perm]
    key = X[:, lead].contiguous()
    group = torch.full((X.shape[0],), -1, dtype=torch.long)
    reps, counts = [], []
    for p in range(X.shape[0]):
        if group[p] >= 0:
            continue
        # Only rows later in canonical order with lead coordinate within tol can match.
        end = int(torch.searchsorted(key, key[p] + tol, right=True))
        window = torch.arange(p, end)
        window = window[group[p:end] < 0]
        close = (X[window] - X[p]).abs().amax(1) <= tol
        members = window[close]
        group[members] = len(reps)
        reps.append(p)
        counts.append(members.numel())
    inverse[rows[perm]] = group
    representatives = rows[perm[torch.tensor(reps, dtype=torch.long)]]
    counts = torch.tensor(counts, dtype=torch.long)
    return representatives.to(device), inverse.to(device), counts.to(device)


def unique_free_energy(
    free_energy: Tensor, converged: Tensor, tol: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Group converged solutions whose TAP free energies (``free_energy``, (K,)) lie within
    ``tol`` of their group's lowest: walking the converged rows by increasing F (ties by row),
    each row not yet assigned starts a group that takes every row with F <= its F + tol. The
    outputs are those of ``unique`` (groups numbered by increasing F, representative = the
    group's lowest-F row, -1 for rows not converged)."""
    device = free_energy.device
    K = free_energy.shape[0]
    inverse = torch.full((K,), -1, dtype=torch.long)
    rows = torch.nonzero(converged.cpu(), as_tuple=True)[0]
    F = free_energy.detach().cpu().double()[rows]
    order = torch.from_numpy(np.lexsort((rows.numpy(), F.numpy())))
    F = F[order].contiguous()
    starts = []
    p = 0
    while p < F.numel():  # one pass per group, not per row
        starts.append(p)
        p = int(torch.searchsorted(F, F[p] + tol, right=True))
    starts_t = torch.tensor(starts, dtype=torch.long)
    group = torch.zeros(F.numel(), dtype=torch.long)
    if F.numel():
        group[starts_t[1:]] = 1
        group = group.cumsum(0)
    inverse[rows[order]] = group
    counts = torch.bincount(group, minlength=len(starts)) if F.numel() else starts_t
    representatives = rows[order[starts_t]] if F.numel() else starts_t
    return representatives.to(device), inverse.to(device), counts.to(device)
