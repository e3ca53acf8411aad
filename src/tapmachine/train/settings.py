"""The settings of one training run (a config ``models.<name>`` or ``ucd.dbm.models.<name>``
entry) and of greedy pretraining, with their defaults read from the config schema."""

from __future__ import annotations

import dataclasses

from tapmachine.core import tap
from tapmachine.core.errors import TapmachineError
from tapmachine.io.schema import defaults

__all__ = [
    "METHODS",
    "TrainingError",
    "TrainSettings",
    "PretrainSettings",
    "RHO_STEPS",
    "RESAMPLES",
    "VISIBLE_INITS",
    "device_problem",
]

#: How the Gauss-Bernoulli mixture weight rho is stepped (config ``rho_step``; ``update``).
RHO_STEPS = ("plain", "logit")

#: How training rows are drawn at each presentation (config ``resample``): as stored (None), or
#: each value v in [0, 1] drawn anew as Bernoulli(v) (``train.loop.present``).
RESAMPLES = (None, "bernoulli")

#: Where the visible prior starts (config ``visible_init``; ``build.build_from_spec``).
VISIBLE_INITS = ("data_mean", "neutral")

_RBM = defaults("model")
_TAP, _PRE = _RBM["tap"], _RBM["pretrain"]


#: The gradient methods by name (``train.methods.GradientMethod``), filled by
#: ``train.methods.register``: tap, cd and pcd, and those other packages register.
METHODS: dict = {}


class TrainingError(TapmachineError):
    """Training cannot go on (divergence, inconsistent resume state, bad settings)."""


def device_problem(device: str) -> str | None:
    """Why this machine's torch cannot train on ``device`` ("cpu", "cuda" or "cuda:N", the
    config's ``device``), in one line starting with the device's name; None when it can."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
        return (
            f"{device!r}, but torch {torch.__version__} ({build} build) sees no CUDA device "
            "here; set device: cpu or run on a GPU node"
        )
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        return f"{device!r}, but only {torch.cuda.device_count()} CUDA device(s) are visible"
    return None


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """The optimisation settings of one model, validated; defaults: the schema's ``model``."""

    epochs: int = _RBM["epochs"]
    #: Keep every N-th epoch's checkpoint, the last epoch's and the latest (``io.retention``);
    #: the config key has no default, so that models that leave it out keep their specs.
    checkpoint_every: int = 1
    batch_size: int = _RBM["batch_size"]
    n_solutions: int | None = _RBM["n_solutions"]
    #: A number, {start, end} or {over_sampling_steps} (``update.learning_rate``).
    learning_rate: float | dict = _RBM["learning_rate"]
    #: Heavy-ball momentum: a number, or {initial, final, switch_epoch} (``update.momentum_at``).
    momentum: float | dict = _RBM["momentum"]
    #: Momentum on the prior (bias) parameters too (``update.apply_update``).
    prior_momentum: bool = _RBM["prior_momentum"]
    #: Draw every training row anew at each presentation (``RESAMPLES``; ``train.loop.present``).
    resample: str | None = _RBM["resample"]
    l2: float = _RBM["l2"]
    weight_init_std: float = _RBM["weight_init_std"]
    #: The visible prior's start: from the data means (Alg. 2) or neutral (``build_from_spec``).
    visible_init: str = _RBM["visible_init"]
    #: A name of the gradient-method registry (``train.methods``).
    method: str = _RBM["method"]
    #: k of CD-k / PCD-k: a number, or {start, end, every} (``update.sampling_steps_at``).
    sampling_steps: int | dict = _RBM["sampling_steps"]
    damping: float = _TAP["damping"]
    #: TAP solver of the converged training steps and the per-epoch evaluation (``tap.SOLVERS``):
    #: Alg. 1's damped iteration, or Anderson mixing on it (same fixed points, fewer iterations;
    #: ``tap.solve``). Fixed-iteration steps always take Alg. 1's damped iterations.
    solver: str = _TAP["solver"]
    #: Fuse each damped sweep's elementwise layer update into one compiled kernel
    #: (``tap.solve(..., fuse=True)``; same iterates up to rounding, compiled once per process).
    fuse: bool = _TAP["fuse"]
    #: ``newton_sor``'s over-relaxation omega (``tap.SolverSettings``); the config's
    #: ``tap.relaxation``, which has no default there, so that configs without it keep their
    #: specs (and Snakemake its params) unchanged.
    relaxation: float = tap.NEWTON_SOR_RELAXATION
    #: TAP training steps as captured CUDA graphs on a CUDA device, where the run allows it
    #: (``train.graphs``): the same numbers as eager steps up to float32 rounding.
    cuda_graphs: bool = _TAP["cuda_graphs"]
    #: Converged steps on CUDA graphs: the sweeps of one captured chunk, between two checks.
    cuda_graph_sweeps: int = _TAP["cuda_graph_sweeps"]
    train_iterations: int | str = _TAP["train_iterations"]
    train_tol: float = _TAP["train_tol"]
    train_max_iter: int = _TAP["train_max_iter"]
    train_unique: bool = _TAP["train_unique"]
    rho_step: str = _RBM["rho_step"]
    tol: float = _TAP["tol"]
    max_iter: int = _TAP["max_iter"]
    #: Damping of the evaluation's second pass over rows not converged within ``max_iter``
    #: (``tap.solve_with_retry``; None: no second pass). It changes no training numbers.
    retry_damping: float | None = _TAP["retry_damping"]
    dedup_tol: float = _TAP["dedup_tol"]
    eval_samples: int = _RBM["eval"]["n_samples"]
    #: Evaluate every N-th epoch and the last (``evaluation.evaluation_due``); the config key
    #: ``eval.every`` has no default, so that models that leave it out keep their specs.
    eval_every: int = 1
    #: The DBM methods' switches and settings (``ucd.dbm.DBMOptions``; config ``ucd:``).
    ucd: dict | None = None
    #: Run the per-epoch TAP evaluation (off for the DBMs, which ``ucd score`` scores).
    evaluate: bool = True
    train_noise: dict | None = _RBM["train_noise"]
    inference: str = _RBM["inference"]

    @property
    def solver_settings(self) -> tap.SolverSettings:
        """How the per-epoch evaluation and the converged training steps solve TAP."""
        return tap.SolverSettings.of(self)

    @classmethod
    def from_spec(cls, spec: dict) -> TrainSettings:
        """The settings of a config entry: keys at the top, under ``tap:`` and ``eval:`` (schema
        ``model``); what the entry leaves out, its gradient method's defaults where it has any
        (``GradientMethod.defaults``: the DBMs' schema ``dbm_model``, no per-epoch TAP
        evaluation), else ``TrainSettings``' own."""
        keys = {f.name for f in dataclasses.fields(cls)}
        registered = METHODS.get(spec.get("method", cls.method))
        own = registered.defaults() if registered is not None else {}
        plain = {k: v for k, v in own.items() if k in keys}
        plain.update({k: v for k, v in spec.items() if k in keys})
        plain.update({k: v for k, v in spec.get("tap", {}).items() if k in keys})
        if "n_samples" in spec.get("eval", {}):
            plain["eval_samples"] = spec["eval"]["n_samples"]
        if "every" in spec.get("eval", {}):
            plain["eval_every"] = spec["eval"]["every"]
        return cls(**plain)

    def __post_init__(self):
        every = self.checkpoint_every
        if not (isinstance(every, int) and not isinstance(every, bool) and every >= 1):
            raise TrainingError(f"checkpoint_every must be a positive integer, not {every!r}")
        every = self.eval_every
        if not (isinstance(every, int) and not isinstance(every, bool) and every >= 1):
            raise TrainingError(f"eval.every must be a positive integer, not {every!r}")
        it = self.train_iterations
        if not (it == "converge" or (isinstance(it, int) and not isinstance(it, bool) and it >= 1)):
            raise TrainingError(
                f"tap.train_iterations must be a positive integer or 'converge', not {it!r}"
            )
        k = self.sampling_steps
        rising = isinstance(k, dict) and set(k) == {"start", "end", "every"}
        if isinstance(k, dict) and not (rising and k["start"] <= k["end"]):
            raise TrainingError(
                f"sampling_steps must be a number or {{start, end, every}} with start <= end, "
                f"not {k!r}"
            )
        lr = self.learning_rate
        if isinstance(lr, dict) and set(lr) not in ({"start", "end"}, {"over_sampling_steps"}):
            raise TrainingError(
                f"learning_rate must be a number, {{start, end}} or {{over_sampling_steps}}, "
                f"not {lr!r}"
            )
        m = self.momentum
        if isinstance(m, dict) and set(m) != {"initial", "final", "switch_epoch"}:
            raise TrainingError(
                f"momentum must be a number or {{initial, final, switch_epoch}}, not {m!r}"
            )
        if self.visible_init not in VISIBLE_INITS:
            raise TrainingError(
                f"visible_init must be one of {VISIBLE_INITS}, not {self.visible_init!r}"
            )
        if self.resample not in RESAMPLES:
            raise TrainingError(f"resample must be one of {RESAMPLES}, not {self.resample!r}")
        if not isinstance(self.cuda_graphs, bool):
            raise TrainingError(f"tap.cuda_graphs must be true or false, not {self.cuda_graphs!r}")
        g = self.cuda_graph_sweeps
        if not (isinstance(g, int) and not isinstance(g, bool) and g >= 1):
            raise TrainingError(f"tap.cuda_graph_sweeps must be a positive integer, not {g!r}")
        if self.rho_step not in RHO_STEPS:
            raise TrainingError(f"rho_step must be one of {RHO_STEPS}, not {self.rho_step!r}")
        try:
            tap.SolverSettings.of(self)  # checks solver, damping and retry_damping
        except ValueError as exc:
            raise TrainingError(f"tap.{exc}") from None
        if self.method in METHODS:
            METHODS[self.method].check(self)


@dataclasses.dataclass(frozen=True)
class PretrainSettings:
    """A model's ``pretrain:`` entry: epochs and step size of every greedy RBM, and what the next
    RBM is trained on: the layer's magnetisations (default) or one draw of binary states from
    them (Alg. 4's literal H ~ P(h | ...), the paper's value). Defaults: the schema's."""

    epochs: int = _PRE["epochs"]
    learning_rate: float = _PRE["learning_rate"]
    inputs: str = _PRE["inputs"]

    @classmethod
    def from_spec(cls, spec: dict) -> PretrainSettings:
        return cls(**spec)
