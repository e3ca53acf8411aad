"""How the TAP equations are solved: one frozen ``SolverSettings`` that travels wherever the
solver's settings travel together (training's evaluation, the harvest, the likelihood scores,
denoising, the deep machines' curves).

Its defaults are ``solve``'s; the config schema's ``$defs/tap_solver`` gives the workflow's own
(a tighter ``tol``, a second pass at 0.95), and each settings class builds one from its config
block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = [
    "COMPACT_EVERY",
    "NEWTON_SOR_RELAXATION",
    "SOLVERS",
    "SolverSettings",
    "retry_tolerance",
    "working_set_sizes",
]

#: ``newton_sor``'s over-relaxation omega unless a config sets ``tap.relaxation``
#: (``inference.NEWTON``; docs/tap_solver.md).
NEWTON_SOR_RELAXATION = 1.4

#: TAP solvers (``solve``'s ``solver``; config ``tap.solver``, ``harvest.<model>.solver``).
SOLVERS = ("damped", "anderson", "newton_damped", "newton_sor")

#: A solve drops the rows that have converged from its working set once they are at least
#: 1 / COMPACT_EVERY of it: finished rows keep being swept (their results already stored) until
#: then, since compacting at every convergence costs more than the sweeps it saves.
COMPACT_EVERY = 16


def working_set_sizes(iterations) -> list[int]:
    """The rows swept at each sweep of a solve whose rows stopped after ``iterations`` sweeps
    (one count per row), under the ``COMPACT_EVERY`` rule: what a solve's time follows, a
    fixed cost per sweep plus a cost per row swept (``benchmarks.paper_prices``)."""
    stops = sorted(int(k) for k in iterations)
    if not stops:
        return []
    working = pending = len(stops)
    sizes, i = [], 0
    for t in range(1, stops[-1] + 1):
        sizes.append(working)
        while i < len(stops) and stops[i] == t:
            i += 1
            pending -= 1
        if COMPACT_EVERY * (working - pending) >= working:
            working = pending
    return sizes


@dataclasses.dataclass(frozen=True)
class SolverSettings:
    """The settings of one TAP solve (``inference.solve``, ``inference.solve_with_retry``).

    ``solver``: one of ``SOLVERS`` (Alg. 1's damped iteration, or an accelerated solver of the
    same equations); ``damping``: the weight of the old iterate, in [0, 1) (0.5 as the first
    paper's Fig. 10 caption states); ``tol``: the threshold on the mean squared step of the
    means a; ``max_iter``: the iteration cap; ``retry_damping``: the damping of a second pass
    over the rows not converged within ``max_iter`` (None: none); ``fuse``: the damped sweep's
    elementwise layer update as one compiled kernel; ``relaxation``: ``newton_sor``'s
    over-relaxation omega of its Newton steps, in [1, 2) (``inference.NEWTON``'s 1.4 by
    default; other solvers ignore it).
    """

    solver: str = "damped"
    damping: float = 0.5
    tol: float = 1e-8
    max_iter: int = 100
    retry_damping: float | None = None
    fuse: bool = False
    relaxation: float = NEWTON_SOR_RELAXATION

    def __post_init__(self):
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        for name in ("damping", "retry_damping"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if not 1.0 <= self.relaxation < 2.0:
            raise ValueError(f"relaxation must be in [1, 2), got {self.relaxation}")

    @classmethod
    def of(cls, settings) -> SolverSettings:
        """The solver settings among the attributes of a larger settings object (a training
        run's, a harvest's, a score's) or the keys of a config block (``tap:``); those it lacks
        keep their defaults here."""
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(settings, Mapping):
            return cls(**{k: settings[k] for k in names if k in settings})
        return cls(**{k: getattr(settings, k) for k in names if hasattr(settings, k)})

    @property
    def retry_tol(self) -> float | None:
        """The second pass's tolerance (``retry_tolerance``); None without a second pass."""
        return retry_tolerance(self.tol, self.damping, self.retry_damping)

    def replace(self, **changes) -> SolverSettings:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


def retry_tolerance(tol: float, damping: float, retry_damping: float | None) -> float | None:
    """The second pass's tolerance that asks of a row what ``tol`` asks at ``damping``.

    The criterion of ``solve`` is the mean squared step between damped iterates, and a damped
    step is (1 - d) times the undamped residual f(a) - a, so ``tol`` at damping d bounds the
    residual's mean square by tol / (1 - d)^2. At ``retry_damping`` the same bound needs
    tol ((1 - retry_damping) / (1 - damping))^2: 1/100 of ``tol`` for 0.95 after 0.5. (With
    ``tol`` itself, rows stopped at 10-300 times the residual of first-pass solutions on the
    paper run's checkpoints, and bmnist_h25's epoch 69 counted 133 "solutions" instead of 13.)
    None when there is no second pass.
    """
    if retry_damping is None:
        return None
    return tol * ((1.0 - retry_damping) / (1.0 - damping)) ** 2
