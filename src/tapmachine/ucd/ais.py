"""ln Z of a deep Boltzmann machine by AIS, and a variational lower bound on ln P(v).

Salakhutdinov & Hinton (2009, Sec. 4; "Deep Boltzmann machines", AISTATS) estimate the test
log-likelihood of a DBM in two parts, both implemented here for binary ({0, 1} ``Bernoulli``) or
spin ({-1, +1} ``Spin``) units and any number of layers (layer 0 visible):

- ``dbm_ais_log_partition``: ln Z by annealed importance sampling (Neal 2001). Given the odd
  layers, the even layers (the visible one included) are conditionally independent, so they are
  summed out analytically and AIS runs on the odd layers only (for 784-500-1000: the state is h1,
  with v and h2 summed out, as S&H). The path is geometric between a base model and the DBM,

      f_beta(x) = prod_l P_l(x_l) exp((1 - beta) B_0 . v + beta sum_l x_l^T W_l x_{l+1}),

  whose base (beta = 0: no couplings, visible units tilted by the field B_0 so that their means
  match the data, ``estimators.base_rate_field``; hidden units at their own priors) has the exact
  ln Z_0 = sum_i ln Z^v_i(B_0i, 0). With the even layers summed out, the unnormalised marginal of
  the odd layers is

      ln f_beta(x_odd) = sum_{l odd} ln P_l(x_l) + sum_{l even} sum_j ln Z_lj(F_lj(beta), 0),
      F_l(beta) = beta (W_{l-1}^T x_{l-1} + W_l x_{l+1}) + [l = 0] (1 - beta) B_0,

  (ln Z_l(B, 0) = ln sum_x P_l(x) e^{B x}, ``Prior.log_partition``), so the weight increment of
  step k is sum over even layers of ln Z_l(F_l(beta_k)) - ln Z_l(F_l(beta_{k-1})) (the odd priors
  cancel). The transition at beta_k is one block Gibbs sweep of f_beta: even layers given the odd
  ones, then the odd layers given the even ones (each the marginal of a Gibbs sweep of the joint,
  so f_beta(x_odd) is invariant). All runs are one batch; the start is an exact draw of the base.
  ln Z = ln Z_0 + logmeanexp(ln w); Z is estimated without bias, so ln Z is a stochastic lower
  bound (Jensen), and its standard error is the delta-method std(w) / (mean(w) sqrt(runs)).
  ln Z is relative to the normalised priors (all W = 0 gives ln Z = 0), as ``machine.energy``.

- ``mean_field_lower_bound``: ln sum_h exp(-E(v, h)) is itself intractable for two or more
  hidden layers. S&H bound it by the naive mean-field (fully factorised) posterior q(h) with means
  mu: ln sum_h exp(-E(v, h)) >= -E(v, mu) + H(q), where -E is multilinear in the layers and each
  ln P_l is linear in x_l, so E_q[-E(v, h)] = -E(v, mu) exactly; H(q) is the sum of the binary
  entropies. The means come from ``steps`` block coordinate-ascent sweeps (odd layers, then even
  ones; each sweep maximises the bound over one parity given the other, so the bound never
  decreases). With one hidden layer the bound is exact at the fixed point (the posterior is
  factorial).

``dbm_test_log_likelihood`` combines them: the mean over images of the mean-field bound minus the
AIS ln Z, what S&H report as the "estimated lower bound" on the test log-probability. The data
term is a true lower bound; the AIS ln Z is itself a stochastic lower bound on ln Z (a short
schedule underestimates it), which errs in the other direction, so the estimate is a lower bound
only up to the AIS error: check ``ais_log_z`` against a longer schedule (the README gives the
size of that error on the default run).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from tapmachine.core import eta
from tapmachine.core.estimators import base_rate_field
from tapmachine.core.estimators.ais import as_betas, log_mean_exp_and_stderr
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.ucd.dbm import mean_field

__all__ = [
    "DBMAISResult",
    "dbm_ais_log_partition",
    "dbm_test_log_likelihood",
    "mean_field_lower_bound",
    "segmented_schedule",
]


def segmented_schedule(n_betas: int, dtype=torch.float64) -> Tensor:
    """``n_betas`` inverse temperatures from 0 to 1, denser near 1, in the proportions of the
    schedule of Salakhutdinov & Murray (2008) (``estimators.salakhutdinov_schedule``: 500 steps on
    [0, 0.5), 4,000 on [0.5, 0.9), 10,000 on [0.9, 1]); ``segmented_schedule(14501)`` is that
    schedule. At least 4 temperatures."""
    if isinstance(n_betas, bool) or not isinstance(n_betas, int) or n_betas < 4:
        raise ValueError(f"n_betas must be an integer >= 4, got {n_betas!r}")
    total = n_betas - 1  # steps
    a = max(1, round(total * 500 / 14500))
    b = max(1, round(total * 4000 / 14500))
    c = max(1, total - a - b)
    parts = [
        torch.linspace(0.0, 0.5, a + 1, dtype=torch.float64)[:-1],
        torch.linspace(0.5, 0.9, b + 1, dtype=torch.float64)[:-1],
        torch.linspace(0.9, 1.0, c + 1, dtype=torch.float64),
    ]
    return torch.cat(parts).to(dtype)


@dataclasses.dataclass(frozen=True)
class DBMAISResult:
    """An AIS estimate of a DBM's ln Z (relative to the priors).

    log_z: ln Z_0 + logmeanexp(log_weights); stderr: delta-method standard error;
    log_weights: per run (float64); n_betas: temperatures, ends included; log_z_base: ln Z_0.
    """

    log_z: float
    stderr: float
    log_weights: Tensor
    n_betas: int
    log_z_base: float


def _check_binary(machine: BoltzmannMachine) -> None:
    for l, p in enumerate(machine.priors):
        if not isinstance(p, Bernoulli | Spin):
            raise ValueError(
                f"layer {l} has {type(p).__name__} units; DBM AIS sums out binary layers "
                "(Bernoulli or Spin) only"
            )


def _even_inputs(machine, xs) -> dict:
    """W_{l-1}^T x_{l-1} + W_l x_{l+1} of every even layer given the odd layers in ``xs``."""
    return {l: machine.input_to(l, xs) for l in range(0, machine.n_layers, 2)}


def _field(X: Tensor, l: int, beta: float, B0: Tensor) -> Tensor:
    """F_l(beta) = beta X + [l = 0] (1 - beta) B_0 (module docstring)."""
    return beta * X + (1.0 - beta) * B0 if l == 0 else beta * X


def _sample(prior, F: Tensor, generator) -> Tensor:
    """x ~ Q(x; F, 0) for binary or spin units by one uniform per unit (torch.bernoulli with a
    generator is several times slower on a CPU)."""
    s = 2.0 if isinstance(prior, Spin) else 1.0
    p = torch.sigmoid(s * (prior.U + F))
    x = (torch.rand(p.shape, generator=generator, dtype=p.dtype, device=p.device) < p).to(p.dtype)
    return 2.0 * x - 1.0 if s == 2.0 else x


def _log_z_even(machine, inputs: dict, beta: float, B0: Tensor) -> Tensor:
    """sum over even layers and units of ln Z_l(F_l(beta), 0), per run (float64)."""
    total = 0.0
    for l, X in inputs.items():
        F = _field(X, l, beta, B0)
        total = total + machine.priors[l].log_partition(F, torch.zeros_like(F)).double().sum(-1)
    return total


@torch.no_grad()
def dbm_ais_log_partition(
    machine: BoltzmannMachine,
    data: Tensor | None = None,
    n_runs: int = 100,
    betas=None,
    generator: torch.Generator | None = None,
) -> DBMAISResult:
    """ln Z of a binary/spin DBM (any depth >= 2 layers) by AIS on the odd layers (module doc).

    ``data``: rows in the machine's visible units to fit the base-rate field B_0 to (without
    data B_0 = 0); ``betas``: the schedule from 0 to 1 (default ``segmented_schedule(10_001)``);
    ``n_runs`` independent runs, one batch. Per temperature: one matmul per coupling matrix for
    the even layers' input (shared by the weight increment and the even half of the sweep) and
    one for the odd half.
    """
    _check_binary(machine)
    if isinstance(n_runs, bool) or not isinstance(n_runs, int) or n_runs < 2:
        raise ValueError(f"n_runs must be an integer >= 2, got {n_runs!r}")
    schedule = as_betas(segmented_schedule(10_001) if betas is None else betas)
    m = machine
    dtype, device = m.dtype, m.device
    B0 = base_rate_field(m.visible, data).to(dtype=dtype, device=device)
    log_z0 = float(m.visible.log_partition(B0, torch.zeros_like(B0)).double().sum())
    odd = list(range(1, m.n_layers, 2))
    even = list(range(0, m.n_layers, 2))
    xs: list = [None] * m.n_layers
    zero = {l: torch.zeros(n_runs, m.sizes[l], dtype=dtype, device=device) for l in odd}
    for l in odd:  # the base: odd layers independent at their priors
        xs[l] = _sample(m.priors[l], zero[l], generator)
    logw = torch.zeros(n_runs, dtype=torch.float64, device=device)
    progress = eta.report(len(schedule) - 1, "DBM AIS steps")  # in a job: lines with an ETA
    for k in range(1, len(schedule)):
        progress.advance()
        b_new, b_old = schedule[k], schedule[k - 1]
        inputs = _even_inputs(m, xs)
        logw += _log_z_even(m, inputs, b_new, B0) - _log_z_even(m, inputs, b_old, B0)
        if k == len(schedule) - 1:
            break
        for l, X in inputs.items():
            xs[l] = _sample(m.priors[l], _field(X, l, b_new, B0), generator)
        for l in odd:
            xs[l] = _sample(m.priors[l], b_new * m.input_to(l, xs), generator)
        for l in even:
            xs[l] = None
    log_mean, stderr = log_mean_exp_and_stderr(logw)
    return DBMAISResult(log_z0 + log_mean, stderr, logw, len(schedule), log_z0)


def _entropy(prior, mu: Tensor) -> Tensor:
    """Entropy of independent binary units with means ``mu`` (per row, float64)."""
    p = (mu + 1.0) / 2.0 if isinstance(prior, Spin) else mu
    p = p.double()
    return -(torch.xlogy(p, p) + torch.xlogy(1.0 - p, 1.0 - p)).sum(-1)


@torch.no_grad()
def mean_field_lower_bound(machine: BoltzmannMachine, v: Tensor, steps: int = 30) -> Tensor:
    """Per row of ``v``: -E(v, mu) + H(q) <= ln sum_h exp(-E(v, h)) (module docstring).

    ``v`` in the machine's visible units; ``steps`` coordinate-ascent sweeps from mu = prior
    means given no input (the mean-field iteration of S&H 2009, Sec. 3). float64 result.
    """
    _check_binary(machine)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    v = torch.as_tensor(v, dtype=machine.dtype, device=machine.device)
    if v.ndim != 2 or v.shape[1] != machine.sizes[0]:
        raise ValueError(f"v has shape {tuple(v.shape)}, expected (rows, {machine.sizes[0]})")
    m = machine
    xs = mean_field(m, v, steps)
    bound = -m.energy(xs).double()
    for l in range(1, m.n_layers):
        bound = bound + _entropy(m.priors[l], xs[l])
    return bound


def dbm_test_log_likelihood(
    machine: BoltzmannMachine,
    v: Tensor,
    ais: DBMAISResult,
    steps: int = 30,
) -> dict:
    """Mean over rows of the mean-field bound minus the AIS ln Z, and its standard error
    (sampling error of the rows' mean and the AIS stderr, combined in quadrature)."""
    bound = mean_field_lower_bound(machine, v, steps)
    n = bound.numel()
    se_rows = float(bound.std(correction=1)) / math.sqrt(n) if n > 1 else math.nan
    return {
        "ais_ll": float(bound.mean()) - ais.log_z,
        "ais_ll_stderr": math.hypot(se_rows, ais.stderr),
        "ais_log_z": ais.log_z,
        "ais_log_z_stderr": ais.stderr,
        "ais_runs": int(ais.log_weights.numel()),
        "ais_betas": ais.n_betas,
    }
