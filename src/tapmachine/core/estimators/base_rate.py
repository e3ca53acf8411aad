"""The base-rate model that AIS anneals from: a visible field fitted to the data means."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.priors import Bernoulli, Prior, Spin

__all__ = ["BASE_CLIP", "base_rate_field", "base_field"]

#: Pixel means are clipped to [BASE_CLIP, 1 - BASE_CLIP] (spins: to +-(1 - 2 BASE_CLIP)) before
#: the base-rate field is fitted, so that empty or saturated pixels give a finite field.
BASE_CLIP = 1e-3


def base_rate_field(prior: Prior, data: Tensor | None = None) -> Tensor:
    """Field B_0 (shape (N,)) that tilts ``prior`` into the base-rate model of the visible layer.

    The base-rate model is Q(v; B_0, 0) = prod_i P_i(v_i) exp(B_0i v_i) / Z_i(B_0i, 0): independent
    units of the visible prior's family whose means equal the data means. For Bernoulli units its
    log-odds are logit(m_i) (Salakhutdinov & Murray 2008), so B_0 = logit(m_i) - U_i; for spins
    B_0 = atanh(m_i) - U_i; for any other prior B_0 solves f_a(B_0, 0) = m_i by bisection (f_a
    increases with B, its derivative being the variance f_c). The means m_i are clipped to
    [BASE_CLIP, 1 - BASE_CLIP] (binary) or +-(1 - 2 BASE_CLIP) (spins). Without data, B_0 = 0:
    the base model is the machine's own visible prior.
    """
    ref = next(iter(prior.params().values()))
    if data is None:
        return torch.zeros(prior.size, dtype=ref.dtype, device=ref.device)
    m = torch.as_tensor(data, dtype=torch.float64, device=ref.device).mean(0)
    params = {k: v.to(torch.float64) for k, v in prior.params().items()}
    if isinstance(prior, Bernoulli):
        m = m.clamp(BASE_CLIP, 1.0 - BASE_CLIP)
        field = torch.logit(m) - params["U"]
    elif isinstance(prior, Spin):
        m = m.clamp(-1.0 + 2 * BASE_CLIP, 1.0 - 2 * BASE_CLIP)
        field = torch.atanh(m) - params["U"]
    else:
        field = _match_mean(prior.replace(**params), m)
    return field.to(ref.dtype)


def base_field(prior: Prior, data: Tensor | None, base) -> Tensor:
    """B_0 from an explicit field, a binary base prior, or the data (``base_rate_field``)."""
    if base is None:
        return base_rate_field(prior, data)
    if isinstance(base, Prior):
        if type(base) is not type(prior) or not isinstance(prior, Bernoulli | Spin):
            raise ValueError(
                "a base given as a prior must be a Bernoulli or Spin prior of the visible "
                "layer's type; pass a field B_0 otherwise"
            )
        return base.U - prior.U
    return torch.as_tensor(base)


def _match_mean(prior: Prior, m: Tensor, iterations: int = 80) -> Tensor:
    """Solve f_a(B, 0) = m for B elementwise by bracketing and bisection (float64)."""
    lo = torch.full_like(m, -1.0)
    hi = torch.full_like(m, 1.0)

    def mean(B):
        a = prior.moments(B, torch.zeros_like(B))[0]
        return torch.nan_to_num(a, nan=0.0)

    for _ in range(12):  # widen the bracket to [-2^12, 2^12] at most
        lo = torch.where(mean(lo) > m, lo * 2.0, lo)
        hi = torch.where(mean(hi) < m, hi * 2.0, hi)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        below = mean(mid) < m
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    return 0.5 * (lo + hi)
