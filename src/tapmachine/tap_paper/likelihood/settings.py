"""How a parameter set is scored: the settings and the AIS schedule they name."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from tapmachine.core import estimators, tap
from tapmachine.io.schema import defaults

__all__ = [
    "FULL_SALAKHUTDINOV",
    "MAX_CURVE_UNITS",
    "PL_SITES_DRAWN_FOR",
    "SPLITS",
    "ScoreSettings",
    "ais_schedule",
    "schedule_label",
]

SPLITS = ("train", "test")
FULL_SALAKHUTDINOV = 14501
#: The largest layer enumerated for an exact ln Z (the exact curve, ``ais-check``): Fig. 3's
#: Nh = 25. Each further unit doubles the cost (2^25 states: about 100 CPU-seconds
#: in float32 chunks, as a job runs them).
MAX_CURVE_UNITS = 25

#: What each draw of the pseudo-likelihood's random sites serves (``scores.csv``'s
#: ``pl_sites_drawn_for``): every image its own sites (``estimators.pseudo_log_likelihood``).
PL_SITES_DRAWN_FOR = "every image"
_AIS, _SCORING, _TAP = defaults("ais"), defaults("likelihood_scoring"), defaults("model")["tap"]


@dataclasses.dataclass(frozen=True)
class ScoreSettings:
    """How one parameter set is scored (a config ``likelihood.fig12`` / ``likelihood.table``).

    ``n_train`` / ``n_test``: first images of each split scored (0 skips the split, None = all).
    ``schedule``: ``salakhutdinov`` (Salakhutdinov & Murray 2008; thinned evenly in index to
    ``n_betas`` values when given, which keeps its density profile) or ``linear`` (``n_betas``
    equally spaced values). ``tap_inits``: training images from which TAP is run to convergence.
    """

    ais_runs: int = _AIS["n_runs"]
    schedule: str = _AIS["schedule"]
    n_betas: int | None = _AIS["n_betas"]
    pl_sites: int = _SCORING["pl_sites"]
    n_train: int | None = _SCORING["n_train"]
    n_test: int | None = _SCORING["n_test"]
    tap_inits: int = _SCORING["tap_inits"]
    damping: float = _TAP["damping"]
    #: The paper's tolerance for a bare ``ScoreSettings``; ``from_config`` takes the model's own
    #: ``tap.tol`` (the schema's model default is 1e-12).
    tol: float = 1e-8
    max_iter: int = _TAP["max_iter"]
    retry_damping: float | None = _TAP["retry_damping"]
    dedup_tol: float = _TAP["dedup_tol"]
    solver: str = _TAP["solver"]

    @property
    def solver_settings(self) -> tap.SolverSettings:
        """How TAP is solved for its ln Z estimate."""
        return tap.SolverSettings.of(self)

    @classmethod
    def from_config(cls, section: dict, model_spec: dict | None = None) -> ScoreSettings:
        """From a validated config section, with the TAP settings of the model's own entry."""
        ais = section.get("ais", {})
        values = {
            "ais_runs": ais.get("n_runs", cls.ais_runs),
            "schedule": ais.get("schedule", cls.schedule),
            "n_betas": ais.get("n_betas", cls.n_betas),
            "pl_sites": section.get("pl_sites", cls.pl_sites),
            "n_train": section.get("n_train", cls.n_train),
            "n_test": section.get("n_test", cls.n_test),
            "tap_inits": section.get("tap_inits", cls.tap_inits),
        }
        tap_spec = (model_spec or {}).get("tap", {})
        for key in ("damping", "tol", "max_iter", "retry_damping", "dedup_tol", "solver"):
            if key in tap_spec:
                values[key] = tap_spec[key]
        return cls(**values)


def ais_schedule(kind: str = "salakhutdinov", n_betas: int | None = None) -> Tensor:
    """Inverse temperatures for AIS (float64, 0 to 1, both ends included).

    ``salakhutdinov``: the 14,501 values of Salakhutdinov & Murray (2008), or, with ``n_betas``,
    that many of them taken evenly by index (so the 1e-3 / 1e-4 / 1e-5 regions keep their
    shares: about 3.4%, 27.6% and 69% of the values). ``linear``: ``n_betas`` equal steps.
    """
    if kind == "salakhutdinov":
        full = estimators.salakhutdinov_schedule()
        if n_betas is None or n_betas >= full.numel():
            return full
        if n_betas < 2:
            raise ValueError("an AIS schedule needs at least 2 inverse temperatures")
        idx = torch.linspace(0, full.numel() - 1, n_betas, dtype=torch.float64).round().long()
        return full[torch.unique(idx)]
    if kind == "linear":
        if n_betas is None or n_betas < 2:
            raise ValueError("a linear AIS schedule needs n_betas >= 2")
        return estimators.linear_schedule(n_betas)
    raise ValueError(f"unknown AIS schedule {kind!r} (salakhutdinov or linear)")


def schedule_label(settings: ScoreSettings) -> str:
    """A one-line description of the AIS settings, for CSVs and figure captions."""
    n = ais_schedule(settings.schedule, settings.n_betas).numel()
    if settings.schedule == "salakhutdinov":
        kind = "full Salakhutdinov" if n == FULL_SALAKHUTDINOV else "Salakhutdinov, thinned"
    else:
        kind = "linear"
    return f"{kind} schedule, {n} betas, {settings.ais_runs} runs"
