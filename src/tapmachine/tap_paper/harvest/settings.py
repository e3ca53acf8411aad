"""The settings of a harvest (solving, merging, polishing) and its error."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tapmachine.core import tap
from tapmachine.core.errors import TapmachineError
from tapmachine.io.schema import schema_default

__all__ = ["HarvestError", "HarvestSettings", "MERGE_RULES"]


class HarvestError(TapmachineError):
    """The harvest cannot run (missing or inconsistent checkpoint, bad settings)."""


@dataclasses.dataclass(frozen=True)
class HarvestSettings:
    """Settings of one harvest (a config ``harvest.<model>`` entry, validated).

    ``n_init=None`` uses every training image. ``chunk_size`` only bounds memory: rows do not
    interact, so the solutions do not depend on it. Rows not converged within ``max_iter`` get a
    second pass at ``retry_damping`` (``tap.solve_with_retry``; None: none). ``solver`` runs both
    passes (``tap.SOLVERS``; Alg. 1's ``damped`` keeps Figs. 5-7's solutions the attractors of
    the data starts under Alg. 1's dynamics, which another solver need not reach).

    Polishing (``polish``): converged rows are iterated on from where they stopped, by
    ``polish_solver``, to ``polish_tol`` (None: not polished) before they are merged. A row
    stopped at the paper's tol 1e-8 near marginal stability lies up to 0.02-0.1 from its fixed
    point, farther than the merge tolerance, so one fixed point counted as several (the paper
    run's bmnist_h100 at epoch 40: 2,287 "unique" solutions at tol 1e-8, 623 polished to
    1e-12). Polishing starts inside the basin the first pass found and, by Anderson, stays there
    for all but about 1% of rows on a model where Alg. 1 is near marginal stability (the paper
    run's bmnist_h25 at epoch 100, docs/tap_solver.md); rows it does not converge stay as the
    first pass left them (``polished`` False).

    Merging (``merge_rule``, tolerance ``dedup_tol``): ``magnetisations`` groups converged rows
    whose means (all layers) agree within ``dedup_tol`` in max-abs distance (``tap.unique``);
    ``free_energy`` groups rows whose TAP free energies lie within ``dedup_tol`` of their
    group's lowest (``tap.unique_free_energy``; about 1e-3 suits it). The paper states no rule.
    """

    n_init: int | None = schema_default("harvest", "*", "n_init")
    dedup_tol: float = schema_default("harvest", "*", "dedup_tol")
    merge_rule: str = schema_default("harvest", "*", "merge_rule")
    solver: str = schema_default("harvest", "*", "solver")
    polish_tol: float | None = schema_default("harvest", "*", "polish_tol")
    polish_solver: str = schema_default("harvest", "*", "polish_solver")
    tol: float = schema_default("harvest", "*", "tol")
    max_iter: int = schema_default("harvest", "*", "max_iter")
    damping: float = schema_default("harvest", "*", "damping")
    retry_damping: float | None = schema_default("harvest", "*", "retry_damping")
    #: Rows solved at once (not a config key: it bounds memory and changes no solution).
    chunk_size: int = 2000

    @property
    def solver_settings(self) -> tap.SolverSettings:
        """How both passes solve TAP (polishing has its own solver and tolerance)."""
        return tap.SolverSettings.of(self)

    @classmethod
    def from_spec(cls, spec: Mapping) -> HarvestSettings:
        """From a config ``harvest.<model>`` entry; its ``epochs`` and ``dtype`` belong to the
        job (which checkpoints, what precision), not to the settings. Keys it leaves out take
        the schema's defaults."""
        names = {f.name for f in dataclasses.fields(cls)} - {"chunk_size"}
        unknown = sorted(set(spec) - names - {"epochs", "dtype"})
        if unknown:
            raise HarvestError(f"unknown harvest settings: {', '.join(unknown)}")
        return cls(**{k: v for k, v in spec.items() if k in names})

    def __post_init__(self):
        if self.n_init is not None and self.n_init < 1:
            raise HarvestError(f"n_init must be >= 1 or None, got {self.n_init}")
        if not self.dedup_tol > 0 or not self.tol > 0:
            raise HarvestError(f"dedup_tol and tol must be > 0, got {self.dedup_tol}, {self.tol}")
        if self.max_iter < 1 or self.chunk_size < 1:
            raise HarvestError("max_iter and chunk_size must be >= 1")
        if self.merge_rule not in MERGE_RULES:
            raise HarvestError(f"merge_rule must be one of {MERGE_RULES}, got {self.merge_rule!r}")
        if self.polish_solver not in tap.SOLVERS:
            raise HarvestError(f"polish_solver must be one of {tap.SOLVERS}")
        if self.polish_tol is not None and not self.polish_tol > 0:
            raise HarvestError(f"polish_tol must be > 0 or None, got {self.polish_tol}")
        try:
            tap.SolverSettings.of(self)  # checks solver, damping and retry_damping
        except ValueError as exc:
            raise HarvestError(str(exc)) from None


#: Rules by which converged solutions are merged into unique ones (``HarvestSettings``).
MERGE_RULES = ("magnetisations", "free_energy")
