"""The TAP machine's gradient (first paper, Alg. 2): TAP solutions from the mini-batch (Alg. 1,
or adaTAP's Alg. 3 for ``inference: adatap``, App. D) in eqs. (40)-(42)."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.train.settings import TrainingError, TrainSettings

__all__ = [
    "tap_step_gradients",
    "initialisations",
    "fixed_solver",
    "solve_for_gradient",
    "converged_tap_gradients",
    "noisy_initialisations",
    "check_train_noise",
    "CONVERGED_STEP_SHARE",
]

#: A converged training step is one in which at least this share of the K rows converged: the
#: bar at which Alg. 2's model term is an average over TAP solutions, not over rows the cap
#: stopped (``stats["converged_steps"]``, reported per epoch as ``train_converged_step_share``).
CONVERGED_STEP_SHARE = 0.99


def tap_step_gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
    stats: dict | None = None,
    solve=None,
) -> dict:
    """Alg. 2's gradient on the batch ``x``: K TAP solutions from the batch's rows
    (``initialisations``), by ``train_iterations`` fixed iterations of Alg. 1 or until
    convergence (``converged_tap_gradients``). ``solve``: how the solutions are found, called
    as ``solve_for_gradient`` (its default; ``train.graphs`` passes its captured sweeps)."""
    init = initialisations(machine, x, settings, generator)
    solver = settings.solver_settings
    solve = solve or solve_for_gradient
    if settings.train_iterations == "converge":
        return converged_tap_gradients(
            machine,
            x,
            init,
            solver.replace(tol=settings.train_tol, max_iter=settings.train_max_iter),
            unique_tol=settings.dedup_tol if settings.train_unique else None,
            stats=stats,
            inference=settings.inference,
            solve=solve,
        )
    states = solve(machine, init, fixed_solver(settings), settings.inference)
    return tap.tap_gradients(machine, x, states)


def initialisations(
    machine: BoltzmannMachine, x: Tensor, settings: TrainSettings, generator: torch.Generator
) -> Tensor:
    """The K starts of a step's TAP solutions (eq. 37): the batch's rows (K = ``n_solutions``,
    the rows repeated when K exceeds the batch; ``x`` itself when K is the batch), with
    ``train_noise``'s flips (``noisy_initialisations``)."""
    K = settings.n_solutions or x.shape[0]
    init = x if K == x.shape[0] else x[torch.arange(K, device=x.device) % x.shape[0]]
    if settings.train_noise:
        init = noisy_initialisations(machine, init, settings.train_noise, generator)
    return init


def fixed_solver(settings: TrainSettings) -> tap.SolverSettings:
    """The solve of a fixed-iteration step: ``train_iterations`` of Alg. 1's damped sweeps
    (whatever ``solver`` says), rows stopping early at ``tol``."""
    return settings.solver_settings.replace(solver="damped", max_iter=settings.train_iterations)


def solve_for_gradient(
    machine: BoltzmannMachine, init: Tensor, solver: tap.SolverSettings, inference: str = "tap"
) -> tap.TAPState:
    """The TAP solutions of a training step from the rows ``init``: ``tap.solve`` by ``solver``
    (Alg. 1 or an accelerated solver), or adaTAP (``inference="adatap"``, Alg. 3, App. D) with
    its damping, tolerance and cap."""
    knobs = {"damping": solver.damping, "tol": solver.tol, "max_iter": solver.max_iter}
    if inference == "adatap":
        from tapmachine.core import adatap

        return adatap.solve(machine, init, **knobs)
    return tap.solve(
        machine, init, solver=solver.solver, fuse=solver.fuse, relaxation=solver.relaxation, **knobs
    )


def converged_tap_gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    init: Tensor,
    solver: tap.SolverSettings | None = None,
    unique_tol: float | None = None,
    stats: dict | None = None,
    inference: str = "tap",
    solve=None,
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
    ``solutions`` (sum of solutions used), ``unconverged_steps`` and ``converged_steps`` (steps
    in which at least ``CONVERGED_STEP_SHARE`` of the rows converged). The solutions come from
    ``solve_for_gradient`` (Alg. 1 by ``solver``, default ``tap.SolverSettings()``, or Alg. 3
    with ``inference="adatap"``), or from ``solve``, called alike.
    """
    solve = solve or solve_for_gradient
    states = solve(machine, init, solver or tap.SolverSettings(), inference)
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
        stats["converged_steps"] = stats.get("converged_steps", 0) + int(
            float(converged.float().mean()) >= CONVERGED_STEP_SHARE
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
