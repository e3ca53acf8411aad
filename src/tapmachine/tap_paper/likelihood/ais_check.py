"""How far a model's AIS estimate moves with the work put into it (``tapmachine ais-check``).

A forward AIS estimate of ln Z is a stochastic lower bound (Jensen), so the test log-likelihood
it gives errs high, by more the fewer runs and the coarser the schedule. Before a number is set
beside a published one, the estimate is taken again

- at the baseline (``runs[0]`` runs on the schedule refined ``densities[0]`` times) with
  ``seeds`` seeds: the spread of the estimator itself;
- with each other number of runs, and on each other refinement of the schedule
  (``estimators.refined_schedule``), one axis at a time from the baseline: how far more work
  moves it;
- by reverse AIS from the training images at the baseline (Burda et al. 2015), whose ln Z errs
  the other way when the images stand in for model samples: a bracket, not a bound, since
  training images are not exact samples;
- and exactly, where the smaller binary layer can be enumerated (up to 25 units, as the exact
  curve of Fig. 3: at 25 about 100 CPU-seconds in float32, 230 in float64).

Every row carries the test log-likelihood it implies (mean of -F(x) over the test images minus
its ln Z) and its shift from the baseline's first seed.
"""

from __future__ import annotations

import dataclasses
import math
import time

from torch import Tensor

from tapmachine.core import estimators
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.seeding import seeded_generator
from tapmachine.tap_paper.likelihood.settings import MAX_CURVE_UNITS, ais_schedule

__all__ = ["AISCheckSettings", "ais_check", "summary"]


@dataclasses.dataclass(frozen=True)
class AISCheckSettings:
    """What ``ais_check`` runs; the first of ``runs`` and of ``densities`` is the baseline."""

    runs: tuple[int, ...] = (100, 1000)
    densities: tuple[int, ...] = (1, 10)
    seeds: int = 4
    reverse: bool = True
    schedule: str = "salakhutdinov"
    n_betas: int | None = None

    def __post_init__(self):
        if not self.runs or any(int(r) != r or r < 2 for r in self.runs):
            raise ValueError(f"runs must be integers >= 2, not {self.runs}")
        if not self.densities or any(int(d) != d or d < 1 for d in self.densities):
            raise ValueError(f"densities must be positive integers, not {self.densities}")
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, not {self.seeds}")

    def plan(self) -> list[tuple[str, int, int, int]]:
        """(direction, runs, density, seed) of every estimate, the baseline's first seed first."""
        runs0, dens0 = self.runs[0], self.densities[0]
        rows = [("forward", runs0, dens0, s) for s in range(self.seeds)]
        rows += [("forward", r, dens0, 0) for r in dict.fromkeys(self.runs[1:]) if r != runs0]
        rows += [("forward", runs0, d, 0) for d in dict.fromkeys(self.densities[1:]) if d != dens0]
        if self.reverse:
            rows.append(("reverse", runs0, dens0, 0))
        return rows


def ais_check(
    machine: BoltzmannMachine,
    base_data: Tensor,
    test: Tensor,
    settings: AISCheckSettings,
    seed_labels: tuple = (0, "ais-check"),
    on_row=None,
) -> list[dict]:
    """One row per estimate of ``settings.plan()`` (and an ``exact`` row where enumerable):
    ``direction, runs, density, n_betas, seed, log_z, log_z_stderr, ll_test, ll_shift,
    seconds``. ``base_data``: the rows the base-rate model is fitted to and reverse AIS starts
    from (the training images); ``test``: the images scored. ``on_row(row)`` after each."""
    if machine.n_layers != 2:
        raise ValueError("ais-check needs an RBM (one hidden layer)")
    x = test.to(machine.device, machine.dtype)
    neg_f = float(-machine.free_energy_visible(x).double().mean())
    base = ais_schedule(settings.schedule, settings.n_betas)
    rows: list[dict] = []
    for direction, runs, density, s in settings.plan():
        betas = estimators.refined_schedule(base, density)
        t0 = time.perf_counter()
        result = estimators.ais_log_partition(
            machine,
            data=base_data,
            n_runs=runs,
            betas=betas,
            reverse=direction == "reverse",
            generator=seeded_generator(*seed_labels, direction, f"{runs}x{density}", str(s)),
        )
        rows.append(
            _row(direction, runs, density, betas.numel(), s, result.log_z, result.stderr, neg_f)
        )
        rows[-1]["seconds"] = time.perf_counter() - t0
        if on_row is not None:
            on_row(rows[-1])
    t0 = time.perf_counter()
    try:  # up to Fig. 3's 25 units as the exact curve, in the machine's precision
        log_z = float(
            estimators.exact_log_partition(
                machine, max_units=MAX_CURVE_UNITS, chunk_dtype=machine.dtype
            )
        )
    except ValueError:  # no binary layer small enough to enumerate
        log_z = None
    if log_z is not None:
        rows.append(_row("exact", 0, 0, 0, 0, log_z, 0.0, neg_f))
        rows[-1]["seconds"] = time.perf_counter() - t0
        if on_row is not None:
            on_row(rows[-1])
    for row in rows:
        row["ll_shift"] = row["ll_test"] - rows[0]["ll_test"]
    return rows


def _row(direction, runs, density, n_betas, seed, log_z, stderr, neg_f) -> dict:
    return {
        "direction": direction,
        "runs": runs,
        "density": density,
        "n_betas": n_betas,
        "seed": seed,
        "log_z": log_z,
        "log_z_stderr": stderr,
        "ll_test": neg_f - log_z,
    }


def summary(rows: list[dict]) -> str:
    """Lines that say how far the estimate moved: the seeds' range at the baseline, the largest
    move of a forward estimate with more work, the reverse bracket and the exact value."""
    base = [r for r in rows if _same(r, rows[0])]
    more = [r for r in rows if r["direction"] == "forward" and not _same(r, rows[0])]
    lines = [
        f"baseline ({rows[0]['runs']} runs, {rows[0]['n_betas']} temperatures), "
        f"{len(base)} seed(s): test log-likelihood {min(r['ll_test'] for r in base):.3f} "
        f"to {max(r['ll_test'] for r in base):.3f} nats"
    ]
    for r in more:
        lines.append(
            f"forward, {r['runs']} runs x {r['n_betas']} temperatures: {r['ll_test']:.3f} "
            f"({r['ll_shift']:+.3f} from the baseline; ln Z stderr {r['log_z_stderr']:.3f})"
        )
    for r in rows:
        if r["direction"] in ("reverse", "exact"):
            note = "" if r["direction"] == "exact" else f"; ln Z stderr {r['log_z_stderr']:.3f}"
            lines.append(
                f"{r['direction']}: {r['ll_test']:.3f} ({r['ll_shift']:+.3f} from the baseline"
                f"{note})"
            )
    finite = [r["ll_test"] for r in rows if math.isfinite(r["ll_test"])]
    lines.append(f"range over every estimate: {max(finite) - min(finite):.3f} nats")
    return "\n".join(lines)


def _same(a: dict, b: dict) -> bool:
    """Two forward estimates at the same runs and schedule (seeds of the baseline)."""
    return (
        a["direction"] == b["direction"] == "forward"
        and a["runs"] == b["runs"]
        and a["density"] == b["density"]
    )
