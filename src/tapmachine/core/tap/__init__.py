"""TAP inference, TAP free energy and TAP log-likelihood of layered Boltzmann machines.

First paper (Tramel et al.), Sec. V-VI and App. E. A machine has layers x_0 (visible), ...,
x_L with unit priors P_l and couplings W_l of shape (N_l, N_{l+1}); see
``tapmachine.core.machine``. The TAP free energy of a layered machine, eq. (36) with the block
coupling matrix of eq. (125), is

    -F(a, c, B, A) = sum_l sum_i { ln Z_l(B_li, A_li) - B_li a_li + A_li (a_li^2 + c_li) / 2 }
                     + sum_l { a_l^T W_l a_{l+1} + (1/2) c_l^T (W_l * W_l) c_{l+1} },

where ln Z_l(B, A) is the log-normaliser of Q(x) ~ P_l(x) exp(-A x^2 / 2 + B x) relative to P_l
(``Prior.log_partition``; note that eq. 32 of the paper writes the tilt with the opposite signs,
but eqs. 33-36 and Alg. 1 are consistent with the convention used here). Its stationary points
satisfy the TAP equations (eqs. 33-35, Alg. 1)

    A_l = -( (W_{l-1} * W_{l-1})^T c_{l-1} + (W_l * W_l) c_{l+1} ),
    B_l = A_l a_l + W_{l-1}^T a_{l-1} + W_l a_{l+1},
    a_l = f_a(B_l, A_l),  c_l = f_c(B_l, A_l).

Sign convention: ``free_energy`` returns F = -(right-hand side of eq. 36), an estimate of
-ln Z (with Z normalised so that W = 0 gives ln Z = 0, as in ``estimators.exact_log_partition``).
The TAP log-likelihood of eq. (39) is then ln P(x) ~ data term + mean_k F_k.

All functions are batched: a ``TAPState`` holds K solutions as tensors of shape (K, N_l).

Modules: ``state`` (``TAPState``), ``settings`` (``SolverSettings``: how a solve runs),
``damped`` (one damped sweep of Alg. 1, and one with per-unit Newton damping), ``fused`` (its
layer update compiled), ``inference`` (``solve``, the second damped pass, clamped inference),
``anderson`` (the Anderson solver), ``static`` (Alg. 1's sweeps at fixed shapes without a
host synchronisation, for captured CUDA graphs), ``energy`` (free energy, log-likelihood),
``gradients``, ``merging`` (one solution per fixed point), ``onsager`` (validity of the expansion),
``stability`` (whether Alg. 1's iterates converge to a fixed point: its sweep's Jacobian).
"""

from tapmachine.core.tap.energy import (
    FREE_ENERGY_TERMS,
    data_log_term,
    energy_normaliser,
    free_energy,
    free_energy_terms,
    log_likelihood,
)
from tapmachine.core.tap.gradients import tap_gradients
from tapmachine.core.tap.inference import (
    SOLVERS,
    clamped_state,
    retry_tolerance,
    solve,
    solve_from,
    solve_with_retry,
)
from tapmachine.core.tap.merging import unique, unique_free_energy
from tapmachine.core.tap.onsager import onsager_spectral_radius, onsager_strength
from tapmachine.core.tap.settings import NEWTON_SOR_RELAXATION, SolverSettings, working_set_sizes
from tapmachine.core.tap.stability import sweep_radius_krylov, sweep_stability
from tapmachine.core.tap.state import TAPState

__all__ = [
    "TAPState",
    "SolverSettings",
    "NEWTON_SOR_RELAXATION",
    "SOLVERS",
    "solve",
    "solve_from",
    "retry_tolerance",
    "solve_with_retry",
    "clamped_state",
    "free_energy",
    "free_energy_terms",
    "energy_normaliser",
    "FREE_ENERGY_TERMS",
    "log_likelihood",
    "data_log_term",
    "unique",
    "unique_free_energy",
    "tap_gradients",
    "onsager_strength",
    "onsager_spectral_radius",
    "sweep_stability",
    "sweep_radius_krylov",
    "working_set_sizes",
]
