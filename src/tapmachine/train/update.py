"""Alg. 2's update of the parameters from a gradient: step size schedule, l2 penalty and
heavy-ball momentum on the couplings, the prior parameters' steps, and the divergence check."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.train.settings import TrainingError, TrainSettings

__all__ = [
    "RHO_RANGE",
    "learning_rate",
    "sampling_steps_at",
    "momentum_at",
    "prior_velocity_start",
    "step_prior_parameter",
    "apply_update",
    "check_finite",
]

#: Where a stepped mixture weight rho is kept (clipped into the open unit interval).
RHO_RANGE = (1e-6, 1.0 - 1e-6)


def learning_rate(
    schedule: float | dict, epoch: int, epochs: int, sampling_steps: int = 1
) -> float:
    """Step size at ``epoch`` (1-based): constant, geometric from ``start`` to ``end``, or
    ``over_sampling_steps`` / k with k the epoch's CD-k steps (``sampling_steps``).

    Table 1 gives real-MNIST a step size from 1e-2 down to 1e-5; a geometric decay over the
    epochs is the monotone schedule Alg. 2 allows. An epoch past ``epochs`` (an estimator's
    further ``partial_fit``) keeps the last step size, ``end``. The third form is the
    ``anneal_lr`` branch of Salakhutdinov's ``rbm.m`` (repository surban/ruslan-ais): epsilon =
    epsilon_0 / CD, the step shrinking as ``sampling_steps_at`` lengthens the chains.
    """
    if not isinstance(schedule, dict):
        return float(schedule)
    if "over_sampling_steps" in schedule:
        return float(schedule["over_sampling_steps"]) / sampling_steps
    if epochs == 1:
        return float(schedule["start"])
    frac = min(epoch - 1, epochs - 1) / (epochs - 1)
    return float(schedule["start"] * (schedule["end"] / schedule["start"]) ** frac)


def sampling_steps_at(schedule: int | dict, epoch: int) -> int:
    """k of the CD-k / PCD-k steps of ``epoch`` (1-based): constant, or ``start`` rising by one
    every ``every`` epochs up to ``end``.

    The rising form is the ``anneal_lr`` branch of Salakhutdinov's ``rbm.m`` (repository
    surban/ruslan-ais), CD = ceil(epoch / 10): ``{start: 1, end: 25, every: 10}`` reaches CD-25
    at epoch 241.
    """
    if not isinstance(schedule, dict):
        return int(schedule)
    rise = (epoch - 1) // schedule["every"]
    return int(min(schedule["end"], schedule["start"] + rise))


def momentum_at(schedule: float | dict, epoch: int) -> float:
    """Momentum of the steps of ``epoch`` (1-based): constant, or ``initial`` up to and including
    epoch ``switch_epoch`` and ``final`` after it.

    The two-level form is Salakhutdinov's CD training of the RBMs of Salakhutdinov & Murray
    (2008) (``rbm.m`` of his AIS code, repository surban/ruslan-ais: momentum 0.5 while
    ``epoch <= 5``, 0.9 after).
    """
    if not isinstance(schedule, dict):
        return float(schedule)
    return float(schedule["initial"] if epoch <= schedule["switch_epoch"] else schedule["final"])


def prior_velocity_start(machine: BoltzmannMachine) -> list[Tensor]:
    """Zero velocities of the prior parameters that ``prior_momentum`` steps with momentum: every
    parameter of every layer but a mixture weight rho, layer by layer in ``params()`` order."""
    return [
        torch.zeros_like(value)
        for prior in machine.priors
        for name, value in prior.params().items()
        if name != "rho"
    ]


def step_prior_parameter(
    name: str, value: Tensor, grad: Tensor, lr: float, rho_step: str = "logit"
) -> Tensor:
    """theta <- theta + lr dtheta (Alg. 2), with two ways to step the mixture weight rho.

    ``rho_step="plain"`` is Alg. 2 as written: rho <- rho + lr d ln L / d rho, clipped into
    (0, 1) (``RHO_RANGE``). ``rho_step="logit"`` (a departure, see the README) steps
    logit(rho) by lr * rho (1 - rho) * d ln L / d rho: the step in rho is then to first order
    lr [rho (1 - rho)]^2 d ln L / d rho, the plain step shrunk by [rho (1 - rho)]^2 (16x at
    rho = 1/2, about 400x at rho = 0.05). d ln L / d rho carries a factor 1 / (rho (1 - rho))
    (eqs. 108-109), so plain steps on pixels that are almost always (or never) zero overshoot
    the unit interval and are clipped; the logit step stays inside it, but it is a smaller,
    reparametrised step, not a natural-gradient (Fisher) rescaling.
    """
    if name != "rho":
        return value + lr * grad
    rho = value.clamp(*RHO_RANGE)
    if rho_step == "plain":
        return (rho + lr * grad).clamp(*RHO_RANGE)
    logit = torch.log(rho) - torch.log1p(-rho)
    return torch.sigmoid(logit + lr * rho * (1.0 - rho) * grad).clamp(*RHO_RANGE)


def apply_update(
    machine: BoltzmannMachine,
    grads: dict,
    velocity: list,
    lr: float,
    settings: TrainSettings,
    momentum: float | None = None,
) -> BoltzmannMachine:
    """Alg. 2: W <- W + lr (dW - l2 W) + momentum * previous W step; theta <- theta + lr dtheta.

    Heavy-ball momentum: the velocity carries the whole previous step, its l2 term included.
    Alg. 2 prints the momentum term as eta dW^(t-1), the previous gradient without the learning
    rate, which at eta = 0.5 and lr = 0.005 would outweigh the gradient step 100 to 1; the
    previous step is the usual reading (README, departures). ``momentum``: this step's (default:
    ``settings.momentum`` at epoch 1, ``momentum_at``).

    ``velocity`` (updated in place) holds one tensor per coupling matrix, then, with
    ``settings.prior_momentum``, one per prior parameter (``prior_velocity_start``): those
    parameters then take the same heavy-ball step without l2, u <- momentum u + lr dtheta,
    theta <- theta + u, as ``visbiasinc``/``hidbiasinc`` of Salakhutdinov's ``rbm.m`` (Salakhutdinov
    & Murray 2008's CD training). A mixture weight rho keeps ``step_prior_parameter``'s step.
    """
    eta = momentum_at(settings.momentum, 1) if momentum is None else momentum
    new_weights = []
    for l, (W, dW) in enumerate(zip(machine.weights, grads["weights"], strict=True)):
        # In place on the velocity buffer: Nv x Nh temporaries cost as much as the matmuls.
        step = velocity[l].mul_(eta).add_(dW, alpha=lr)
        if settings.l2:
            step.add_(W, alpha=-lr * settings.l2)
        new_weights.append(W + step)
    prior_velocity = iter(velocity[len(machine.weights) :])
    new_priors = []
    for prior, dP in zip(machine.priors, grads["priors"], strict=True):
        params = prior.params()
        own = [n for n in params if n != "rho"] if settings.prior_momentum else []
        steps = {n: next(prior_velocity) for n in own}
        if not dP:  # a prior the method does not train: its velocity stays zero
            new_priors.append(prior)
            continue
        updated = {}
        for name, value in params.items():
            if name in steps:
                updated[name] = value + steps[name].mul_(eta).add_(dP[name], alpha=lr)
            else:
                updated[name] = step_prior_parameter(name, value, dP[name], lr, settings.rho_step)
        new_priors.append(prior.replace(**updated))
    return machine.replace(priors=new_priors, weights=new_weights)


def check_finite(machine: BoltzmannMachine, epoch: int, batch: int) -> None:
    """Raise ``TrainingError`` naming the first parameter that is not finite (divergence).

    Every minibatch runs it, so one sum per parameter decides first: a sum is finite only if
    all its terms are (an infinite or NaN term makes it infinite or NaN), and a 784 x 500
    coupling matrix is summed in a fortieth of the time ``isfinite(W).all()`` takes. Only a sum
    that is not finite (a divergence, or an overflow of finite terms) sends the parameters to
    the element-wise search."""
    params = [*machine.weights, *(v for p in machine.priors for v in p.params().values())]
    if bool(torch.isfinite(torch.stack([v.sum() for v in params])).all()):
        return
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
