"""One training loop for every gradient method: TAP (Alg. 2), CD-k and PCD-k, and for DBMs
UCD-LMI and its PCD baselines (second paper; ``tapmachine.ucd.dbm``).

The loop owns everything around the gradient: minibatches, the update rule of Alg. 2 (step size,
l2 penalty and momentum on the couplings), learning-rate schedules, per-epoch evaluation by the
TAP log-likelihood (eq. 39), checkpoints that make an interrupted run resume with identical
results, divergence checks and MLflow logging.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import re
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core import contrastive, eta, tap
from tapmachine.core import priors as priors_module
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Prior, Spin
from tapmachine.io import modelfile
from tapmachine.io.files import is_disk_full, remove_temporaries, write_csv
from tapmachine.io.modelfile import (
    MODEL_FILE,
    Checkpoint,
    ModelFile,
    ModelFileError,
    checkpoint_epochs,
    machine_from_state,
    machine_state,
)

__all__ = [
    "TrainingError",
    "TrainSettings",
    "build_machine",
    "learning_rate",
    "machine_state",
    "machine_from_state",
    "evaluate_tap_log_likelihood",
    "converged_tap_gradients",
    "RHO_STEPS",
    "train",
    "train_from_spec",
    "resume_message",
    "resumed_epoch",
    "seeded_generator",
]


class TrainingError(Exception):
    """Training cannot go on (divergence, inconsistent resume state, bad settings)."""


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """The optimisation settings of one model (a config ``models.<name>`` entry, validated)."""

    epochs: int = 100
    batch_size: int = 100
    n_solutions: int | None = None
    learning_rate: float | dict = 0.005
    momentum: float = 0.5
    l2: float = 0.001
    weight_init_std: float = 0.001
    method: str = "tap"
    sampling_steps: int = 1
    damping: float = 0.5
    #: TAP solver of the converged training steps and the per-epoch evaluation (``tap.SOLVERS``):
    #: Alg. 1's damped iteration, or Anderson mixing on it (same fixed points, fewer iterations;
    #: ``tap.solve``). Fixed-iteration steps always take Alg. 1's damped iterations.
    solver: str = "damped"
    train_iterations: int | str = 3
    train_tol: float = 1e-8
    train_max_iter: int = 100
    train_unique: bool = True
    rho_step: str = "logit"
    tol: float = 1e-12
    max_iter: int = 500
    #: Damping of the evaluation's second pass over rows not converged within ``max_iter``
    #: (``tap.solve_with_retry``; None: no second pass). It changes no training numerics.
    retry_damping: float | None = 0.95
    dedup_tol: float = 1e-2
    eval_samples: int = 1000
    #: DBM methods (``ucd.dbm.DBM_METHODS``): the switches and settings of ``ucd.dbm.DBMOptions``.
    ucd: dict | None = None
    #: Run the per-epoch TAP evaluation (off where a DBM run is scored elsewhere).
    evaluate: bool = True
    train_noise: dict | None = None
    inference: str = "tap"

    @classmethod
    def from_spec(cls, spec: dict) -> TrainSettings:
        tap_spec, eval_spec = spec.get("tap", {}), spec.get("eval", {})
        keys = {f.name for f in dataclasses.fields(cls)}
        plain = {k: v for k, v in spec.items() if k in keys}
        plain.update({k: v for k, v in tap_spec.items() if k in keys})
        if "n_samples" in eval_spec:
            plain["eval_samples"] = eval_spec["n_samples"]
        return cls(**plain)

    def __post_init__(self):
        it = self.train_iterations
        if not (it == "converge" or (isinstance(it, int) and not isinstance(it, bool) and it >= 1)):
            raise TrainingError(
                f"tap.train_iterations must be a positive integer or 'converge', not {it!r}"
            )
        if self.solver not in tap.SOLVERS:
            raise TrainingError(f"tap.solver must be one of {tap.SOLVERS}, not {self.solver!r}")
        if self.rho_step not in RHO_STEPS:
            raise TrainingError(f"rho_step must be one of {RHO_STEPS}, not {self.rho_step!r}")
        if self.retry_damping is not None and not 0.0 <= self.retry_damping < 1.0:
            raise TrainingError(f"tap.retry_damping must be in [0, 1), not {self.retry_damping}")


def seeded_generator(seed: int, *labels: str, device="cpu") -> torch.Generator:
    """A generator seeded from (config seed, model, stage, ...): same config, same numbers.

    Kept as a sha256 of the labels rather than ``numpy.random.SeedSequence``: SeedSequence takes
    integers, not labels, and would change every random stream (and so every result) of a run.
    """
    digest = hashlib.sha256("/".join([str(seed), *labels]).encode()).digest()
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return g


def learning_rate(schedule: float | dict, epoch: int, epochs: int) -> float:
    """Step size at ``epoch`` (1-based): constant, or geometric from ``start`` to ``end``.

    Table 1 gives real-MNIST a step size from 1e-2 down to 1e-5; a geometric decay over the
    epochs is the monotone schedule Alg. 2 allows.
    """
    if not isinstance(schedule, dict):
        return float(schedule)
    if epochs == 1:
        return float(schedule["start"])
    frac = (epoch - 1) / (epochs - 1)
    return float(schedule["start"] * (schedule["end"] / schedule["start"]) ** frac)


# ----------------------------------------------------------------------------------------------
# Building machines
# ----------------------------------------------------------------------------------------------


def _visible_prior(spec: dict, x: Tensor) -> Prior:
    """Visible prior with parameters from the data means (Alg. 2: theta^(0) <- X)."""
    kind = spec["prior"]
    mean = x.mean(0)
    if kind == "bernoulli":
        m = mean.clamp(1e-3, 1 - 1e-3)
        return Bernoulli(torch.log(m) - torch.log1p(-m))
    if kind == "spin":
        return Spin(torch.atanh(mean.clamp(-0.999, 0.999)))
    lower, upper = float(spec.get("lower", 0.0)), float(spec.get("upper", 1.0))
    if kind == "truncated_gaussian":
        V = 1.0 / x.var(0).clamp_min(1e-2)
        return priors_module.TruncatedGaussian(V * mean, V, lower, upper)
    if kind == "truncated_gauss_bernoulli":
        nonzero = (x != 0).to(x.dtype)
        rho = nonzero.mean(0).clamp(1e-3, 1 - 1e-3)
        count = nonzero.sum(0).clamp_min(1.0)
        mu = (x * nonzero).sum(0) / count
        var = ((x - mu) ** 2 * nonzero).sum(0) / count
        V = 1.0 / var.clamp_min(1e-2)
        return priors_module.TruncatedGaussBernoulli(rho, V * mu, V, lower, upper)
    raise TrainingError(f"unknown prior {kind!r}")


def _hidden_prior(spec: dict, n: int, dtype, device) -> Prior:
    """Hidden prior at its neutral point: zero fields, unit precision, rho = 1/2."""
    zeros = torch.zeros(n, dtype=dtype, device=device)
    kind = spec["prior"]
    lower, upper = float(spec.get("lower", 0.0)), float(spec.get("upper", 1.0))
    if kind == "bernoulli":
        return Bernoulli(zeros)
    if kind == "spin":
        return Spin(zeros)
    if kind == "truncated_gaussian":
        return priors_module.TruncatedGaussian(zeros, zeros + 1.0, lower, upper)
    if kind == "truncated_gauss_bernoulli":
        return priors_module.TruncatedGaussBernoulli(zeros + 0.5, zeros, zeros + 1.0, lower, upper)
    raise TrainingError(f"unknown prior {kind!r}")


def build_machine(spec: dict, x: Tensor, weight_std: float, generator) -> BoltzmannMachine:
    """Alg. 2's initial machine: W ~ N(0, weight_std^2), visible priors from the data means."""
    layers = [spec["visible"], *spec["hidden"]]
    sizes = [x.shape[1], *(h["units"] for h in spec["hidden"])]
    priors = [_visible_prior(layers[0], x)]
    priors += [
        _hidden_prior(s, n, x.dtype, x.device) for s, n in zip(layers[1:], sizes[1:], strict=True)
    ]
    weights = [
        weight_std
        * torch.randn(n0, n1, generator=generator, dtype=x.dtype, device=generator.device).to(
            x.device
        )
        for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    return BoltzmannMachine(priors=tuple(priors), weights=tuple(weights))


def load_model(path, device="cpu", dtype=None) -> BoltzmannMachine:
    """The machine saved in a ``model.pt`` or a checkpoint (``modelfile`` reads it)."""
    blob = ModelFile.load(path) if Path(path).name == MODEL_FILE else Checkpoint.load(path)
    return blob.machine(device=device, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# Updates
# ----------------------------------------------------------------------------------------------


def _gradients(machine, x, settings: TrainSettings, chains, generator, stats=None) -> dict:
    if settings.method == "tap":
        K = settings.n_solutions or x.shape[0]
        init = x if K == x.shape[0] else x[torch.arange(K, device=x.device) % x.shape[0]]
        solver = functools.partial(tap.solve, solver=settings.solver)
        if settings.inference == "adatap":  # App. D: adaTAP's (a, c, B, A) in Alg. 2's gradients
            from tapmachine.core import adatap

            solver = adatap.solve
        if settings.train_noise:
            init = noisy_initialisations(machine, init, settings.train_noise, generator)
        if settings.train_iterations == "converge":
            return converged_tap_gradients(
                machine,
                x,
                init,
                damping=settings.damping,
                tol=settings.train_tol,
                max_iter=settings.train_max_iter,
                unique_tol=settings.dedup_tol if settings.train_unique else None,
                stats=stats,
                solver=solver,
            )
        fixed = tap.solve if settings.inference == "tap" else solver
        states = fixed(
            machine,
            init,
            damping=settings.damping,
            tol=settings.tol,
            max_iter=settings.train_iterations,
        )
        return tap.tap_gradients(machine, x, states)
    if settings.method in _DBM_METHODS:
        from tapmachine.ucd import dbm

        options = dbm.DBMOptions.from_dict(settings.ucd)
        return dbm.gradients(
            machine, x, settings.method, options, chains, settings.sampling_steps, generator
        )
    if settings.method == "cd":
        return contrastive.cd_gradients(machine, x, settings.sampling_steps, generator)
    return contrastive.pcd_gradients(machine, x, chains, settings.sampling_steps, generator)


def converged_tap_gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    init: Tensor,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    unique_tol: float | None = None,
    stats: dict | None = None,
    solver=tap.solve,
) -> dict:
    """Alg. 2's gradient: Alg. 1 run "until Convergence" from ``init``, eqs. (40)-(42).

    The K rows of ``init`` (data points, eqs. 37-38) are iterated until the mean squared step of
    the magnetisations is below ``tol`` or ``max_iter`` iterations have passed. Only the rows
    that converged enter the model term (a row stopped by the cap is not a TAP solution); with
    ``unique_tol`` the converged rows are first grouped (``tap.unique``, max-abs distance of the
    magnetisations) and each unique solution gets weight 1/K with K the number of unique
    solutions -- eq. (40)'s average over "the set of TAP solutions", as Fig. 3 averages the free
    energy over unique solutions; without it every converged row counts (solutions weighted by
    how many data points fall into them). If no row converged, all rows are used and the step
    is counted in ``stats["unconverged_steps"]``. ``stats`` (optional dict) accumulates
    ``steps``, ``iterations`` (sum of mean iterations), ``converged`` (sum of converged fractions),
    ``solutions`` (sum of solutions used) and ``unconverged_steps``. ``solver`` is
    ``tap.solve`` (Alg. 1) or ``adatap.solve`` (Alg. 3, ``inference: adatap``, App. D).
    """
    states = solver(machine, init, damping=damping, tol=tol, max_iter=max_iter)
    converged = states.converged
    if bool(converged.any()):
        if unique_tol is not None:
            keep, _, _ = tap.unique(states, unique_tol)
        else:
            keep = torch.nonzero(converged, as_tuple=True)[0]
        used = states.select(keep)
    else:
        used = states
    if stats is not None:
        stats["steps"] = stats.get("steps", 0) + 1
        stats["iterations"] = stats.get("iterations", 0.0) + float(states.iterations.float().mean())
        stats["converged"] = stats.get("converged", 0.0) + float(converged.float().mean())
        stats["solutions"] = stats.get("solutions", 0) + used.n_rows
        stats["unconverged_steps"] = stats.get("unconverged_steps", 0) + int(
            not bool(converged.any())
        )
    return tap.tap_gradients(machine, x, used)


def noisy_initialisations(
    machine: BoltzmannMachine, init: Tensor, noise: dict, generator: torch.Generator
) -> Tensor:
    """TAP initialisations with the first ``fraction`` of the rows flipped at rate ``p``.

    Beyond the paper: the remedy Sec. VII.4.1 suggests for the spurious TAP solutions near noisy
    images (``train_noise: {fraction, p}``). The batch is already shuffled, so its first
    round(fraction K) rows are a random subset; each of their bits flips independently with
    probability p (binary symmetric channel, eq. 43: x -> 1 - x for {0, 1} units, x -> -x for
    spins), from the training generator. The data term of the gradient keeps the clean batch.
    """
    n_noisy = int(round(float(noise["fraction"]) * init.shape[0]))
    if n_noisy == 0 or float(noise["p"]) == 0.0:
        return init
    check_train_noise(machine, noise)
    rows = init[:n_noisy]
    u = torch.rand(rows.shape, generator=generator, device=generator.device, dtype=rows.dtype)
    flips = u.to(rows.device) < float(noise["p"])
    flipped = -rows if isinstance(machine.visible, Spin) else 1.0 - rows
    return torch.cat([torch.where(flips, flipped, rows), init[n_noisy:]], 0)


def check_train_noise(machine: BoltzmannMachine, noise: dict | None) -> None:
    """``train_noise`` needs binary visible units and fraction in [0, 1], p in [0, 0.5]."""
    if not noise:
        return
    if not isinstance(machine.visible, Bernoulli | Spin):
        raise TrainingError(
            f"train_noise flips bits: the visible prior must be bernoulli or spin, "
            f"got {type(machine.visible).__name__}"
        )
    fraction, p = noise.get("fraction"), noise.get("p")
    if fraction is None or not 0.0 <= float(fraction) <= 1.0:
        raise TrainingError(f"train_noise.fraction = {fraction} must be in [0, 1]")
    if p is None or not 0.0 <= float(p) <= 0.5:
        raise TrainingError(f"train_noise.p = {p} must be in [0, 0.5]")


_RHO_RANGE = (1e-6, 1.0 - 1e-6)
#: How the Gauss-Bernoulli mixture weight rho is stepped (config ``rho_step``).
RHO_STEPS = ("plain", "logit")
_DBM_METHODS = ("ucd_lmi", "dbm_pcd", "centered_pcd")


def _step_prior_parameter(
    name: str, value: Tensor, grad: Tensor, lr: float, rho_step: str = "logit"
) -> Tensor:
    """theta <- theta + lr dtheta (Alg. 2), with two ways to step the mixture weight rho.

    ``rho_step="plain"`` is Alg. 2 as written: rho <- rho + lr d ln L / d rho, clipped into
    (0, 1) (``_RHO_RANGE``). ``rho_step="logit"`` (a departure, see the README) steps
    logit(rho) by lr * rho (1 - rho) * d ln L / d rho: the step in rho is then to first order
    lr [rho (1 - rho)]^2 d ln L / d rho, the plain step shrunk by [rho (1 - rho)]^2 (16x at
    rho = 1/2, about 400x at rho = 0.05). d ln L / d rho carries a factor 1 / (rho (1 - rho))
    (eqs. 108-109), so plain steps on pixels that are almost always (or never) zero overshoot
    the unit interval and are clipped; the logit step stays inside it, but it is a smaller,
    reparametrised step, not a natural-gradient (Fisher) rescaling.
    """
    if name != "rho":
        return value + lr * grad
    rho = value.clamp(*_RHO_RANGE)
    if rho_step == "plain":
        return (rho + lr * grad).clamp(*_RHO_RANGE)
    logit = torch.log(rho) - torch.log1p(-rho)
    return torch.sigmoid(logit + lr * rho * (1.0 - rho) * grad).clamp(*_RHO_RANGE)


def _apply_update(machine, grads, velocity, lr, settings: TrainSettings):
    """Alg. 2: W <- W + lr (dW - l2 W) + momentum * previous W step; theta <- theta + lr dtheta.

    Heavy-ball momentum: the velocity carries the whole previous step, its l2 term included.
    Alg. 2 prints the momentum term as eta dW^(t-1), the previous gradient without the learning
    rate, which at eta = 0.5 and lr = 0.005 would outweigh the gradient step 100 to 1; the
    previous step is the usual reading (README, departures)."""
    new_weights = []
    for l, (W, dW) in enumerate(zip(machine.weights, grads["weights"], strict=True)):
        # In place on the velocity buffer: Nv x Nh temporaries cost as much as the matmuls.
        step = velocity[l].mul_(settings.momentum).add_(dW, alpha=lr)
        if settings.l2:
            step.add_(W, alpha=-lr * settings.l2)
        new_weights.append(W + step)
    new_priors = []
    for prior, dP in zip(machine.priors, grads["priors"], strict=True):
        if not dP:
            new_priors.append(prior)
            continue
        updated = {
            name: _step_prior_parameter(name, value, dP[name], lr, settings.rho_step)
            for name, value in prior.params().items()
        }
        new_priors.append(prior.replace(**updated))
    return machine.replace(priors=new_priors, weights=new_weights)


def _check_finite(machine: BoltzmannMachine, epoch: int, batch: int) -> None:
    for l, W in enumerate(machine.weights):
        if not torch.isfinite(W).all():
            raise TrainingError(
                f"diverged at epoch {epoch}, batch {batch}: weights[{l}] not finite"
            )
    for l, p in enumerate(machine.priors):
        for name, v in p.params().items():
            if not torch.isfinite(v).all():
                raise TrainingError(
                    f"diverged at epoch {epoch}, batch {batch}: layer {l} prior {name} not finite"
                )


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------


def evaluate_tap_log_likelihood(
    machine: BoltzmannMachine, x: Tensor, settings: TrainSettings
) -> dict:
    """Normalised TAP log-likelihood (eq. 39 / (Nv + Nh)) of the rows of ``x``, as in Fig. 3.

    TAP is run to convergence (``tol``, ``max_iter``) from every row (eqs. 37-38), and rows not
    converged then get a second pass at ``retry_damping`` (``tap.solve_with_retry``); the free
    energy is averaged over the unique converged solutions (``dedup_tol``, max-abs distance of the
    magnetisations; distinct solutions differ by O(1) in some units). The default ``tol`` 1e-12
    is tighter than the paper's 1e-8: on trained models rows near marginal stability stop at 1e-8
    up to 0.1 from their fixed point, and one solution is then counted several times. Returns
    the mean, its standard error over rows, TAP's ln Z (minus the mean free energy of the unique
    solutions), the solution statistics (``n_converged_retry``: rows converged only in the
    second pass) and the TAP-validity and first-pass numbers of ``_pass_and_validity``. When
    no row converges even then, the epoch has no TAP log-likelihood: the three numbers are NaN
    (``n_unique`` 0; Fig. 3 leaves a gap) and training goes on, rather than losing a long run
    to one epoch at which TAP has no fixed point within reach.
    """
    states = tap.solve_with_retry(
        machine,
        x,
        damping=settings.damping,
        tol=settings.tol,
        max_iter=settings.max_iter,
        retry_damping=settings.retry_damping,
        solver=settings.solver,
    )
    reps, inverse, _ = tap.unique(states, settings.dedup_tol)
    counts = {
        # Recorded, so that a record made with another second pass is recognised (resume, Fig. 12)
        "retry_tol": tap.retry_tolerance(settings.tol, settings.damping, settings.retry_damping),
        "n_unique": int(reps.numel()),
        "n_converged": int(states.converged.sum()),
        "n_converged_retry": int(
            (states.converged & (states.iterations > settings.max_iter)).sum()
        ),
        "mean_iterations": float(states.iterations.float().mean()),
    }
    if reps.numel() == 0:
        return {"tap_ll": math.nan, "log_z_tap": math.nan, "tap_ll_stderr": math.nan, **counts}
    unique = states.select(reps)
    ll = tap.log_likelihood(machine, x, unique, per_unit=True)
    return {
        **_pass_and_validity(machine, states, inverse, unique, float(ll.mean()), settings.max_iter),
        "tap_ll": float(ll.mean()),
        # The same number likelihood.tap_log_partition gives from these rows: Fig. 12's scoring
        # reuses it instead of solving again (likelihood.score_checkpoints).
        "log_z_tap": float(-tap.free_energy(machine, unique).double().mean()),
        "tap_ll_stderr": float(ll.std() / math.sqrt(len(ll))) if len(ll) > 1 else 0.0,
        **counts,
    }


def _pass_and_validity(machine, states, inverse, unique, tap_ll: float, max_iter: int) -> dict:
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


def recorded_retry_tol(row: dict, trained: dict) -> float | None:
    """The second-pass tolerance of the evaluation recorded in ``row`` (a history row) under the
    training settings ``trained`` (``TrainSettings`` as a dict). Rows from before it was recorded
    made their second pass, if any, at the first pass's ``tol``; None: no second pass."""
    if "retry_tol" in row:
        value = row["retry_tol"]
        return None if value is None or math.isnan(value) else float(value)
    return trained.get("tol") if trained.get("retry_damping") is not None else None


def evaluation_signature(trained: dict, row: dict) -> tuple:
    """(retry_damping, second-pass tolerance) of the evaluation recorded in ``row``: the part of
    an evaluation outside the resume fingerprint. ``retry_damping`` is absent in checkpoints
    written before it existed, which made no second pass."""
    return trained.get("retry_damping"), recorded_retry_tol(row, trained)


def expected_signature(settings) -> tuple:
    """``evaluation_signature`` of an evaluation made now with ``settings`` (``TrainSettings`` or
    ``likelihood.ScoreSettings``)."""
    retry_tol = tap.retry_tolerance(settings.tol, settings.damping, settings.retry_damping)
    return settings.retry_damping, retry_tol


def _evaluated_alike(ckpt: Checkpoint, settings: TrainSettings) -> bool:
    """Whether a checkpoint's latest evaluation is the one ``settings`` would make now. Every
    other evaluation setting is in the fingerprint."""
    row = ckpt.history[-1] if ckpt.history else {}
    return evaluation_signature(ckpt.settings, row) == expected_signature(settings)


def resume_checkpoint(ckpt_dir: Path, fingerprint: str) -> tuple[Path, Checkpoint] | None:
    """The newest checkpoint in ``ckpt_dir`` that reads whole and was written with
    ``fingerprint``, with its path; None to start afresh.

    A checkpoint that cannot be read (truncated, overwritten) is named in one line on stderr and
    removed: it holds nothing, and an older one resumes instead, so corruption costs only the
    epochs after the newest whole checkpoint. If the newest readable checkpoint was written with
    other settings or data, every checkpoint is stale and all are removed.
    """
    for epoch in reversed(checkpoint_epochs(ckpt_dir)):
        path = ckpt_dir / f"epoch_{epoch}.pt"
        try:
            ckpt = Checkpoint.load(path)
        except ModelFileError as err:
            print(f"{_SKIPPED}{err}", file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        if ckpt.fingerprint == fingerprint:
            return path, ckpt
        print(
            f"checkpoints in {ckpt_dir} come from other settings or data: starting afresh",
            file=sys.stderr,
        )
        for stale in ckpt_dir.glob("epoch_*.pt"):
            stale.unlink()
        return None
    return None


def _save_checkpoint(ckpt: Checkpoint, path: Path) -> None:
    """``ckpt.save(path)``; a full disk stops training with one line that says what is kept."""
    try:
        ckpt.save(path)
    except (OSError, RuntimeError) as err:
        if not is_disk_full(err):
            raise
        kept = f"epoch {ckpt.epoch - 1}" if ckpt.epoch > 1 else "no epoch"
        raise TrainingError(
            f"no space left on device writing {path}: the checkpoints up to {kept} are whole "
            "and kept; free some space and run again to resume from them"
        ) from None


def resume_message(checkpoint: Path, epoch: int) -> str:
    """The line a resumed run writes first to its log (stderr), read back by ``resumed_epoch``."""
    return f"resuming from {checkpoint} (epoch {epoch})"


_RESUME_LINE = re.compile(r"resuming from .+ \(epoch (\d+)\)")
_SKIPPED = "skipping unreadable checkpoint: "


def resumed_epoch(log_text: str) -> int:
    """The epoch a training job's log says its start resumed from; 0 for a fresh start.

    Snakemake writes a job's log anew at each start, so the log of a finished job is its last
    start's, the one its benchmark file times (``figures.claims.wall_times``). The resume line
    is the first thing training writes; lines before it from elsewhere (unreadable checkpoints
    skipped, ``resume_checkpoint``; a tracking library's notices) are passed over, up to the
    first epoch's output.
    """
    for line in log_text.split("\n"):
        match = _RESUME_LINE.fullmatch(line.strip())
        if match:
            return int(match.group(1))
        if line.startswith(("epoch ", "progress ")):
            return 0
    return 0


def reevaluate_history(
    ckpt_dir: Path,
    history: list[dict],
    machine: BoltzmannMachine,
    x_eval: Tensor,
    settings: TrainSettings,
    progress: bool = False,
) -> list[dict]:
    """The history of a resumed run with every epoch evaluated as ``settings`` evaluate.

    A run may resume with another ``retry_damping`` or second-pass tolerance (not in the
    fingerprint; ``evaluation_signature``). Each earlier epoch whose checkpoint was evaluated
    otherwise is evaluated again from that checkpoint's parameters (in ``machine``'s dtype and
    device), and the checkpoint is rewritten with the new row and settings, one epoch at a time,
    so an interrupted pass resumes where it stopped and Fig. 12's reuse of an epoch's record
    (``likelihood.recorded_tap_partition``) sees the new one. The timing columns stay those of
    the original epoch. Epochs without a readable checkpoint keep their rows.
    """
    from tqdm import tqdm

    history = [dict(row) for row in history]
    stale = []
    for i, row in enumerate(history):
        path = ckpt_dir / f"epoch_{row['epoch']}.pt"
        if not path.exists():
            continue
        try:
            ckpt = Checkpoint.load(path)
        except ModelFileError as err:  # its row stays as recorded
            print(f"skipping unreadable checkpoint: {err}", file=sys.stderr)
            continue
        if _evaluated_alike(ckpt, settings):
            history[i] = dict(ckpt.history[-1])  # possibly evaluated again by an earlier pass
        else:
            stale.append((i, path, ckpt))
    if stale:
        print(
            f"evaluating {len(stale)} epochs again: the evaluation's second pass changed "
            "(retry_damping or its tolerance)",
            file=sys.stderr,
        )
    for i, path, ckpt in tqdm(stale, desc="re-evaluating", file=sys.stderr, disable=not progress):
        earlier = ckpt.machine(machine.device, machine.dtype)
        history[i].update(evaluate_tap_log_likelihood(earlier, x_eval, settings))
        ckpt.history = history[: i + 1]
        ckpt.settings = dataclasses.asdict(settings)
        ckpt.save(path)
    return history


def _weight_stats(machine: BoltzmannMachine) -> dict:
    W = machine.W
    return {
        "w_mean": float(W.mean()),
        "w_std": float(W.std()),
        "w_max_abs": float(W.abs().max()),
        "w_norm": float(W.norm()),
    }


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


#: Version of the arithmetic that produces a training run's numbers, part of the resume
#: fingerprint: a checkpoint written under another version is not resumed (its epochs would mix
#: two versions of the arithmetic). Bump it in the commit that changes any number a training run
#: produces from the same settings, data and seed: the update rule, the gradients (tap,
#: contrastive), the priors' functions, the machine's energies, the random streams, the
#: evaluation. Do not bump it for refactors, comments or formatting that leave the numbers equal.
NUMERICS_VERSION = 1


def _fingerprint(machine: BoltzmannMachine, x_train: Tensor, settings: TrainSettings) -> str:
    """Identity of a training run for resuming: settings, initial machine, training data and
    ``NUMERICS_VERSION``.

    The number of epochs is left out when the step size is constant, so a finished run can be
    extended; a decaying schedule depends on it, so there it counts. ``inference`` is left out
    at its default ``tap``, so checkpoints written before the setting existed still resume.
    """
    h = hashlib.sha256(f"numerics {NUMERICS_VERSION}".encode())
    if settings.method in _DBM_METHODS:
        from tapmachine.ucd import dbm

        h.update(f"dbm numerics {dbm.NUMERICS_VERSION}".encode())
    fields = dataclasses.asdict(settings)
    # The DBM switches at their defaults leave the fingerprint of an RBM run as it was before
    # they existed, so its checkpoints still resume.
    if fields["ucd"] is None:
        fields.pop("ucd")
    if fields["evaluate"]:
        fields.pop("evaluate")
    if not isinstance(settings.learning_rate, dict):
        fields.pop("epochs")
    if not fields.get("train_noise"):
        # Without noise the run is the one before train_noise existed: its checkpoints resume.
        fields.pop("train_noise", None)
    if settings.train_iterations != "converge":
        # The converged mode's tolerance, cap and weighting do not touch fixed-iteration numbers.
        for key in ("train_tol", "train_max_iter", "train_unique"):
            fields.pop(key, None)
    if settings.rho_step == "logit":
        # The logit step is the rho update from before rho_step existed: its checkpoints resume.
        fields.pop("rho_step", None)
    if fields["inference"] == "tap":  # the default: fingerprints from before the setting existed
        fields.pop("inference")
    if fields.get("solver") == "damped":  # Alg. 1, as before the setting existed
        fields.pop("solver")
    # The evaluation's second pass feeds nothing back into training; each history row records
    # what it did (n_converged_retry), so a resumed run may change it.
    fields.pop("retry_damping", None)
    h.update(repr(sorted(fields.items())).encode())
    for W in machine.weights:
        h.update(W.detach().cpu().contiguous().numpy().tobytes())
    for prior in machine.priors:
        h.update(type(prior).__name__.encode() + repr(prior.config()).encode())
        for v in prior.params().values():
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
    h.update(x_train.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(
    machine: BoltzmannMachine,
    x_train: Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
    checkpoint_dir: str | os.PathLike | None = None,
    x_eval: Tensor | None = None,
    on_epoch=None,
    progress: bool = True,
    on_step=None,
) -> tuple[BoltzmannMachine, list[dict]]:
    """Train ``machine`` on the rows of ``x_train``; returns the final machine and metrics.

    Every epoch: shuffled minibatches of ``batch_size`` rows, one update per batch, then the TAP
    log-likelihood of ``x_eval`` (default: the first ``eval_samples`` training rows), weight
    statistics and timings. With ``checkpoint_dir``, the full state (machine, momentum, chains,
    generator, metrics) is saved after every epoch and a later call resumes from the last one,
    giving results identical to an uninterrupted run. ``on_epoch(epoch, metrics, machine)`` is
    called after each epoch (logging); ``on_step(step, metrics)`` after each update with the
    DBM methods' per-step metrics (tau, T, corrected fraction, start energy gap, norm).
    """
    from tqdm import tqdm

    check_train_noise(machine, settings.train_noise)
    if x_eval is None:
        x_eval = x_train[: settings.eval_samples]
    velocity = [torch.zeros_like(W) for W in machine.weights]
    chains = None
    if settings.method == "pcd":
        chains = contrastive.PersistentChains.from_data(
            x_train, n_chains=settings.batch_size, generator=generator
        )
    elif settings.method in _DBM_METHODS:
        from tapmachine.ucd import dbm

        options = dbm.DBMOptions.from_dict(settings.ucd)
        chains = dbm.init_state(
            machine, x_train, settings.method, options, settings.batch_size, generator
        )
    history: list[dict] = []
    start = 1
    ckpt_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckpt_dir is not None:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        fingerprint = _fingerprint(machine, x_train, settings)
        remove_temporaries(ckpt_dir)  # left by a write killed mid-way; the files themselves whole
        found = resume_checkpoint(ckpt_dir, fingerprint)
        if found is not None:
            last, ckpt = found
            machine = ckpt.machine(machine.device, machine.dtype)
            velocity = [v.to(machine.device) for v in ckpt.velocity]
            generator.set_state(ckpt.generator)
            if ckpt.dbm_state is not None:
                from tapmachine.ucd import dbm

                chains = dbm.DBMState.from_dict(ckpt.dbm_state, machine.device)
            elif ckpt.chains is not None:
                chains = contrastive.PersistentChains(ckpt.chains.to(machine.device))
            history = ckpt.history
            start = ckpt.epoch + 1
            print(resume_message(last, ckpt.epoch), file=sys.stderr)
            if settings.evaluate and not _evaluated_alike(ckpt, settings):
                # A pass rewrites the latest checkpoint last: if it is alike, all are.
                history = reevaluate_history(ckpt_dir, history, machine, x_eval, settings, progress)
            for row in history:
                if on_epoch is not None:
                    on_epoch(row["epoch"], row, machine)

    n = x_train.shape[0]
    n_batches = max(1, n // settings.batch_size)
    # the whole job's ETA, a line per epoch (the bar below is the epoch's)
    job = eta.Progress(settings.epochs, f"training {settings.method}", 0.0, start - 1)
    for epoch in range(start, settings.epochs + 1):
        t0, cpu0 = time.perf_counter(), time.process_time()
        lr = learning_rate(settings.learning_rate, epoch, settings.epochs)
        order = torch.randperm(n, generator=generator, device=generator.device).to(x_train.device)
        bar = tqdm(
            range(n_batches),
            desc=f"epoch {epoch}/{settings.epochs}",
            file=sys.stderr,
            disable=not progress,
            mininterval=5.0,
        )
        step_stats: dict = {}
        for b in bar:
            x = x_train[order[b * settings.batch_size : (b + 1) * settings.batch_size]]
            grads = _gradients(machine, x, settings, chains, generator, step_stats)
            machine = _apply_update(machine, grads, velocity, lr, settings)
            _check_finite(machine, epoch, b)
            if on_step is not None:
                metrics = dict(getattr(chains, "metrics", None) or {})
                on_step((epoch - 1) * n_batches + b + 1, metrics)
        train_seconds = time.perf_counter() - t0
        metrics = {"epoch": epoch, "learning_rate": lr, "train_seconds": train_seconds}
        if step_stats:
            n_steps = step_stats["steps"]
            metrics["train_mean_iterations"] = step_stats["iterations"] / n_steps
            metrics["train_converged_fraction"] = step_stats["converged"] / n_steps
            metrics["train_mean_solutions"] = step_stats["solutions"] / n_steps
            metrics["train_unconverged_steps"] = step_stats["unconverged_steps"]
        if settings.evaluate:
            metrics.update(evaluate_tap_log_likelihood(machine, x_eval, settings))
        metrics.update(_weight_stats(machine))
        metrics["epoch_seconds"] = time.perf_counter() - t0
        # CPU time as well: on a shared machine the wall time says more about the load than the job
        metrics["epoch_cpu_seconds"] = time.process_time() - cpu0
        history.append(metrics)
        if settings.evaluate and metrics["n_unique"] == 0:
            print(
                f"epoch {epoch}: no TAP solution converged from any of {x_eval.shape[0]} rows "
                "(also not in the second pass): tap_ll is NaN for this epoch",
                file=sys.stderr,
            )
        elif settings.evaluate:
            print(
                f"epoch {epoch}: tap_ll {metrics['tap_ll']:.5f} +- {metrics['tap_ll_stderr']:.5f}, "
                f"{metrics['n_unique']} unique solutions, {metrics['epoch_seconds']:.1f} s",
                file=sys.stderr,
            )
        if ckpt_dir is not None:
            checkpoint = Checkpoint(
                machine_state=machine_state(machine),
                epoch=epoch,
                history=history,
                velocity=[v.cpu() for v in velocity],
                generator=generator.get_state(),
                fingerprint=fingerprint,
                settings=dataclasses.asdict(settings),
                chains=chains.visible.cpu() if settings.method == "pcd" else None,
                dbm_state=chains.to_dict() if settings.method in _DBM_METHODS else None,
            )
            _save_checkpoint(checkpoint, ckpt_dir / f"epoch_{epoch}.pt")
        if on_epoch is not None:
            on_epoch(epoch, metrics, machine)
        if progress:
            job.advance()
    return machine, history


def train_from_spec(
    name: str,
    spec: dict,
    data_path: str,
    outdir: str,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    on_start=None,
    on_epoch=None,
    on_pretrain_epoch=None,
) -> BoltzmannMachine:
    """Train the model ``name`` of the config on ``data_path``; write model.pt and metrics.csv.

    ``on_start(params, tags)`` is called once the initial machine is built, before the first
    epoch, with a description of the run; it may return the run's id, stored in model.pt as its
    provenance. ``on_epoch(epoch, metrics, machine)`` is called after every epoch. A model with
    ``pretrain:`` settings (a deep TAP machine) is first pretrained greedily (Alg. 4,
    ``pretrain.pretrain_from_spec``), calling ``on_pretrain_epoch(layer, epoch, metrics)`` after
    each greedy RBM epoch. The stage layer (``pipeline.stages.train``) passes callbacks that
    log to MLflow; this module knows nothing of tracking.
    """
    from tapmachine.io import data

    settings = TrainSettings.from_spec(spec)
    torch_dtype = getattr(torch, dtype)
    ds = data.load_dataset(data_path)
    x_all = torch.as_tensor(ds.x_train, dtype=torch_dtype)
    if spec.get("n_train"):
        x_all = x_all[: spec["n_train"]]
    if x_all.shape[0] < settings.batch_size:
        raise TrainingError(
            f"model {name}: {x_all.shape[0]} training rows is fewer than batch_size "
            f"{settings.batch_size}"
        )
    x_train = x_all.to(device)
    generator = seeded_generator(seed, name, "train")
    machine = build_machine(spec, x_train, settings.weight_init_std, generator)
    check_train_noise(machine, settings.train_noise)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    job = {"dataset_file": str(data_path), "seed": seed, "device": str(device), "dtype": dtype}
    params = {"model": name, **job, **spec, "sizes": [int(n) for n in machine.sizes]}
    tags = {"model": name, "dataset": ds.name, "method": settings.method}
    if ds.provenance.get("substitute"):
        tags["substitute"] = str(ds.provenance["substitute"])
    run_id = on_start(params, tags) if on_start is not None else None
    if spec.get("pretrain"):  # deep TAP machines: greedy pretraining first (Alg. 4)
        from tapmachine.train import pretrain

        machine = pretrain.pretrain_from_spec(
            machine, x_train, spec, settings, generator, outdir, on_epoch=on_pretrain_epoch
        )
    machine, history = train(
        machine,
        x_train,
        settings,
        generator,
        checkpoint_dir=modelfile.checkpoint_dir(outdir),
        on_epoch=on_epoch,
    )
    ModelFile.from_machine(
        machine,
        name,
        spec=spec,
        history=history,
        dataset=ds.name,
        substitute=ds.provenance.get("substitute"),
        mlflow_run_id=run_id,
    ).save(modelfile.model_path(outdir))
    write_csv(history, outdir / "metrics.csv")
    return machine
