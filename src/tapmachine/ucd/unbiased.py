"""The unbiased estimator of UCD-LMI (eqs. 10-11, 27-28) and the coupling-time study (Fig. 1).

For a coupling (X_t, Y_t) with X_0 = Y_0 and meeting time tau (``couplings``),

    f(X_0) + sum_{t=1}^{tau-1} [ f(X_t) - f(Y_{t-1}) ]                                  (eq. 10)

is an unbiased estimate of E_P[f]. With f = -grad_theta E it estimates the second term of eq. 6
under the joint distribution (eq. 11) and the first under the posterior P(h | v) (eq. 28); the
marginalised form averages the estimates for the even and the odd layers with the other parity
summed out (eq. 27), with the same expectation and (Sec. 4.2) a smaller variance.

UCD-LMI (Alg. 2) starts the coupling near a local mode: local search (Algs. 1, 5), one Gibbs
sweep (block order drawn per chain, as Alg. 1 draws it), then X_0 = Y_0 = that state and the MH
coupling (Algs. 3, 4).

Two details of Alg. 3 as implemented here:

- Meeting is tested after the first move already: with x_0 = y_0, tau = 1 when x_1 = y_0 (the
  first proposal rejected), as the text of Sec. 3.3 says; the estimate is then f(x_0). The printed
  repeat-until runs its body once before testing and would report tau = 2 for the same draws (the
  estimate is the same, since x_1 = y_0 makes the extra term vanish).
- With a uniform proposal over the whole state, acceptance from a low-energy state is
  exponentially unlikely in the dimension, so tau = 1 almost always and the estimate is usually
  f(x_0), a function of the local mode. Unbiasedness rests entirely on the rare chains with
  tau > 1: ``Estimate.corrected`` marks them and ``Estimate.summary`` reports their fraction, which
  every caller should log.

The public implementation of the paper keeps one chain and sums energy differences until the first
rejection; that is not the coupling of Alg. 3 and is not what this module does.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.ucd.couplings import GibbsCoupling, MHCoupling
from tapmachine.ucd.search import gibbs_sweep, local_search
from tapmachine.ucd.target import Target, take

__all__ = [
    "COUPLINGS",
    "INITS",
    "METHODS",
    "Estimate",
    "UCDSettings",
    "couple",
    "initial_state",
    "model_expectation",
    "posterior_expectation",
    "log_likelihood_gradient",
    "coupling_steps",
]

COUPLINGS = {"mh": MHCoupling, "gibbs": GibbsCoupling}
INITS = ("local_mode", "uniform")

#: The four methods of Fig. 1: (coupling, initialisation).
METHODS = {
    "gibbs": ("gibbs", "uniform"),
    "gibbs_lmi": ("gibbs", "local_mode"),
    "mh": ("mh", "uniform"),
    "mh_lmi": ("mh", "local_mode"),
}


@dataclasses.dataclass(frozen=True)
class UCDSettings:
    """How an estimate is made; the defaults are UCD-LMI as the paper trains DBMs (Alg. 2).

    coupling: "mh" (Algs. 3-4) or "gibbs" (Qiu et al. 2020; plain estimator only);
    init: "local_mode" (local search + one Gibbs sweep, Alg. 2) or "uniform" (uniform noise);
    marginalise: the estimator of eq. 27 (MH only); cap: at most this many coupling steps (a
    chain reaching it is ``capped``: its estimate is truncated, hence biased); search_cap: at most
    this many local-search steps.
    """

    coupling: str = "mh"
    init: str = "local_mode"
    marginalise: bool = True
    cap: int = 1000
    search_cap: int = 10_000

    def __post_init__(self):
        if self.coupling not in COUPLINGS:
            raise ValueError(f"coupling {self.coupling!r} is not one of {sorted(COUPLINGS)}")
        if self.init not in INITS:
            raise ValueError(f"init {self.init!r} is not one of {list(INITS)}")
        if self.marginalise and self.coupling != "mh":
            raise ValueError("the marginalised estimator (eq. 27) needs the MH coupling")
        for key in ("cap", "search_cap"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")


@dataclasses.dataclass
class Estimate:
    """An estimate of E[f] per chain or averaged, with what it cost.

    grads: f in the structure of ``tap.tap_gradients`` (mean over chains, or per chain with a
    leading chain dimension); tau: coupling time per chain (the larger of the two couplings of a
    marginalised estimate); steps: local-search steps T (0 for a uniform start); capped: the
    coupling cap was hit (estimate truncated); corrected: the correction sum of eq. 10 has at least
    one term (tau > 1); start_energy: the plain target's energy of X_0 = Y_0 per chain (the
    joint energy, the data row included for the posterior).
    """

    grads: dict
    tau: Tensor
    steps: Tensor
    capped: Tensor
    search_capped: Tensor
    start_energy: Tensor | None = None

    @property
    def corrected(self) -> Tensor:
        return self.tau > 1

    def summary(self, prefix: str = "") -> dict[str, float]:
        """Scalars to log: mean/max tau and T, fraction with a correction term, caps hit."""
        return {
            f"{prefix}tau_mean": float(self.tau.double().mean()),
            f"{prefix}tau_max": float(self.tau.max()),
            f"{prefix}T_mean": float(self.steps.double().mean()),
            f"{prefix}T_max": float(self.steps.max()),
            f"{prefix}corrected_fraction": float(self.corrected.double().mean()),
            f"{prefix}capped": float(self.capped.sum()),
            f"{prefix}search_capped": float(self.search_capped.sum()),
        }


def combine(a: dict, b: dict, fn) -> dict:
    return {
        "weights": [fn(x, y) for x, y in zip(a["weights"], b["weights"], strict=True)],
        "priors": [
            {k: fn(p[k], q[k]) for k in p} for p, q in zip(a["priors"], b["priors"], strict=True)
        ],
    }


def _fold(a: Tensor, _: Tensor, k: int) -> Tensor:
    return a[:k] + a[k:]


def _scatter_add(acc: dict, rows: Tensor, new: dict) -> dict:
    return combine(acc, new, lambda x, y: x.index_add(0, rows, y))


def _cat(xs: list, ys: list) -> list:
    return [None if x is None else torch.cat([x, y]) for x, y in zip(xs, ys, strict=True)]


@torch.no_grad()
def couple(target: Target, kernel, x0: list, cap: int, per_chain: bool = False):
    """Run the coupling from X_0 = Y_0 = ``x0`` until every chain meets; the sum of eq. 10.

    Returns (sum over chains of the estimates, or per-chain estimates with ``per_chain``; tau;
    capped). Chains that have met are dropped from the batch (their later terms are zero), so the
    work per step is proportional to the chains still apart. A chain not met after ``cap`` steps
    stops with tau = cap and ``capped`` set: its estimate lacks the remaining terms.
    """
    m = target.machine
    n = next(x.shape[0] for x in x0 if x is not None)
    acc = target.statistics(x0, per_chain=per_chain)  # f(X_0)
    tau = torch.ones(n, dtype=torch.long, device=m.device)
    capped = torch.zeros(n, dtype=torch.bool, device=m.device)
    if not target.free:  # nothing to sample: f(X_0) is exact
        return acc, tau, capped
    e0 = kernel.energy(x0)
    x1, e1 = kernel.first(x0, e0)
    alive = (~target.equal(x1, x0)).nonzero().squeeze(-1)
    X, Y = take(x1, alive), take(x0, alive)
    EX = None if e1 is None else e1.index_select(0, alive)
    EY = None if e0 is None else e0.index_select(0, alive)
    t = 1
    while alive.numel() and t < cap:
        k = alive.numel()
        sign = torch.ones(2 * k, dtype=m.dtype, device=m.device)
        sign[k:] = -1.0
        if per_chain:
            both = target.statistics(_cat(X, Y), sign, per_chain=True)
            term = combine(both, both, functools.partial(_fold, k=k))
            acc = _scatter_add(acc, alive, term)
        else:
            acc = combine(acc, target.statistics(_cat(X, Y), sign), torch.add)
        X, EX, Y, EY = kernel.coupled(X, EX, Y, EY)
        t += 1
        tau[alive] = t
        keep = (~target.equal(X, Y)).nonzero().squeeze(-1)
        alive = alive.index_select(0, keep)
        X, Y = take(X, keep), take(Y, keep)
        EX = None if EX is None else EX.index_select(0, keep)
        EY = None if EY is None else EY.index_select(0, keep)
    capped[alive] = True
    return acc, tau, capped


@torch.no_grad()
def initial_state(
    target: Target,
    n: int,
    generator: torch.Generator,
    init: str = "local_mode",
    clamped: dict | None = None,
    search_cap: int = 10_000,
):
    """X_0 = Y_0 for ``n`` chains: uniform noise, or Alg. 2's local search + one Gibbs sweep.

    ``target`` is the plain joint or posterior target; returns (state, T, search capped).
    """
    state = target.uniform(target.blank(n, clamped), generator)
    if init == "uniform":
        zeros = torch.zeros(n, dtype=torch.long, device=target.machine.device)
        return state, zeros, zeros.bool()
    found = local_search(target, state, generator, max_steps=search_cap)
    state = gibbs_sweep(target, found.state, generator, random_order=True)
    return state, found.steps, found.capped


def _estimate(
    plain: Target,
    n: int,
    clamped: dict | None,
    settings: UCDSettings,
    generator: torch.Generator,
    per_chain: bool,
) -> Estimate:
    m = plain.machine
    x0, steps, search_capped = initial_state(
        plain, n, generator, settings.init, clamped, settings.search_cap
    )
    kernel_class = COUPLINGS[settings.coupling]
    if not settings.marginalise:
        kernel = kernel_class(plain, generator)
        total, tau, capped = couple(plain, kernel, x0, settings.cap, per_chain)
    else:
        parts = []
        for parity in (0, 1):
            target = Target.marginal(m, parity, clamp_visible=bool(clamped))
            start = [None if l in target.summed else x for l, x in enumerate(x0)]
            parts.append(
                couple(target, kernel_class(target, generator), start, settings.cap, per_chain)
            )
        total = combine(parts[0][0], parts[1][0], lambda a, b: 0.5 * (a + b))  # eq. 27
        tau = torch.maximum(parts[0][1], parts[1][1])
        capped = parts[0][2] | parts[1][2]
    grads = total if per_chain else combine(total, total, lambda a, _: a / n)
    return Estimate(grads, tau, steps, capped, search_capped, plain.energy(x0))


def model_expectation(
    machine: BoltzmannMachine,
    n_chains: int,
    settings: UCDSettings,
    generator: torch.Generator,
    per_chain: bool = False,
) -> Estimate:
    """E_{P(v, h)}[-grad E] = grad ln Z (eq. 11, or eq. 27's second line), from ``n_chains`` chains.

    The mean of the chains' estimates (or each chain's with ``per_chain``); every chain is an
    independent unbiased estimate.
    """
    return _estimate(Target.joint(machine), n_chains, None, settings, generator, per_chain)


def posterior_expectation(
    machine: BoltzmannMachine,
    v: Tensor,
    settings: UCDSettings,
    generator: torch.Generator,
    per_chain: bool = False,
) -> Estimate:
    """E_{P(h | v)}[-grad E(v, h)] (eq. 28, or eq. 27's first line), one chain per row of ``v``.

    Averaged over the rows (the positive phase of a minibatch), or per row with ``per_chain``.
    """
    v = torch.as_tensor(v, dtype=machine.dtype, device=machine.device)
    if v.ndim != 2 or v.shape[1] != machine.sizes[0]:
        raise ValueError(f"v has shape {tuple(v.shape)}, expected (rows, {machine.sizes[0]})")
    target = Target.posterior(machine)
    return _estimate(target, v.shape[0], {0: v}, settings, generator, per_chain)


def log_likelihood_gradient(
    machine: BoltzmannMachine,
    v: Tensor,
    settings: UCDSettings,
    generator: torch.Generator,
    n_chains: int | None = None,
) -> tuple[dict, Estimate, Estimate]:
    """Unbiased ascent direction of the mean log-likelihood of the rows ``v`` (eq. 6, Alg. 2).

    Positive phase: one posterior coupling per row; negative phase: ``n_chains`` joint couplings
    (default: as many as rows). Returns (gradient in the structure of ``tap.tap_gradients``,
    positive Estimate, negative Estimate); log both estimates' ``summary()``.
    """
    positive = posterior_expectation(machine, v, settings, generator)
    n = int(v.shape[0]) if n_chains is None else n_chains
    negative = model_expectation(machine, n, settings, generator)
    return combine(positive.grads, negative.grads, torch.sub), positive, negative


def coupling_steps(
    machine: BoltzmannMachine,
    method: str,
    reps: int,
    cap: int,
    generator: torch.Generator,
    search_cap: int = 10_000,
) -> Estimate:
    """Fig. 1: one estimate of grad ln Z per repetition, all repetitions as one batch of chains.

    ``method`` is one of ``METHODS`` (the plain estimator; LMI adds the Gibbs sweep of Alg. 2, not
    counted in T). The Estimate's tau, steps (T) and capped are the figure's numbers.
    """
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {list(METHODS)}")
    coupling, init = METHODS[method]
    settings = UCDSettings(coupling, init, marginalise=False, cap=cap, search_cap=search_cap)
    return model_expectation(machine, reps, settings, generator)
