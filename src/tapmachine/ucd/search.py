"""Local search for a local mode (Algs. 1 and 5) and the single Gibbs sweep that follows it.

Blocks are the layers of one parity (the bipartite structure of a DBM, Sec. 2.1): given the odd
layers the even ones are conditionally independent and their conditional minimum is a threshold
of their input field (eqs. 15-17), and the other way round. Each chain draws u ~ U[0, 1) once
and updates the even block first when u < 0.5, the odd block first otherwise; one *step* is one
update of each block. A chain stops after the first step that changes nothing (the until-test of
Algs. 1 and 5), so T >= 1 and the final state is a block-wise minimum: no single block update
lowers its energy. Every block update replaces a block by its exact conditional minimum, so the
energy never increases along the way.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from tapmachine.ucd.target import Target, binary_mode_, take

__all__ = ["SearchResult", "local_search", "gibbs_sweep", "block_update"]


@dataclasses.dataclass
class SearchResult:
    """Final states (a state list as in ``Target``), steps T per chain, chains that hit the cap."""

    state: list
    steps: Tensor
    capped: Tensor


def _check_plain(target: Target) -> None:
    if target.summed:
        raise ValueError("local search and Gibbs sweeps run on the plain machine (nothing summed)")


def block_update(target: Target, xs: list, parity: int) -> list:
    """The free layers of ``parity`` replaced by their conditional minimum (eqs. 15-17).

    Each new layer is its field's tensor (``input_to``, a new tensor), thresholded in place
    (``binary_mode_``): per layer one or two matrix products and four elementwise passes, the
    values of ``binary_mode`` exactly.
    """
    m = target.machine
    out = list(xs)
    for l in target.free:
        if l % 2 == parity:
            out[l] = binary_mode_(m.priors[l], m.input_to(l, xs))
    return out


def _search_group(target: Target, xs: list, first: int, max_steps: int):
    """Algs. 1/5 for chains that all update parity ``first`` first; only moving rows computed."""
    n = xs[target.free[0]].shape[0]
    device = target.machine.device
    steps = torch.zeros(n, dtype=torch.long, device=device)
    active = torch.arange(n, device=device)
    out = list(xs)
    sub = list(xs)
    for _ in range(max_steps):
        if active.numel() == 0:
            break
        new = block_update(target, sub, first)
        new = block_update(target, new, 1 - first)
        steps[active] += 1
        moved = ~target.equal(new, sub)
        for l in target.free:
            out[l].index_copy_(0, active, new[l])
        keep = moved.nonzero().squeeze(-1)
        active = active.index_select(0, keep)
        sub = take(new, keep)
    capped = torch.zeros(n, dtype=torch.bool, device=device)
    capped[active] = True
    return out, steps, capped


@torch.no_grad()
def local_search(
    target: Target, xs: list, generator: torch.Generator, max_steps: int = 10_000
) -> SearchResult:
    """Algs. 1 (joint: every layer free) and 5 (posterior: visible clamped), batched over chains.

    ``xs`` is the initial state (drawn uniformly by the caller, as the algorithms say); it is not
    modified. Returns the block-wise minimum reached by each chain and its step count T. Chains
    still moving after ``max_steps`` steps are flagged ``capped`` (this cannot happen without
    ties at exactly zero field: the energy strictly decreases with every changing step).
    """
    _check_plain(target)
    m = target.machine
    if not target.free:
        n = next(x.shape[0] for x in xs if x is not None)
        zeros = torch.zeros(n, dtype=torch.long, device=m.device)
        return SearchResult(list(xs), zeros, zeros.bool())
    n = xs[target.free[0]].shape[0]
    u = torch.rand(n, generator=generator, dtype=m.dtype, device=m.device)
    first = torch.where(u < 0.5, 0, 1)  # 0: even block first (Alg. 1's u < 0.5 branch)
    state = [None if x is None else x.clone() for x in xs]
    steps = torch.zeros(n, dtype=torch.long, device=m.device)
    capped = torch.zeros(n, dtype=torch.bool, device=m.device)
    for parity in (0, 1):  # two groups of chains, not a loop over chains
        rows = (first == parity).nonzero().squeeze(-1)
        if rows.numel() == 0:
            continue
        out, s, c = _search_group(target, take(state, rows), parity, max_steps)
        for l in target.free:
            state[l].index_copy_(0, rows, out[l])
        steps[rows] = s
        capped[rows] = c
    return SearchResult(state, steps, capped)


def _sweep(target: Target, xs: list, generator: torch.Generator, first: int) -> list:
    out = list(xs)
    for parity in (first, 1 - first):
        for l in target.free:
            if l % 2 == parity:
                out[l] = target.machine.sample_layer(l, out, generator)
    return out


@torch.no_grad()
def gibbs_sweep(
    target: Target, xs: list, generator: torch.Generator, random_order: bool = False
) -> list:
    """One block Gibbs sweep of the free layers (eqs. 3-5); clamped layers stay.

    By default odd then even, the fixed kernel the Gibbs coupling needs. With ``random_order``
    each chain draws u ~ U[0, 1) and sweeps the even block first when u < 0.5, as Alg. 1 orders
    its blocks: Alg. 2 runs this once from the local mode so that the initial distribution of the
    coupling is not confined to local modes (Sec. 3.3).
    """
    _check_plain(target)
    if not random_order:
        return _sweep(target, xs, generator, 1)
    m = target.machine
    n = xs[target.free[0]].shape[0]
    u = torch.rand(n, generator=generator, dtype=m.dtype, device=m.device)
    first = torch.where(u < 0.5, 0, 1)
    out = [None if x is None else x.clone() for x in xs]
    for parity in (0, 1):  # two groups of chains, not a loop over chains
        rows = (first == parity).nonzero().squeeze(-1)
        if rows.numel() == 0:
            continue
        swept = _sweep(target, take(xs, rows), generator, parity)
        for l in target.free:
            out[l].index_copy_(0, rows, swept[l])
    return out
