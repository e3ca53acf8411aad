"""``tap_relaxation``: ``newton_sor``'s over-relaxation omega on the paper run's own
converged-trained checkpoints: sweeps, CPU time and Alg. 1's fixed point per omega."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from benchmarks import ROOT
from benchmarks.common import dataset_rows
from tapmachine.core import tap
from tapmachine.core.tap.settings import SolverSettings
from tapmachine.train import load_model

__all__ = ["OMEGAS", "RELAXATION_CHECKPOINTS", "bench_tap_relaxation", "relaxation_comparison"]

#: The over-relaxations compared (``tap.relaxation``; ``newton_sor``'s own is 1.4).
OMEGAS = (1.0, 1.4, 1.6, 1.7)
#: (model, epoch, dataset) of ``workflow/config/paper.yaml``'s converged-trained models: the
#: two longest trainings early in their run, and Nh = 25 where Alg. 1 cycles.
RELAXATION_CHECKPOINTS = (
    ("rmnist_h500", 6, "real_mnist"),
    ("bmnist_h500", 9, "binary_mnist"),
    ("bmnist_h25", 50, "binary_mnist"),
    ("bmnist_h25", 100, "binary_mnist"),
)
#: Where ``--checkpoints`` points when not given: the paper run's models.
RUN_MODELS = ROOT / "results" / "paper" / "models"


def relaxation_comparison(machine, x, omegas=OMEGAS, tol=1e-8, cap=2000, ref_tol=1e-16) -> dict:
    """``newton_sor`` from the rows ``x`` at each over-relaxation in ``omegas`` (float64, as
    training's step: tolerance ``tol``, at most ``cap`` sweeps) against Alg. 1's fixed points.

    The reference is Alg. 1 at damping 0.5 continued to ``ref_tol`` with the 0.95 second pass for
    rows that cycle (``tap.solve_with_retry``); each omega's result is continued by itself to
    ``ref_tol`` and counted at Alg. 1's fixed point within 1e-4 (max-abs over all units) over the
    rows converged in both, as ``tap_solve`` compares solvers."""
    ref = tap.solve_with_retry(
        machine,
        x,
        SolverSettings(
            solver="damped", damping=0.5, tol=ref_tol, max_iter=5 * cap, retry_damping=0.95
        ),
    )
    out = {
        "rows": int(x.shape[0]),
        "alg1_converged_share": float(ref.converged.double().mean()),
    }
    for omega in omegas:
        kw = {"solver": "newton_sor", "relaxation": omega}
        t0 = time.process_time()
        state = tap.solve(machine, x, damping=0.5, tol=tol, max_iter=cap, **kw)
        seconds = time.process_time() - t0
        deep = tap.solve_from(machine, state, tol=ref_tol, max_iter=5 * cap, **kw)
        both = deep.converged & ref.converged
        dist = torch.stack([(d - r).abs().amax(1) for d, r in zip(deep.a, ref.a, strict=True)])
        same = (dist.amax(0) < 1e-4) & both
        sweeps = state.iterations.double()
        key = f"omega_{omega:g}"
        out[f"{key}_sweeps_mean"] = float(sweeps.mean())
        out[f"{key}_sweeps_max"] = float(sweeps.max())
        out[f"{key}_converged_share"] = float(state.converged.double().mean())
        out[f"{key}_cpu_seconds"] = seconds
        out[f"{key}_at_alg1_fixed_point"] = int(same.sum())
        out[f"{key}_compared_rows"] = int(both.sum())
    return out


def _checkpoint(directory: Path, model: str, epoch: int) -> Path | None:
    """A run's checkpoint (``{model}/checkpoints/epoch_{e}.pt``) or a benchmark's
    (``{model}/epoch_{e}.pt``) under ``directory``; None if neither is there."""
    for path in (directory / model / "checkpoints", directory / model):
        if (path / f"epoch_{epoch}.pt").exists():
            return path / f"epoch_{epoch}.pt"
    return None


def bench_tap_relaxation(device, quick: bool, checkpoints: Path | None = None) -> list[dict]:
    """``relaxation_comparison`` on each of ``RELAXATION_CHECKPOINTS`` found under
    ``--checkpoints`` (default: the paper run's ``results/paper/models``; the others are said
    and skipped: they come from a paper-size run, not from this benchmark), on the first 100
    training rows (quick: 20) of its dataset, one torch thread, CPU seconds."""
    directory = Path(checkpoints or RUN_MODELS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = []
        for model, epoch, dataset in RELAXATION_CHECKPOINTS:
            path = _checkpoint(directory, model, epoch)
            if path is None:
                print(
                    f"tap_relaxation: no {model} epoch {epoch} under {directory}", file=sys.stderr
                )
                continue
            x, source = dataset_rows(dataset, 20 if quick else 100)
            machine = load_model(path, device=device, dtype=torch.float64)
            x = x.to(device=device, dtype=torch.float64)
            result = {"name": "tap_relaxation", "model": model, "epoch": epoch, "data": source}
            result.update(relaxation_comparison(machine, x, cap=300 if quick else 2000))
            result.update(
                seconds=result["omega_1.4_cpu_seconds"], gflops=None, ratio_to_matmul=None
            )
            print(json.dumps(result), flush=True)
            out.append(result)
        return out
    finally:
        torch.set_num_threads(threads)
