"""The per-epoch evaluation of a training run: the TAP log-likelihood (eq. 39) as Fig. 3 shows it,
TAP's validity, weight statistics, and the signature that tells two evaluations apart."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine

__all__ = [
    "evaluate_tap_log_likelihood",
    "pass_and_validity",
    "evaluation_signature",
    "expected_signature",
    "evaluation_due",
    "evaluated",
    "latest_evaluation",
    "weight_stats",
]


def evaluate_tap_log_likelihood(
    machine: BoltzmannMachine, x: Tensor, solver: tap.SolverSettings, dedup_tol: float
) -> dict:
    """Normalised TAP log-likelihood (eq. 39 / (Nv + Nh)) of the rows of ``x``, as in Fig. 3.

    TAP is run by ``solver`` to convergence (``tol``, ``max_iter``) from every row (eqs. 37-38),
    and rows not converged then get a second pass at ``retry_damping``
    (``tap.solve_with_retry``); the free energy is averaged over the unique converged solutions
    (``dedup_tol``, max-abs distance of the magnetisations; distinct solutions differ by O(1) in
    some units). The schema's ``tol`` 1e-12
    is tighter than the paper's 1e-8: on trained models rows near marginal stability stop at 1e-8
    up to 0.1 from their fixed point, and one solution is then counted several times. Returns
    the mean, its standard error over rows, TAP's ln Z (minus the mean free energy of the unique
    solutions), the solution statistics (``n_converged_retry``: rows converged only in the
    second pass) and the TAP-validity and first-pass numbers of ``pass_and_validity``. When
    no row converges even then, the epoch has no TAP log-likelihood: the three numbers are NaN
    (``n_unique`` 0; Fig. 3 leaves a gap) and training goes on, rather than losing a long run
    to one epoch at which TAP has no fixed point within reach.
    """
    states = tap.solve_with_retry(machine, x, solver)
    reps, inverse, _ = tap.unique(states, dedup_tol)
    counts = {
        # Recorded, so that a record made with another second pass is recognised (resume, Fig. 12)
        "retry_tol": solver.retry_tol,
        "n_unique": int(reps.numel()),
        "n_converged": int(states.converged.sum()),
        "n_converged_retry": int((states.converged & (states.iterations > solver.max_iter)).sum()),
        "mean_iterations": float(states.iterations.float().mean()),
    }
    if reps.numel() == 0:
        return {"tap_ll": math.nan, "log_z_tap": math.nan, "tap_ll_stderr": math.nan, **counts}
    unique = states.select(reps)
    ll = tap.log_likelihood(machine, x, unique, per_unit=True)
    return {
        **pass_and_validity(machine, states, inverse, unique, float(ll.mean()), solver.max_iter),
        "tap_ll": float(ll.mean()),
        # The same number likelihood.tap_log_partition gives from these rows: Fig. 12's scoring
        # reuses it instead of solving again (likelihood.score_checkpoints).
        "log_z_tap": float(-tap.free_energy(machine, unique).double().mean()),
        "tap_ll_stderr": float(ll.std() / math.sqrt(len(ll))) if len(ll) > 1 else 0.0,
        **counts,
    }


def pass_and_validity(machine, states, inverse, unique, tap_ll: float, max_iter: int) -> dict:
    """What Fig. 3 shows beside an evaluation's TAP log-likelihood.

    ``tap_validity`` and ``tap_validity_median``: the largest and the median over the unique
    solutions of ``tap.onsager_strength`` (max_i c_i sum_j W_ij^2 c_j); ``tap_validity_rho``
    and ``tap_validity_rho_median``: the same of ``tap.onsager_spectral_radius``, the spectral
    radius of c_i W_ij^2 c_j that the first bounds (4-7 times below it on trained binary-MNIST
    RBMs); at or above 1 the second-order free energy is outside its range of validity.
    ``tap_ll_first_pass``: the TAP log-likelihood from only the unique solutions that some row
    reached in the first pass (at ``damping``), leaving out the fixed points only the second
    pass (at ``retry_damping``) found; ``n_unique_retry_only`` counts those (NaN log-likelihood when
    every solution is one). Eq. 39's data term does not depend on the solutions, so the mean
    log-likelihood moves by the change of their mean free energy over sum_l N_l: ``tap_ll``
    (the mean over all unique solutions) plus (mean F of the kept - mean F of all) / sum_l N_l
    (eq. 39 adds the mean free energy, an estimate of -ln Z).
    """
    strength = tap.onsager_strength(machine, unique)
    rho = tap.onsager_spectral_radius(machine, unique)
    first = states.converged & (states.iterations <= max_iter)
    reached = torch.zeros(unique.n_rows, dtype=torch.bool, device=first.device)
    reached[inverse[first]] = True
    out = {
        "tap_validity": float(strength.max()),
        "tap_validity_median": float(strength.median()),
        "tap_validity_rho": float(rho.max()),
        "tap_validity_rho_median": float(rho.median()),
        "n_unique_retry_only": int((~reached).sum()),
        "tap_ll_first_pass": math.nan,
    }
    if bool(reached.any()):
        F = tap.free_energy(machine, unique).double()
        shift = (F[reached].mean() - F.mean()) / sum(machine.sizes)
        out["tap_ll_first_pass"] = tap_ll + float(shift)
    return out


def evaluation_signature(trained: dict, row: dict) -> tuple:
    """(retry_damping, second-pass tolerance) of the evaluation recorded in ``row`` (a history
    row) under the training settings ``trained`` (``TrainSettings`` as a dict): the part of an
    evaluation outside the resume fingerprint. A row without ``retry_tol`` records no
    evaluation (None); a NaN one, an evaluation without a second pass."""
    value = row.get("retry_tol")
    retry_tol = None if value is None or math.isnan(value) else float(value)
    return trained["retry_damping"], retry_tol


def expected_signature(solver: tap.SolverSettings) -> tuple:
    """``evaluation_signature`` of an evaluation made now by ``solver`` (a training run's or a
    score's ``solver_settings``)."""
    return solver.retry_damping, solver.retry_tol


def evaluation_due(epoch: int, every: int, last_epoch: int) -> bool:
    """Whether epoch ``epoch`` is evaluated when a run evaluates every ``every``-th epoch: its
    multiples and the run's last epoch ``last_epoch`` (its final model is always scored)."""
    return epoch % every == 0 or epoch == last_epoch


def evaluated(row: dict) -> bool:
    """Whether a history row records an evaluation (every evaluation records ``n_unique``; an
    epoch between two evaluated ones records its training numbers only)."""
    return "n_unique" in row


def latest_evaluation(history: list[dict]) -> dict:
    """The last row of ``history`` that records an evaluation; ``{}`` when none does."""
    return next((row for row in reversed(history) if evaluated(row)), {})


def weight_stats(machine: BoltzmannMachine) -> dict:
    """Mean, standard deviation, largest magnitude and Frobenius norm of the couplings."""
    W = machine.W
    return {
        "w_mean": float(W.mean()),
        "w_std": float(W.std()),
        "w_max_abs": float(W.abs().max()),
        "w_norm": float(W.norm()),
    }
