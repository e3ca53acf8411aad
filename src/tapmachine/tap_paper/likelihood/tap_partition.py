"""TAP's estimate of ln Z (eq. 39): solved from training images, or as training recorded it."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.modelfile import Checkpoint, ModelFile
from tapmachine.tap_paper.likelihood.settings import ScoreSettings

__all__ = [
    "TAP_INFO_KEYS",
    "evaluation_differs",
    "recorded_final_tap_partition",
    "recorded_tap_partition",
    "tap_log_partition",
]


def tap_log_partition(
    machine: BoltzmannMachine, x_init: Tensor, settings: ScoreSettings
) -> tuple[tap.TAPState, dict]:
    """TAP solutions from the rows of ``x_init`` and TAP's estimate of ln Z.

    Returns the unique converged solutions and ``{"log_z_tap": -<F>, "n_unique", "n_converged",
    "mean_iterations"}``, with <F> the mean TAP free energy (eq. 36) over the unique solutions
    (``tap.unique`` at ``dedup_tol``), the estimate eq. 39 uses; NaN (no solutions) when no
    row converges, also not in the second pass at ``retry_damping``.
    """
    states = tap.solve_with_retry(machine, x_init, settings.solver_settings)
    reps, _, _ = tap.unique(states, settings.dedup_tol)
    unique = states.select(reps)
    info = {
        # NaN when no row converges (as training records it): that epoch has no TAP estimate
        "log_z_tap": float(-tap.free_energy(machine, unique).double().mean())
        if reps.numel()
        else math.nan,
        "n_unique": int(reps.numel()),
        "n_converged": int(states.converged.sum()),
        "mean_iterations": float(states.iterations.float().mean()),
    }
    return unique, info


#: The TAP numbers of a score row that come from one solve (or from training's record of it).
TAP_INFO_KEYS = ("log_z_tap", "n_unique", "n_converged", "mean_iterations")

#: Checkpoint ``settings`` keys (``TrainSettings``) that must equal the score settings'.
_SAME_TAP = ("damping", "tol", "max_iter", "dedup_tol")
#: Checkpoint settings written before the key existed did the run without its value here.
_ABSENT_MEANS = {"retry_damping": None, "solver": "damped"}


def evaluation_differs(trained: dict, settings: ScoreSettings) -> str:
    """Why training's per-epoch TAP evaluation (``trained``: ``TrainSettings`` as a dict) is not
    the solve scoring would do at ``settings``; "" when it is (see ``recorded_tap_partition``)."""
    if not trained:
        return "checkpoint has no training settings"
    if not trained.get("evaluate", True):
        return "training did not evaluate TAP"
    if trained.get("eval_samples") != settings.tap_inits:
        return f"eval_samples {trained.get('eval_samples')} != tap_inits {settings.tap_inits}"
    for key in _SAME_TAP:
        if key not in trained or trained[key] != getattr(settings, key):
            return f"training's {key} {trained.get(key)} != scoring's {getattr(settings, key)}"
    for key, absent in _ABSENT_MEANS.items():
        if trained.get(key, absent) != getattr(settings, key):
            ours = getattr(settings, key)
            return f"training's {key} {trained.get(key, absent)} != scoring's {ours}"
    return ""


def recorded_tap_partition(
    ckpt: Checkpoint, settings: ScoreSettings, dtype: torch.dtype
) -> tuple[dict | None, str]:
    """TAP's ln Z as training's per-epoch evaluation recorded it, if it is what scoring would get.

    Training (``evaluate_tap_log_likelihood``) solves TAP from the first
    ``eval_samples`` training rows after every epoch and records ``log_z_tap`` (minus the mean
    free energy of the unique converged solutions) with the solution counts in the checkpoint's
    history. Scoring solves from the first ``tap_inits`` of the same rows (``score_checkpoints``:
    the model's ``n_train`` rows of its dataset), so the record is reused only when the evaluation
    was the same computation: ``eval_samples == tap_inits``, equal ``damping``, ``tol``,
    ``max_iter``, ``retry_damping``, second-pass tolerance (``tap.retry_tolerance``, recorded in
    the row) and ``dedup_tol``, and the checkpoint's parameters stored in ``dtype``.
    Returns ``(info, "training")`` or ``(None, why not)``; checkpoints written before training
    recorded ``log_z_tap`` (or without evaluation) give None.
    """
    return _recorded(ckpt.settings, ckpt.history, ckpt.epoch, ckpt.machine_state, settings, dtype)


def recorded_final_tap_partition(
    model: ModelFile, settings: ScoreSettings, dtype: torch.dtype
) -> tuple[dict | None, str]:
    """``recorded_tap_partition`` for a final model (``model.pt``): training's evaluation after
    its last epoch, with the training settings rebuilt from the model's config entry."""
    from tapmachine.train import TrainingError, TrainSettings

    try:
        trained = dataclasses.asdict(TrainSettings.from_spec(model.spec)) if model.spec else {}
    except (TrainingError, TypeError, ValueError) as err:
        return None, f"training settings not readable from the model's spec ({err})"
    return _recorded(trained, model.history, model.n_epochs, model.machine_state, settings, dtype)


def _recorded(trained, history, epoch, machine_state, settings, dtype):
    from tapmachine.train import evaluation_signature, expected_signature

    why = evaluation_differs(trained, settings)
    if why:
        return None, why
    row = next((r for r in history if r.get("epoch") == epoch), None)
    if row is None or any(k not in row for k in TAP_INFO_KEYS):
        return None, f"epoch {epoch} has no recorded log_z_tap"
    (_, recorded), (_, ours) = (
        evaluation_signature(trained, row),
        expected_signature(settings.solver_settings),
    )
    if recorded != ours:
        return None, f"training's second pass used tol {recorded}, scoring's uses {ours}"
    stored = machine_state["weights"][0].dtype
    if stored != dtype:
        return None, f"stored dtype {stored} != scoring dtype {dtype}"
    return {k: row[k] for k in TAP_INFO_KEYS}, "training"
