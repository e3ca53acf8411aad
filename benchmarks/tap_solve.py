"""``tap_solve``: the accelerated TAP solvers against Alg. 1 on trained checkpoints;
``tap_hybrid``: Alg. 1 to a switch threshold, then Anderson, against Alg. 1."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from benchmarks.checkpoints import CHECKPOINTS, solve_checkpoints
from benchmarks.common import binary_mnist
from tapmachine.core import tap
from tapmachine.train import load_model

__all__ = [
    "ACCELERATED",
    "NEWTON_WARMUPS",
    "bench_tap_hybrid",
    "bench_tap_solve",
    "hybrid_comparison",
    "solver_comparison",
]


def _cpu_timed(fn):
    """(result, CPU seconds of this process): one torch thread's time, not the shared load's."""
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def _quantiles(t: torch.Tensor) -> tuple[float, float]:
    t = t.double()
    return float(t.median()), float(torch.quantile(t, 0.9))


def _tight(machine, state, solver: str, tol: float, max_iter: int):
    """``state`` continued by ``solver`` to ``tol``; for Alg. 1, rows still not converged get
    the 0.95-damped second pass (``tap.solve_with_retry``'s, at its tolerance). Returns the
    state and the (K,) mask of the rows that needed that pass (none for other solvers)."""
    out = tap.solve_from(machine, state, solver=solver, tol=tol, max_iter=max_iter)
    second_pass = torch.zeros_like(out.converged)
    if solver == "damped" and not bool(out.converged.all()):
        rows = torch.nonzero(~out.converged, as_tuple=True)[0]
        second_pass[rows] = True
        retry_tol = tap.retry_tolerance(tol, 0.5, 0.95)
        again = tap.solve_from(
            machine, out.select(rows), damping=0.95, tol=retry_tol, max_iter=max_iter
        )
        for merged, new in zip(out.a, again.a, strict=True):
            merged[rows] = new
        out.converged[rows] = again.converged
    return out, second_pass


#: The solvers ``tap_solve`` compares with Alg. 1, each from the same starts, and Alg. 1's
#: damped sweeps before ``newton_damped`` takes over in its ``newton_damped_warm{k}`` variants.
ACCELERATED = ("anderson", "newton_damped", "newton_sor")
NEWTON_WARMUPS = (5, 10)


def _variants(machine, x, kw, warmups) -> dict:
    """name -> (run, tight solver): ``run()`` solves from the starts ``x`` and returns (state,
    iterations per row); the tight solver continues its result to the reference tolerance."""

    def plain(solver):
        def run():
            state = tap.solve(machine, x, solver=solver, **kw)
            return state, state.iterations

        return run

    def warm(k):
        def run():
            first = tap.solve(machine, x, **{**kw, "max_iter": k})
            second = tap.solve_from(machine, first, solver="newton_damped", **kw)
            return second, first.iterations + second.iterations

        return run

    out = {solver: (plain(solver), solver) for solver in ACCELERATED}
    out.update({f"newton_damped_warm{k}": (warm(k), "newton_damped") for k in warmups})
    return out


def solver_comparison(
    machine, x, tol=1e-8, cap=1000, ref_tol=1e-16, warmups=NEWTON_WARMUPS
) -> dict:
    """Alg. 1 (damped 0.5) against each of ``ACCELERATED`` from the same starts ``x``
    (float64), and against ``newton_damped`` after ``warmups`` of Alg. 1's sweeps.

    All to ``tol`` (cap ``cap``): iterations per row (median, 90th percentile; unconverged rows
    count as ``cap``; a warm-up's sweeps included), converged share, CPU seconds. The fixed
    point each start reaches under Alg. 1 is its damped iterate continued to ``ref_tol`` (up to
    2 ``cap`` more iterations, then the 0.95-damped second pass for rows that cycle); each
    other result is continued by its own solver to ``ref_tol`` too and compared with it
    (max-abs over all units: ``same_fixed_point_share_{s}`` within 1e-4, over rows converged in
    both): the basin agreement. ``same_fixed_point_share_{s}_alg1_rows`` takes it over the rows
    whose reference Alg. 1 reached at damping 0.5 itself (``alg1_rows`` of them): a row that
    needed the 0.95 pass ends at a fixed point that is, on trained checkpoints, mostly unstable
    under Alg. 1 (``tap.stability``), so no basin of Alg. 1's holds it.
    ``{s}_stop_error_median``: how far the rows stopped at ``tol`` lie from their own solver's
    tight fixed point. ``row_sweep_seconds_{s}``: CPU seconds over
    the rows' summed iterations (one row's sweep), ``sweep_cost_ratio_{s}`` that over Alg. 1's.
    Ratios are damped over ``s`` (``iterations_ratio_{s}`` of the medians, ``seconds_ratio_{s}``).
    """
    kw = {"damping": 0.5, "tol": tol, "max_iter": cap}
    damped, t_damped = _cpu_timed(lambda: tap.solve(machine, x, **kw))
    ref, ref_second_pass = _tight(machine, damped, "damped", ref_tol, 2 * cap)

    def stop_error(stopped, tight):
        rows = stopped.converged & tight.converged
        err = (stopped.magnetisations() - tight.magnetisations()).abs().amax(1)[rows]
        return float(err.median()) if rows.any() else float("nan")

    d_med, d_p90 = _quantiles(damped.iterations)
    d_sweep = t_damped / int(damped.iterations.sum())
    out = {
        "rows": int(x.shape[0]),
        "iterations_damped_median": d_med,
        "iterations_damped_p90": d_p90,
        "seconds_damped": t_damped,
        "row_sweep_seconds_damped": d_sweep,
        "converged_share_damped": float(damped.converged.double().mean()),
        "reference_converged_share": float(ref.converged.double().mean()),
        "damped_stop_error_median": stop_error(damped, ref),
        "alg1_rows": int((ref.converged & ~ref_second_pass).sum()),
    }
    for name, (run, tight_solver) in _variants(machine, x, kw, warmups).items():
        (state, iterations), seconds = _cpu_timed(run)
        tight, _ = _tight(machine, state, tight_solver, ref_tol, 2 * cap)
        both = ref.converged & tight.converged
        gap_all = (ref.magnetisations() - tight.magnetisations()).abs().amax(1)
        gap = gap_all[both]
        alg1 = both & ~ref_second_pass
        med, p90 = _quantiles(iterations)
        sweep = seconds / int(iterations.sum())
        out.update(
            {
                f"iterations_{name}_median": med,
                f"iterations_{name}_p90": p90,
                f"iterations_ratio_{name}": d_med / med,
                f"seconds_{name}": seconds,
                f"seconds_ratio_{name}": t_damped / seconds,
                f"row_sweep_seconds_{name}": sweep,
                f"sweep_cost_ratio_{name}": sweep / d_sweep,
                f"converged_share_{name}": float(state.converged.double().mean()),
                f"{name}_tight_converged_share": float(tight.converged.double().mean()),
                f"same_fixed_point_share_{name}": (
                    float((gap <= 1e-4).double().mean()) if both.any() else None
                ),
                f"same_fixed_point_rows_{name}": int(both.sum()),
                f"same_fixed_point_share_{name}_alg1_rows": (
                    float((gap_all[alg1] <= 1e-4).double().mean()) if alg1.any() else None
                ),
                f"max_abs_delta_a_{name}": float(gap.max()) if both.any() else None,
                f"median_abs_delta_a_{name}": float(gap.median()) if both.any() else None,
                f"{name}_stop_error_median": stop_error(state, tight),
            }
        )
    return out


def _per_checkpoint(name, compare, rows, seconds_key, device, quick, checkpoints) -> list[dict]:
    """``compare(machine, x, cap)`` on each ``tap_solve`` checkpoint (float64, the first ``rows``
    training images, one torch thread), one JSON line per checkpoint; ``seconds`` is the
    comparison's ``seconds_key``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, source = binary_mnist(rows)
        x = x.to(device=device, dtype=torch.float64)
        out = []
        for model, epoch, path in solve_checkpoints(Path(checkpoints or CHECKPOINTS), quick):
            machine = load_model(path, device=device, dtype=torch.float64)
            if not out and torch.device(device).type == "cuda":  # CUDA's start-up, untimed
                for solver in tap.SOLVERS:
                    tap.solve(machine, x[:10], max_iter=5, solver=solver)
            result = {"name": name, "model": model, "epoch": epoch, "data": source}
            result.update(compare(machine, x, cap=300 if quick else 1000))
            result.update(seconds=result[seconds_key], gflops=None, ratio_to_matmul=None)
            print(json.dumps(result), flush=True)
            out.append(result)
        return out
    finally:
        torch.set_num_threads(threads)


def bench_tap_solve(device, quick: bool, checkpoints: Path | None = None) -> list[dict]:
    """The accelerated solvers against Alg. 1 on trained binary-MNIST checkpoints: one
    result per checkpoint of ``SOLVE_MODELS`` x ``SOLVE_EPOCHS`` (``solver_comparison`` on the
    first 500 training images, float64, one torch thread, CPU seconds; on CUDA the host's, which
    waits on the device, after an untimed start-up). Checkpoints are read from
    ``--checkpoints`` (default ``CHECKPOINTS``) or trained there (``train_checkpoints``)."""
    rows = 100 if quick else 500
    return _per_checkpoint(
        "tap_solve", solver_comparison, rows, "seconds_damped", device, quick, checkpoints
    )


#: Switch thresholds of ``tap_hybrid`` (Alg. 1's criterion at which a row goes to Anderson).
HYBRID_SWITCH = (1e-5, 1e-6, 1e-7)


def hybrid_comparison(machine, x, switches=HYBRID_SWITCH, tol=1e-8, cap=1000, ref_tol=1e-16):
    """Alg. 1 until each row's criterion is below a switch threshold, then Anderson (without its
    damped warm-up) from where it stopped to ``tol``, against Alg. 1 alone from the same starts
    (float64). Per threshold: the median of all sweeps per row (``median``; ``damped_part`` of
    them Alg. 1's), the converged share, the share of rows at Alg. 1's fixed point within 1e-4
    (both continued to ``ref_tol`` as in ``solver_comparison``) and CPU seconds."""
    from unittest import mock

    from tapmachine.core.tap import anderson as anderson_module

    kw = {"damping": 0.5, "max_iter": cap}
    damped, t_damped = _cpu_timed(lambda: tap.solve(machine, x, tol=tol, **kw))
    ref, _ = _tight(machine, damped, "damped", ref_tol, 2 * cap)
    out = {
        "rows": int(x.shape[0]),
        "damped_median": float(damped.iterations.double().median()),
        "damped_converged_share": float(damped.converged.double().mean()),
        "seconds_damped": t_damped,
    }
    for switch in switches:

        def hybrid(switch=switch):
            first = tap.solve(machine, x, tol=switch, **kw)
            # a variant measured here, not a solver option: Anderson with no damped warm-up
            with mock.patch.object(anderson_module, "_WARMUP", 0):
                second = tap.solve_from(machine, first, solver="anderson", tol=tol, **kw)
            return first, second

        (first, second), seconds = _cpu_timed(hybrid)
        tight, _ = _tight(machine, second, "anderson", ref_tol, 2 * cap)
        both = ref.converged & tight.converged
        gap = (ref.magnetisations() - tight.magnetisations()).abs().amax(1)[both]
        median = float((first.iterations + second.iterations).double().median())
        out[f"switch_{switch:g}"] = {
            "median": median,
            "damped_part": float(first.iterations.double().median()),
            "converged_share": float(second.converged.double().mean()),
            "same_fixed_point_share": float((gap <= 1e-4).double().mean()),
            "same_fixed_point_rows": int(both.sum()),
            "iterations_ratio": out["damped_median"] / median,
            "seconds": seconds,
        }
    return out


def bench_tap_hybrid(device, quick: bool, checkpoints: Path | None = None) -> list[dict]:
    """``hybrid_comparison`` on the ``tap_solve`` checkpoints, 200 training images each (quick:
    50), one torch thread, CPU seconds; one JSON line per checkpoint."""
    rows = 50 if quick else 200
    return _per_checkpoint(
        "tap_hybrid", hybrid_comparison, rows, "seconds_damped", device, quick, checkpoints
    )
