"""Gradients of the TAP log-likelihood (eqs. 40-42; App. E eqs. 126-129)."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.tap.inference import clamped_state
from tapmachine.core.tap.state import TAPState

__all__ = ["tap_gradients"]


def _prior_gradients(machine: BoltzmannMachine, state: TAPState) -> list:
    """Row-averaged d ln Z_l(B_l, A_l) / d theta_l of each free layer (None for a clamped one)."""
    dP = []
    for l, prior in enumerate(machine.priors):
        if l == 0 and state.clamped:
            dP.append(None)
            continue
        g = prior.grad_log_partition(state.B[l], state.A[l])
        dP.append({k: v.mean(0) for k, v in g.items()})
    return dP


def _coupling_gradient(W: Tensor, data: TAPState, model: TAPState, l: int) -> Tensor:
    """<a_l a_{l+1}^T + W * c_l c_{l+1}^T>_data - <same>_model for coupling l (eq. 40).

    d(-F)/dW_l = a_l a_{l+1}^T + W_l * c_l c_{l+1}^T for each row; the data and model averages
    are taken in one matmul each by stacking the rows, scaled by +1/M and -1/K, so no
    Nv x Nh temporary is made besides the result. A clamped layer has c = 0 and adds nothing
    to the second term.
    """
    M, K = data.n_rows, model.n_rows

    def stacked(kind: str, with_data: bool) -> Tensor:
        left_d, right_d = getattr(data, kind)[l], getattr(data, kind)[l + 1]
        left_m, right_m = getattr(model, kind)[l], getattr(model, kind)[l + 1]
        if not with_data:
            return torch.mm(left_m.T, right_m).mul_(-1.0 / K)
        left = torch.cat([left_d * (1.0 / M), left_m * (-1.0 / K)], dim=0)
        return torch.mm(left.T, torch.cat([right_d, right_m], dim=0))

    data_has_variance = not (data.clamped and l == 0)
    return stacked("a", True).addcmul_(W, stacked("c", data_has_variance))


def tap_gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    states: TAPState,
    clamped: TAPState | None = None,
    **solve_kwargs,
) -> dict:
    """Ascent direction of the batch-averaged TAP log-likelihood (eqs. 40-42; App. E 126-129).

    With the M data rows ``x`` and the K solutions in ``states`` held fixed,

        dW_l    = <d(-F_clamped)/dW_l>_data - <a_l a_{l+1}^T + W_l * c_l c_{l+1}^T>_solutions,
        dtheta_0 = <d ln P_0(x)/dtheta_0>_data - <d ln Z_0(B_0, A_0)/dtheta_0>_solutions,
        dtheta_l = <d ln Z_l(B_l-bar, A_l-bar)/dtheta_l>_data - <d ln Z_l(B_l, A_l)/dtheta_l>_sol.,

    For an RBM the data terms are exact (eq. 40: x f_a^h(W^T x, 0); eq. 41: d ln Z^h(W^T x, 0)).
    For deeper machines they use clamped TAP solutions (``clamped`` or ``clamped_state``).
    No regularisation or momentum.

    Returns
    -------
    dict
        {"weights": [dW_0, ...], "priors": [{name: grad} per layer]}, shapes as the parameters.
    """
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    if clamped is None:
        clamped = clamped_state(machine, x, **solve_kwargs)
    weights = [_coupling_gradient(W, clamped, states, l) for l, W in enumerate(machine.weights)]
    data_P, model_P = _prior_gradients(machine, clamped), _prior_gradients(machine, states)
    data_P[0] = {k: v.mean(0) for k, v in machine.visible.grad_log_prob(x).items()}
    priors = [{k: dp[k] - mp[k] for k in dp} for dp, mp in zip(data_P, model_P, strict=True)]
    return {"weights": weights, "priors": priors}
