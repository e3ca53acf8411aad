"""TAP free energy and TAP log-likelihood (eqs. 36, 39; App. E)."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.tap.inference import clamped_state
from tapmachine.core.tap.state import TAPState

__all__ = [
    "free_energy",
    "energy_normaliser",
    "free_energy_terms",
    "FREE_ENERGY_TERMS",
    "data_log_term",
    "log_likelihood",
]


def _site_terms(prior, a, c, B, A) -> Tensor:
    """Per-row sum over a layer of ln Z(B, A) - B a + A (a^2 + c) / 2 (eq. 36, first lines)."""
    return (prior.log_partition(B, A) - B * a + 0.5 * A * (a * a + c)).sum(-1)


def _mean_field_term(W, a0, a1) -> Tensor:
    """Per-row a0^T W a1, the naive mean-field part of eq. (36)'s last line."""
    return ((a0 @ W) * a1).sum(-1)


def _onsager_term(W, c0, c1) -> Tensor:
    """Per-row (1/2) c0^T (W * W) c1, the Onsager reaction part of eq. (36)'s last line."""
    return 0.5 * ((c0 @ (W * W)) * c1).sum(-1)


def _coupling_terms(W, a0, c0, a1, c1) -> Tensor:
    """Per-row a0^T W a1 + (1/2) c0^T (W * W) c1 (eq. 36, last line)."""
    return _mean_field_term(W, a0, a1) + _onsager_term(W, c0, c1)


def free_energy(machine: BoltzmannMachine, state: TAPState) -> Tensor:
    """TAP free energy F of each row of ``state``, shape (K,).

    F = -(right-hand side of eq. 36), extended to layered machines (App. E, eq. 125): a sum of
    site terms over all free layers plus coupling terms between neighbouring layers. At a TAP
    solution, -F approximates ln Z up to O(W^3), with Z normalised so that ln Z = 0 at W = 0.
    For a clamped state the visible layer's site term is omitted (a delta prior at the data
    contributes zero) and -F approximates ln sum_h exp(x^T W_0 h_1 + ...) prod P(h), the
    clamped log-partition of eq. (121).

    The expression is evaluated with the state's own A and B (it is the variational eq. 36), so
    it is differentiable w.r.t. the machine parameters with the state held fixed.
    """
    neg_F = 0.0
    for l, prior in enumerate(machine.priors):
        if l == 0 and state.clamped:
            continue
        neg_F = neg_F + _site_terms(prior, state.a[l], state.c[l], state.B[l], state.A[l])
    for l, W in enumerate(machine.weights):
        neg_F = neg_F + _coupling_terms(W, state.a[l], state.c[l], state.a[l + 1], state.c[l + 1])
    return -neg_F


#: The parts of -F that ``free_energy_terms`` returns, in the order of eq. (36).
FREE_ENERGY_TERMS = ("site_visible", "site_hidden", "mean_field", "onsager")


def free_energy_terms(machine: BoltzmannMachine, state: TAPState) -> dict[str, Tensor]:
    """The four parts of -F (eq. 36) for each row of ``state``, each of shape (K,).

    - ``site_visible``: sum_i ln Z_i^v(B_i, A_i) - B_i a_i + A_i (a_i^2 + c_i) / 2 over the
      visible layer (zero for a clamped state), the first line of eq. (36): the visible units'
      entropy and prior (bias) term;
    - ``site_hidden``: the same over every hidden layer (second line);
    - ``mean_field``: sum_ij W_ij a_i a_j over all couplings (naive mean-field energy);
    - ``onsager``: sum_ij W_ij^2 c_i c_j / 2, the Onsager reaction term (second order).

    F = -(site_visible + site_hidden + mean_field + onsager) equals ``free_energy`` up to
    rounding. Splitting F this way tells which part drives its change over training (Fig. 5's
    free-energy trend): the site terms move with the biases and with how far the means sit
    from them, the coupling terms with the weights' growth.
    """
    zero = torch.zeros(state.a[0].shape[0], dtype=state.a[0].dtype, device=state.a[0].device)
    sites = [
        zero
        if l == 0 and state.clamped
        else _site_terms(prior, state.a[l], state.c[l], state.B[l], state.A[l])
        for l, prior in enumerate(machine.priors)
    ]
    mean_field, onsager = zero, zero
    for l, W in enumerate(machine.weights):
        mean_field = mean_field + _mean_field_term(W, state.a[l], state.a[l + 1])
        onsager = onsager + _onsager_term(W, state.c[l], state.c[l + 1])
    return {
        "site_visible": sites[0],
        "site_hidden": sum(sites[1:], zero),
        "mean_field": mean_field,
        "onsager": onsager,
    }


def energy_normaliser(machine: BoltzmannMachine) -> float:
    """sum over all units of ln Z_B = ln sum_x e^{U x} (eq. 111), a float; NaN unless every
    layer is binary.

    ``free_energy`` follows eq. (36) with eq. (112)'s normalised priors: -F estimates ln Z
    relative to the priors (0 at W = 0). The usual binary-RBM free energy, -ln sum e^{-E} with
    E = -U.v - V.h - v^T W h, is F minus this sum; the two differ by a constant per model that
    moves with the biases, so a course over training can differ (Fig. 5)."""
    try:
        return float(sum(p.energy_normaliser().double().sum() for p in machine.priors))
    except NotImplementedError:
        return float("nan")


def data_log_term(
    machine: BoltzmannMachine, x: Tensor, clamped: TAPState | None = None, **solve_kwargs
) -> Tensor:
    """The data term of the TAP log-likelihood (eq. 39; App. E eq. 121), one value per row, (M,).

    ln P(x) ~ [this] - ln Z, with ln Z estimated elsewhere (``log_likelihood`` adds the mean TAP
    free energy of given solutions; Fig. 12's scoring subtracts a recorded ln Z). For an RBM it is
    exact: sum_i ln P_i(x_i) + sum_j ln Z_j^h(sum_i W_ij x_i, 0). For deeper machines the second
    part is -F of the clamped TAP solution (``clamped``, or ``clamped_state(machine, x,
    **solve_kwargs)``).
    """
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    ll = machine.visible.log_prob(x).sum(-1)
    if machine.n_layers == 2:
        B = x @ machine.W
        ll = ll + machine.hidden.log_partition(B, torch.zeros_like(B)).sum(-1)
    else:
        if clamped is None:
            clamped = clamped_state(machine, x, **solve_kwargs)
        if not clamped.clamped:
            raise ValueError("`clamped` must come from clamped inference (solve(..., clamp=x))")
        ll = ll - free_energy(machine, clamped)
    return ll


def log_likelihood(
    machine: BoltzmannMachine,
    x: Tensor,
    states: TAPState,
    per_unit: bool = False,
    clamped: TAPState | None = None,
    **solve_kwargs,
) -> Tensor:
    """TAP log-likelihood of each data row (eq. 39; App. E eq. 121 for deep machines), (M,).

        ln P(x) ~ sum_i ln P_i(x_i) + [data term] + (1/K) sum_k F(solution k),

    where F = ``free_energy`` (an estimate of -ln Z). For an RBM the data term is exact:
    sum_j ln Z_j^h(sum_i W_ij x_i, 0). For deeper machines it is -F of the clamped TAP solution
    (App. E), taken from ``clamped`` if given, else computed by ``clamped_state(machine, x,
    **solve_kwargs)``. The average runs over all K rows of ``states`` (use ``states.select`` to
    keep, e.g., only converged or unique solutions). With ``per_unit`` the result is divided by
    the total number of units sum_l N_l (Nv + Nh for an RBM), the paper's normalisation.
    """
    ll = data_log_term(machine, x, clamped, **solve_kwargs)
    ll = ll + free_energy(machine, states).mean()
    if per_unit:
        ll = ll / sum(machine.sizes)
    return ll
