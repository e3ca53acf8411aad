"""DBM training by UCD-LMI and its baselines, as gradient functions for the one training loop.

Three methods, selected by ``TrainSettings.method`` (registered by ``ucd.training``):

- ``ucd_lmi``: the unbiased estimator of Alg. 2 (``unbiased.log_likelihood_gradient``): positive
  phase one posterior coupling per data row (eq. 28), negative phase ``n_chains`` joint couplings
  (eq. 11), marginalised (eq. 27) when ``marginalise`` is on;
- ``dbm_pcd``: PCD for DBMs without pretraining (the paper's Fig. 2a baseline; Salakhutdinov &
  Hinton 2009 without the greedy stage): positive phase by ``mean_field_steps`` mean-field sweeps,
  negative phase from persistent chains over every layer, ``sampling_steps`` Gibbs sweeps a step;
- ``centered_pcd``: the centered DBM of Montavon & Mueller (2012), trained by the same PCD, with
  the gradient taken in centered coordinates (below).

The four switches of UCD-LMI are model settings (``DBMOptions``, config key ``ucd`` of a model),
each on by default, so the ablation of Table 2 is four config entries: ``marginalise`` (eq. 27),
``centering`` (simplified centering, Sec. 4.1: {-1, +1} units, data mapped by 2x - 1),
``orthogonal`` (orthogonal W, Sec. 4.3; off: W ~ N(0, weight_init_std^2)), ``logistic_bias``
(Logistic(0, 0.5) biases, App. B; off: zero biases). The "unbiased gradient removed" row of
Table 2 is ``method: dbm_pcd`` with the other switches on.

Centered coordinates (Montavon & Mueller 2012): E = -sum_l (x_l - mu_l)^T W_l (x_{l+1} - mu_{l+1})
- sum_l c_l^T (x_l - mu_l), offsets mu_l moved towards the data-phase means at rate
``offset_rate``. The machine is kept in the plain form, whose bias is
a_l = c_l - W_l mu_{l+1} - W_{l-1}^T mu_{l-1}; a centered step (dW_c, dc) on (W, c) is therefore
the plain step dW = dW_c, da_l = dc_l - dW_c,l mu_{l+1} - dW_c,(l-1)^T mu_{l-1}, exact with
momentum 0 (the config of the centered models). Moving the offsets leaves the plain machine, hence
the distribution, unchanged.

Per step ``DBMState.metrics`` holds what the loop hands to its ``on_step`` callback: tau, T and
the corrected fraction of both phases, the start energy gap (mean energy of the negative phase's
starting states minus that of the positive phase's, per unit) and the norm of the estimate.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.ucd.init import logistic, orthogonal, to_spin
from tapmachine.ucd.target import Target
from tapmachine.ucd.unbiased import UCDSettings, combine, log_likelihood_gradient

__all__ = [
    "DBM_METHODS",
    "DBMOptions",
    "DBMState",
    "build_dbm",
    "data_for",
    "init_state",
    "gradients",
    "mean_field",
    "gradient_norm",
    "size_label",
]

DBM_METHODS = ("ucd_lmi", "dbm_pcd", "centered_pcd")

#: Version of the DBM methods' arithmetic, part of their resume fingerprint beside
#: ``train.resume.NUMERICS_VERSION`` (which RBM runs share, so a DBM-only change leaves RBM
#: checkpoints resumable). 2: the mean-field positive phase updates every hidden layer (it
#: skipped the top one). 3: the Gibbs sweep after local search draws its block order per chain.
NUMERICS_VERSION = 3


@dataclasses.dataclass(frozen=True)
class DBMOptions:
    """The DBM settings of a model (config ``models.<name>.ucd``), each switch on by default."""

    marginalise: bool = True
    centering: bool = True
    orthogonal: bool = True
    logistic_bias: bool = True
    cap: int = 1000
    search_cap: int = 10_000
    n_chains: int | None = None
    mean_field_steps: int = 10
    offset_rate: float = 0.01

    @classmethod
    def from_dict(cls, spec: dict | None) -> DBMOptions:
        spec = dict(spec or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ValueError(f"ucd: unknown key(s) {unknown}; known: {sorted(known)}")
        opts = cls(**spec)
        for key in ("marginalise", "centering", "orthogonal", "logistic_bias"):
            if not isinstance(getattr(opts, key), bool):
                raise ValueError(f"ucd.{key} must be true or false, got {getattr(opts, key)!r}")
        for key in ("cap", "search_cap", "mean_field_steps"):
            v = getattr(opts, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ucd.{key} must be a positive integer, got {v!r}")
        if opts.n_chains is not None and (not isinstance(opts.n_chains, int) or opts.n_chains < 1):
            raise ValueError(f"ucd.n_chains must be a positive integer, got {opts.n_chains!r}")
        if not 0.0 < float(opts.offset_rate) <= 1.0:
            raise ValueError(f"ucd.offset_rate must lie in (0, 1], got {opts.offset_rate!r}")
        return opts

    def estimator(self) -> UCDSettings:
        return UCDSettings(
            "mh",
            "local_mode",
            marginalise=self.marginalise,
            cap=self.cap,
            search_cap=self.search_cap,
        )


def build_dbm(
    sizes, generator: torch.Generator, options: DBMOptions, weight_std: float, dtype=torch.float32
) -> BoltzmannMachine:
    """The initial DBM: units, weights and biases by the switches (Secs. 4.1, 4.3, App. B)."""
    if len(sizes) < 2 or any(int(n) < 1 for n in sizes):
        raise ValueError(f"a DBM needs at least two positive layer sizes, got {list(sizes)}")
    sizes = [int(n) for n in sizes]
    if options.orthogonal:
        weights = [
            orthogonal(a, b, generator, dtype) for a, b in zip(sizes, sizes[1:], strict=False)
        ]
    else:
        weights = [
            weight_std * torch.randn(a, b, generator=generator, dtype=dtype)
            for a, b in zip(sizes, sizes[1:], strict=False)
        ]
    cls = Spin if options.centering else Bernoulli
    priors = [
        cls(
            logistic(n, generator, dtype=dtype)
            if options.logistic_bias
            else torch.zeros(n, dtype=dtype)
        )
        for n in sizes
    ]
    return BoltzmannMachine(priors=tuple(priors), weights=tuple(weights))


def size_label(sizes) -> str:
    """Layer sizes as score files and titles write them: (784, 200, 200) -> '784-200-200'."""
    return "-".join(str(int(n)) for n in sizes)


def data_for(machine: BoltzmannMachine, x01: Tensor) -> Tensor:
    """Binary {0, 1} data in the machine's visible units ({-1, +1} with simplified centering)."""
    x01 = torch.as_tensor(x01, dtype=machine.dtype, device=machine.device)
    return to_spin(x01) if isinstance(machine.visible, Spin) else x01


def to_unit_interval(machine: BoltzmannMachine, x: Tensor) -> Tensor:
    """The inverse of ``data_for``: visible states as {0, 1} pixels."""
    return (x + 1.0) / 2.0 if isinstance(machine.visible, Spin) else x


@dataclasses.dataclass
class DBMState:
    """What persists between steps: PCD chains (every layer), centering offsets, last metrics."""

    method: str
    chains: list | None = None
    offsets: list | None = None
    metrics: dict = dataclasses.field(default_factory=dict)
    tau_hist: Tensor | None = None

    def to_dict(self) -> dict:
        """The state carried between steps (method, chains, offsets, tau counts) as plain CPU
        tensors, for a checkpoint that loads with ``torch.load(weights_only=True)``."""
        return {
            "method": self.method,
            "chains": None if self.chains is None else [c.cpu() for c in self.chains],
            "offsets": None if self.offsets is None else [o.cpu() for o in self.offsets],
            "tau_hist": None if self.tau_hist is None else self.tau_hist.cpu(),
        }

    @classmethod
    def from_dict(cls, blob: dict, device="cpu") -> DBMState:
        """Inverse of ``to_dict`` (tensors moved to ``device``)."""

        def move(xs):
            return None if xs is None else [x.to(device) for x in xs]

        return cls(
            str(blob["method"]),
            move(blob["chains"]),
            move(blob["offsets"]),
            tau_hist=blob["tau_hist"],
        )


def init_state(
    machine: BoltzmannMachine,
    x_train: Tensor,
    method: str,
    options: DBMOptions,
    n_chains: int,
    generator: torch.Generator,
) -> DBMState:
    """PCD chains start from uniform noise; centering offsets at the data mean and 1/2 (or 0)."""
    if method not in DBM_METHODS:
        raise ValueError(f"method {method!r} is not one of {list(DBM_METHODS)}")
    state = DBMState(method)
    if method in ("dbm_pcd", "centered_pcd"):
        state.chains = Target.joint(machine).uniform(
            Target.joint(machine).blank(n_chains), generator
        )
    if method == "centered_pcd":
        state.offsets = [x_train.mean(0)] + [
            torch.full(
                (n,),
                0.0 if isinstance(p, Spin) else 0.5,
                dtype=machine.dtype,
                device=machine.device,
            )
            for n, p in zip(machine.sizes[1:], machine.priors[1:], strict=False)
        ]
    return state


def mean_field(machine: BoltzmannMachine, v: Tensor, steps: int) -> list:
    """Naive mean-field means of the hidden layers given v: ``steps`` sweeps, odd then even."""
    xs = [v] + [
        p.mean(torch.zeros(v.shape[0], p.size, dtype=v.dtype, device=v.device))
        for p in machine.priors[1:]
    ]
    for _ in range(steps):
        for parity in (1, 0):
            for l in range(2 - parity, machine.n_layers, 2):
                xs[l] = machine.priors[l].mean(machine.input_to(l, xs))
    return xs


def _mean_stats(machine: BoltzmannMachine, xs: list) -> dict:
    """Row mean of f = -grad E at states (or means: f is linear in each layer)."""
    n = xs[0].shape[0]
    stats = Target.joint(machine).statistics(xs)
    return combine(stats, stats, lambda a, _: a / n)


def gradient_norm(grads: dict) -> float:
    total = sum(float((w * w).sum()) for w in grads["weights"])
    total += sum(float((g * g).sum()) for p in grads["priors"] for g in p.values())
    return math.sqrt(total)


def _centered(grads: dict, pos: list, neg: list, offsets: list) -> dict:
    """The plain-coordinate step of a centered-coordinate gradient (module docstring)."""
    L = len(offsets)
    dW = []
    for l in range(L - 1):
        a_p, b_p = pos[l] - offsets[l], pos[l + 1] - offsets[l + 1]
        a_n, b_n = neg[l] - offsets[l], neg[l + 1] - offsets[l + 1]
        dW.append(a_p.T @ b_p / a_p.shape[0] - a_n.T @ b_n / a_n.shape[0])
    priors = []
    for l in range(L):
        (name,) = grads["priors"][l].keys()
        db = grads["priors"][l][name].clone()
        if l + 1 < L:
            db = db - dW[l] @ offsets[l + 1]
        if l > 0:
            db = db - dW[l - 1].T @ offsets[l - 1]
        priors.append({name: db})
    return {"weights": dW, "priors": priors}


@torch.no_grad()
def gradients(
    machine: BoltzmannMachine,
    x: Tensor,
    method: str,
    options: DBMOptions,
    state: DBMState,
    sampling_steps: int,
    generator: torch.Generator,
) -> dict:
    """Ascent direction of the mean log-likelihood of the rows ``x`` by ``method``.

    ``x`` is in the machine's visible units (``data_for``). Sets ``state.metrics``.
    """
    n_units = sum(machine.sizes)
    if method == "ucd_lmi":
        grads, pos, neg = log_likelihood_gradient(
            machine, x, options.estimator(), generator, options.n_chains
        )
        metrics = {}
        metrics.update(pos.summary("pos_"))
        metrics.update(neg.summary("neg_"))
        tau = torch.cat([pos.tau, neg.tau]).double()
        metrics["tau_mean"] = float(tau.mean())
        metrics["T_mean"] = float(torch.cat([pos.steps, neg.steps]).double().mean())
        metrics["corrected_fraction"] = float((tau > 1).double().mean())
        if pos.start_energy is not None and neg.start_energy is not None:
            metrics["start_energy_gap"] = float(
                (neg.start_energy.double().mean() - pos.start_energy.double().mean()) / n_units
            )
        metrics["grad_norm"] = gradient_norm(grads)
        state.metrics = metrics
        counts = torch.bincount(tau.long().cpu())
        old = state.tau_hist if state.tau_hist is not None else torch.zeros(0, dtype=torch.long)
        size = max(old.numel(), counts.numel())
        state.tau_hist = torch.nn.functional.pad(old, (0, size - old.numel())) + (
            torch.nn.functional.pad(counts, (0, size - counts.numel()))
        )
        return grads
    if method not in ("dbm_pcd", "centered_pcd"):
        raise ValueError(f"method {method!r} is not one of {list(DBM_METHODS)}")
    pos_states = mean_field(machine, x, options.mean_field_steps)
    chains = state.chains
    for _ in range(sampling_steps):
        chains = machine.gibbs_step(chains, generator)
    state.chains = chains
    pos, neg = _mean_stats(machine, pos_states), _mean_stats(machine, chains)
    grads = combine(pos, neg, torch.sub)
    if method == "centered_pcd":
        grads = _centered(grads, pos_states, chains, state.offsets)
        rate = options.offset_rate
        state.offsets = [
            (1.0 - rate) * mu + rate * s.mean(0)
            for mu, s in zip(state.offsets, pos_states, strict=False)
        ]
    e_pos = machine.energy(pos_states).double().mean()
    e_neg = machine.energy(chains).double().mean()
    state.metrics = {
        "start_energy_gap": float((e_neg - e_pos) / n_units),
        "grad_norm": gradient_norm(grads),
    }
    return grads
