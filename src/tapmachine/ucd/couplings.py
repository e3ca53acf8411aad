"""Couplings of two Markov chains (X_t) and the lagged (Y_t) with the same marginal kernel.

Each coupling has ``first(x)`` (X_1 from X_0, the uncoupled first move) and ``coupled(x, y)``
((X_{t+1}, Y_t) from (X_t, Y_{t-1})). Both keep the marginal kernel of each chain exact, and once
X_t = Y_{t-1} every later pair is equal too, so tau = min{t >= 1: X_t = Y_{t-1}} is a meeting time
(Jacob et al. 2020; eq. 10).

- ``MHCoupling`` (Alg. 3 for the joint, Alg. 4 for the posterior; Wang et al. 2021): independent
  uniform proposals over the free layers, one proposal x' and one u ~ U[0, 1) shared by both
  chains, each accepting when u < min(1, exp(E(current) - E(x'))) (eq. 14). Works on any
  ``Target``, including the marginalised ones of eqs. 20-26.
- ``GibbsCoupling`` (Qiu et al. 2020): a block Gibbs sweep (odd layers, then even) in which each
  block's conditionals for the two chains are coupled maximally by the rejection construction of
  Jacob et al. (2020, Sec. 4.1). Plain targets only (nothing summed).

States are lists of (chains, N_l) tensors (``Target``); energies are cached alongside for MH.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.ucd.search import gibbs_sweep
from tapmachine.ucd.target import Target

__all__ = ["MHCoupling", "GibbsCoupling", "maximal_coupling"]


class MHCoupling:
    """Metropolis-Hastings with a uniform independent proposal, maximally coupled (Algs. 3-4).

    Started at x_0 = y_0, ``first`` gives x_1; when that proposal is rejected x_1 = y_0 and the
    chains have met with tau = 1 (the text of Sec. 3.3; the printed repeat-until of Alg. 3 would
    run one more coupled step and say tau = 2, with the same estimate). From a local mode in high
    dimension nearly every proposal is rejected, so tau = 1 almost always and the estimate is
    f(x_0): unbiasedness rests on the rare chains with tau > 1, which ``Estimate.corrected``
    marks and callers log (``estimator`` module docstring).
    """

    name = "mh"

    def __init__(self, target: Target, generator: torch.Generator):
        self.target = target
        self.generator = generator

    def energy(self, xs: list) -> Tensor:
        return self.target.energy(xs)

    def _propose(self, xs: list) -> tuple[list, Tensor, Tensor]:
        proposal = self.target.uniform(xs, self.generator)
        n = proposal[self.target.free[0]].shape[0]
        m = self.target.machine
        u = torch.rand(n, generator=self.generator, dtype=m.dtype, device=m.device)
        return proposal, self.target.energy(proposal), u

    @staticmethod
    def _accept(u: Tensor, e_current: Tensor, e_proposal: Tensor) -> Tensor:
        """u < min(1, exp(E(current) - E(proposal))) (eq. 14)."""
        return u < torch.exp(torch.clamp(e_current - e_proposal, max=0.0))

    def _move(self, xs, e, proposal, e_prop, accept):
        out = list(xs)
        for l in self.target.free:
            out[l] = torch.where(accept[:, None], proposal[l], xs[l])
        return out, torch.where(accept, e_prop, e)

    def first(self, xs: list, e: Tensor | None = None) -> tuple[list, Tensor]:
        """X_1 from X_0: one MH step (the lines before the loop of Alg. 3)."""
        e = self.energy(xs) if e is None else e
        proposal, e_prop, u = self._propose(xs)
        return self._move(xs, e, proposal, e_prop, self._accept(u, e, e_prop))

    def coupled(self, xs: list, ex: Tensor, ys: list, ey: Tensor):
        """(X_{t+1}, Y_t) from (X_t, Y_{t-1}): one shared proposal and u (the loop of Alg. 3)."""
        proposal, e_prop, u = self._propose(xs)
        x_new, ex_new = self._move(xs, ex, proposal, e_prop, self._accept(u, ex, e_prop))
        y_new, ey_new = self._move(ys, ey, proposal, e_prop, self._accept(u, ey, e_prop))
        return x_new, ex_new, y_new, ey_new


def _log_conditional(target: Target, layers, fields: dict, xs: list) -> Tensor:
    """ln prod_l Q_l(x_l; B_l, 0): the block's conditional log-probability, per chain."""
    m = target.machine
    total = 0.0
    for l in layers:
        B, prior = fields[l], m.priors[l]
        total = total + (
            prior.log_prob(xs[l]) + B * xs[l] - prior.log_partition(B, torch.zeros_like(B))
        ).sum(-1)
    return total


def _sample_block(target: Target, layers, fields: dict, generator) -> dict:
    m = target.machine
    return {
        l: m.priors[l].sample(fields[l], torch.zeros_like(fields[l]), generator=generator)
        for l in layers
    }


def maximal_coupling(
    target: Target, layers, p_fields: dict, q_fields: dict, generator, max_tries: int = 100_000
) -> tuple[dict, dict, int]:
    """A maximal coupling of two product conditionals p = Q(.; p_fields), q = Q(.; q_fields).

    Jacob et al. (2020, Sec. 4.1): X ~ p and W ~ U(0, p(X)); if W <= q(X) then Y = X; otherwise
    draw Y* ~ q and W* ~ U(0, q(Y*)) until W* > p(Y*) and set Y = Y*. Then X ~ p, Y ~ q and
    P(X = Y) = 1 - TV(p, q), the largest possible. Identical fields give X = Y always. The rejection
    loop is batched over the chains still waiting; each try succeeds with probability TV(p, q), so
    the expected number of tries is 1. Chains still waiting after ``max_tries`` keep their last
    Y* (a draw from q, not from the residual): their count is returned, and should be 0.
    """
    m = target.machine
    xs = _sample_block(target, layers, p_fields, generator)
    state_x = [xs.get(l) for l in range(m.n_layers)]
    log_px = _log_conditional(target, layers, p_fields, state_x)
    log_qx = _log_conditional(target, layers, q_fields, state_x)
    n = log_px.shape[0]
    w = torch.log(torch.rand(n, generator=generator, dtype=m.dtype, device=m.device)) + log_px
    ys = {l: xs[l].clone() for l in layers}
    rest = (w > log_qx).nonzero().squeeze(-1)
    tries = 0
    while rest.numel() and tries < max_tries:
        tries += 1
        qf = {l: q_fields[l].index_select(0, rest) for l in layers}
        pf = {l: p_fields[l].index_select(0, rest) for l in layers}
        cand = _sample_block(target, layers, qf, generator)
        state_c = [cand.get(l) for l in range(m.n_layers)]
        log_qc = _log_conditional(target, layers, qf, state_c)
        log_pc = _log_conditional(target, layers, pf, state_c)
        u = torch.rand(rest.numel(), generator=generator, dtype=m.dtype, device=m.device)
        ok = torch.log(u) + log_qc > log_pc
        for l in layers:
            kept = ys[l].index_select(0, rest)
            ys[l].index_copy_(0, rest, torch.where(ok[:, None], cand[l], kept))
        rest = rest[~ok]
    return xs, ys, int(rest.numel())


class GibbsCoupling:
    """Block Gibbs sampler whose block conditionals are maximally coupled (Qiu et al. 2020)."""

    name = "gibbs"

    def __init__(self, target: Target, generator: torch.Generator):
        if target.summed:
            raise ValueError("the Gibbs coupling samples the plain machine: nothing may be summed")
        self.target = target
        self.generator = generator
        self.unfinished_rejections = 0

    def energy(self, xs: list) -> None:
        return None

    def first(self, xs: list, e=None) -> tuple[list, None]:
        """X_1 from X_0: one ordinary block Gibbs sweep (odd layers, then even)."""
        return gibbs_sweep(self.target, xs, self.generator), None

    def coupled(self, xs: list, ex, ys: list, ey):
        """(X_{t+1}, Y_t): the sweep of ``first`` with each block drawn by ``maximal_coupling``."""
        m = self.target.machine
        x_new, y_new = list(xs), list(ys)
        for parity in (1, 0):
            layers = [l for l in self.target.free if l % 2 == parity]
            if not layers:
                continue
            p_fields = {l: m.input_to(l, x_new) for l in layers}
            q_fields = {l: m.input_to(l, y_new) for l in layers}
            bx, by, left = maximal_coupling(self.target, layers, p_fields, q_fields, self.generator)
            self.unfinished_rejections += left
            for l in layers:
                x_new[l], y_new[l] = bx[l], by[l]
        return x_new, None, y_new, None
