"""Pseudo-likelihood and test log-likelihood of an RBM (App. F, Fig. 12)."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn.functional import softplus

from tapmachine.core.estimators.ais import AISResult
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Prior, Spin

__all__ = [
    "PL_CHUNK_ELEMENTS",
    "mean_and_stderr",
    "pseudo_log_likelihood",
    "site_subsets",
    "test_log_likelihood",
]

#: Largest rows x sites x Nh block of flipped hidden fields held at once by the pseudo-likelihood.
PL_CHUNK_ELEMENTS = 1 << 22


def _flip_delta(prior: Prior, x: Tensor) -> Tensor:
    """x~ - x for every site flipped: 1 - 2x for {0, 1} units, -2x for {-1, +1} units."""
    return -2.0 * x if isinstance(prior, Spin) else 1.0 - 2.0 * x


@torch.no_grad()
def pseudo_log_likelihood(
    machine: BoltzmannMachine,
    x: Tensor,
    n_sites: int | None = None,
    generator: torch.Generator | None = None,
    sites: Tensor | None = None,
) -> Tensor:
    """Log pseudo-likelihood of each row of ``x`` (Besag 1975; App. F, Fig. 12), in nats.

    For binary (Bernoulli or Spin) visible units,

        PL(x) = sum_{i=1}^{Nv} ln P(x_i | x_{-i}),   P(x_i | x_{-i}) = sigm(F(x~i) - F(x)),

    with F = ``free_energy_visible`` and x~i the copy of x with unit i flipped; it is the full sum
    over the Nv sites (not divided by Nv; divide by Nv for a per-unit value). The flipped hidden
    fields are W^T x + (x~_i - x_i) W_i, so all sites of a chunk are computed in one batch of
    shape (rows, sites, Nh) (chunks of at most ``PL_CHUNK_ELEMENTS`` elements).

    Stochastic version (App. F: 100 of the 784 pixels): with ``n_sites`` < Nv, every row draws its
    own subset S of ``n_sites`` distinct sites, uniformly and independently of the other rows
    (``site_subsets``), and gets the unbiased estimate (Nv / |S|) sum_{i in S} ln P(x_i | x_{-i}).
    Independent subsets keep the rows independent, so the standard error of their mean is the
    plain one over rows. One subset shared by a block of rows would add a site-choice error common
    to the block, which that standard error does not see (on a trained Nh = 500 model, 5,000
    images in blocks of 100: a spread of 2.4 nats over draws against a plain standard error of
    0.8). ``sites`` fixes the subsets explicitly (then ``n_sites`` is ignored): one subset for all
    rows (shape (k,)) or one per row (shape (rows, k)).

    Returns
    -------
    Tensor
        Shape (rows,), dtype of the machine.
    """
    if machine.n_layers != 2:
        raise ValueError("pseudo_log_likelihood sums out one hidden layer: RBMs only")
    vis, hid = machine.visible, machine.hidden
    if not isinstance(vis, Bernoulli | Spin):
        raise NotImplementedError(
            f"pseudo_log_likelihood needs binary (Bernoulli or Spin) visible units, got "
            f"{type(vis).__name__}; use test_log_likelihood with an AIS estimate of ln Z instead"
        )
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    nv = vis.size
    if sites is None:
        exact = n_sites is None or n_sites >= nv
        sites = torch.arange(nv) if exact else site_subsets(x.shape[0], nv, n_sites, generator)
    sites = torch.as_tensor(sites, device=x.device).long()
    shared = sites.dim() == 1
    W = machine.W
    B = x @ W
    zero = torch.zeros_like(B)
    lz = hid.log_partition(B, zero)  # (rows, Nh)
    delta = _flip_delta(vis, x)  # (rows, Nv)
    dlp_v = vis.log_prob(x + delta) - vis.log_prob(x)  # ln P_i(x~_i) - ln P_i(x_i), (rows, Nv)
    chunk = max(1, PL_CHUNK_ELEMENTS // max(1, x.shape[0] * hid.size))
    total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, sites.shape[-1], chunk):
        if shared:
            idx = sites[start : start + chunk]
            w, d, dv = W[idx][None], delta[:, idx], dlp_v[:, idx]
        else:
            idx = sites[:, start : start + chunk]  # (rows, c)
            w, d, dv = W[idx], delta.gather(1, idx), dlp_v.gather(1, idx)
        Bf = B[:, None, :] + d[:, :, None] * w  # (rows, c, Nh)
        dlz = (hid.log_partition(Bf, torch.zeros_like(Bf)) - lz[:, None, :]).sum(-1)
        # ln P(x_i | x_-i) = -softplus(F(x) - F(x~i)), F(x) - F(x~i) = dlp_v + dlz.
        total += -softplus(dv + dlz).sum(-1)
    return total * (nv / sites.shape[-1])


def site_subsets(
    rows: int, n_visible: int, n_sites: int, generator: torch.Generator | None = None
) -> Tensor:
    """Sites of the stochastic pseudo-likelihood, shape (rows, n_sites): for every row its own
    uniform draw of ``n_sites`` distinct sites of ``n_visible`` (the first ``n_sites`` of a random
    permutation, drawn as the order of float64 uniform keys), on the CPU with ``generator``."""
    if not 1 <= n_sites <= n_visible:
        raise ValueError(f"n_sites must lie in 1..{n_visible}, got {n_sites}")
    keys = torch.rand(rows, n_visible, generator=generator, dtype=torch.float64)
    return keys.argsort(dim=1)[:, :n_sites]


@torch.no_grad()
def test_log_likelihood(machine: BoltzmannMachine, x: Tensor, log_z) -> Tensor:
    """ln P(x) = -F(x) - ln Z per row (eq. 39's exact form), for ln Z from AIS or enumeration.

    ``log_z`` may be a number, a 0-d tensor or an ``AISResult``.
    """
    if isinstance(log_z, AISResult):
        log_z = log_z.log_z
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    return -machine.free_energy_visible(x) - log_z


test_log_likelihood.__test__ = False  # not a pytest test, despite its name


def mean_and_stderr(values: Tensor) -> tuple[float, float]:
    """Mean of per-row estimates (one value per image) and its standard error, std / sqrt(n)
    with Bessel's correction, in float64: the rows must be independent draws (for the
    pseudo-likelihood, sites drawn anew per row, ``site_subsets``). NaN for no rows; a standard
    error of 0 for one."""
    v = values.double().reshape(-1)
    if v.numel() == 0:
        return math.nan, math.nan
    se = float(v.std(correction=1) / math.sqrt(v.numel())) if v.numel() > 1 else 0.0
    return float(v.mean()), se
