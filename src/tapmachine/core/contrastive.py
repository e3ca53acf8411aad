"""Sampling-based log-likelihood gradients of RBMs: CD-k and persistent CD.

The gradient of the mean log-likelihood of the data X (first paper, eqs. 12-14) is

    dW_ij       = < x_i f_j(W^T x) >_X            - < v_i f_j(W^T v) >_model,
    dtheta^v_i  = < d ln P^v_i(x_i) / dtheta >_X  - < d ln P^v_i(v_i) / dtheta >_model,
    dtheta^h_j  = < d ln Z^h_j(W^T x, 0) / dtheta >_X - < d ln Z^h_j(W^T v, 0) / dtheta >_model,

with f_j(B) = f_a(B, 0) the conditional mean of hidden unit j (eq. 15) and Z^h_j(B, 0) the
hidden prior's normaliser (relative to P, as in eq. 41). The data terms are exact for an RBM
(``positive_phase``); where the TAP machine replaces the model terms by TAP solutions (eqs.
40-42), the estimators below replace them by Gibbs samples v, Rao-Blackwellised over h: the
hidden layer enters through its conditional mean f(W^T v) and d ln Z^h(W^T v, 0), not through a
sampled h (Hinton 2002; Tieleman 2008).

Every function returns the ascent direction in the structure of ``tap.tap_gradients``:
``{"weights": [dW], "priors": [{name: grad} for the visible prior, {name: grad} for the hidden
prior]}``, shapes as the parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine

__all__ = [
    "PersistentChains",
    "cd_gradients",
    "gibbs_sweep",
    "pcd_gradients",
    "positive_phase",
    "sufficient_statistics",
]


def _check_rbm(machine: BoltzmannMachine) -> None:
    if machine.n_layers != 2:
        raise ValueError("contrastive gradients sum out one hidden layer: RBMs (two layers) only")


def _as_rows(machine: BoltzmannMachine, x: Tensor) -> Tensor:
    return torch.as_tensor(x, dtype=machine.dtype, device=machine.device)


@torch.no_grad()
def sufficient_statistics(machine: BoltzmannMachine, v: Tensor) -> dict:
    """Row-averaged gradient of ln sum_h P(v, h) = -F(v) w.r.t. every parameter, at rows v.

    dW = v^T f(W^T v) / rows (eq. 14's first term), visible: mean of d ln P^v(v)/dtheta (eq. 12),
    hidden: mean of d ln Z^h(W^T v, 0)/dtheta (eq. 41's first term). Evaluated at the data it
    is the positive phase; at model samples, a Rao-Blackwellised estimate of the negative phase.
    """
    _check_rbm(machine)
    v = _as_rows(machine, v)
    B = v @ machine.W
    zero = torch.zeros_like(B)
    f = machine.hidden.moments(B, zero)[0]
    dW = v.T @ f / v.shape[0]
    vis = {k: g.mean(0) for k, g in machine.visible.grad_log_prob(v).items()}
    hid = {k: g.mean(0) for k, g in machine.hidden.grad_log_partition(B, zero).items()}
    return {"weights": [dW], "priors": [vis, hid]}


def positive_phase(machine: BoltzmannMachine, x: Tensor) -> dict:
    """The data terms of eqs. (12)-(14) (exact for an RBM): ``sufficient_statistics`` at x."""
    return sufficient_statistics(machine, x)


def _difference(pos: dict, neg: dict) -> dict:
    weights = [p - n for p, n in zip(pos["weights"], neg["weights"], strict=True)]
    priors = [
        {k: p[k] - n[k] for k in p} for p, n in zip(pos["priors"], neg["priors"], strict=True)
    ]
    return {"weights": weights, "priors": priors}


@torch.no_grad()
def gibbs_sweep(
    machine: BoltzmannMachine, v: Tensor, k: int = 1, generator: torch.Generator | None = None
) -> Tensor:
    """``k`` sweeps of block Gibbs sampling on the visible rows: h ~ P(h | v), then v ~ P(v | h).

    Each conditional is the layer's prior tilted by its input field (Q(x; B, 0), eq. 15), drawn
    with the prior's sampler, so any prior with a sampler works.
    """
    _check_rbm(machine)
    v = _as_rows(machine, v)
    for _ in range(k):
        h = machine.sample_layer(1, [v, None], generator)
        v = machine.sample_layer(0, [None, h], generator)
    return v


def cd_gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    k: int = 1,
    generator: torch.Generator | None = None,
) -> dict:
    """CD-k (Hinton 2002): ascent direction of the mean log-likelihood of the rows ``x``.

    One chain per data row, started at the row itself, runs ``k`` Gibbs sweeps; the negative
    statistics are taken at the final visible sample v_k with the hidden layer through its
    conditional mean f(W^T v_k) (and d ln Z^h(W^T v_k, 0) for the hidden prior):
    ``positive_phase(x) - sufficient_statistics(v_k)``.
    """
    x = _as_rows(machine, x)
    v = gibbs_sweep(machine, x, k, generator)
    return _difference(positive_phase(machine, x), sufficient_statistics(machine, v))


class PersistentChains:
    """Visible states of the persistent Markov chains of PCD (Tieleman 2008).

    ``visible`` has shape (n_chains, Nv); ``advance`` replaces it by the state ``k`` Gibbs
    sweeps later under the current machine. Chains persist across parameter updates.
    """

    def __init__(self, visible: Tensor):
        self.visible = visible

    @classmethod
    def from_data(
        cls, data: Tensor, n_chains: int | None = None, generator: torch.Generator | None = None
    ) -> PersistentChains:
        """Chains initialised at data rows: a random permutation of the rows of ``data``
        (drawn with ``generator``), repeated if ``n_chains`` exceeds the number of rows; by
        default one chain per row."""
        data = torch.as_tensor(data)
        n = data.shape[0] if n_chains is None else n_chains
        order = torch.randperm(data.shape[0], generator=generator).to(data.device)
        order = order.repeat(-(-n // data.shape[0]))[:n]
        return cls(data[order].clone())

    @property
    def n_chains(self) -> int:
        return self.visible.shape[0]

    def advance(
        self, machine: BoltzmannMachine, k: int = 1, generator: torch.Generator | None = None
    ) -> Tensor:
        self.visible = gibbs_sweep(machine, self.visible, k, generator)
        return self.visible


def pcd_gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    chains: PersistentChains,
    k: int = 1,
    generator: torch.Generator | None = None,
) -> dict:
    """Persistent CD (Tieleman 2008): ascent direction of the mean log-likelihood of ``x``.

    The persistent ``chains`` (``PersistentChains.from_data``: initialised at data rows) are
    advanced ``k`` Gibbs sweeps under the current machine (in place); the negative statistics
    are ``sufficient_statistics`` at their new visible states (hidden layer through its
    conditional mean): ``positive_phase(x) - sufficient_statistics(chains.visible)``.
    """
    x = _as_rows(machine, x)
    chains.visible = _as_rows(machine, chains.visible)
    v = chains.advance(machine, k, generator)
    return _difference(positive_phase(machine, x), sufficient_statistics(machine, v))
