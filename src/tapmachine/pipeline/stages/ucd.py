"""Stage wiring of UCD-LMI (second paper): ``tapmachine ucd steps`` and ``figure ucd_fig1``.

``tapmachine ucd steps`` runs the coupling-time study of Fig. 1 for one method: for every
dimension d a random d x d RBM (orthogonal W, Sec. 4.3; spin units and Logistic(0, 0.5) biases by
default, Secs. 4.1 and App. B), seeded from (seed, "ucd_fig1", d) so that every method sees the same
machines, and ``reps`` chains run as one batch (``ucd.coupling_steps``). It writes the long-form
CSV (d, method, rep, tau, T, capped) and logs a run to the MLflow experiment ``ucd``: per-d
metrics with step = d (mean tau, T and tau + T, fraction with tau = 1, the fraction of chains whose
estimate carries a correction term, caps hit, seconds) and the CSV; the run's record is kept
beside the CSV (``{method}.run.json``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from tapmachine.core.errors import TapmachineError
from tapmachine.pipeline.stages.common import positive_int

__all__ = ["UCDError", "register", "run_steps", "STEP_FIELDS"]

#: One row per chain: ``corrected`` (the estimate carries a non-zero correction term) and
#: ``search_capped`` (the local search hit its cap).
STEP_FIELDS = ["d", "method", "rep", "tau", "T", "capped", "corrected", "search_capped"]


class UCDError(TapmachineError):
    """Bad input to a UCD stage (a method, size or cap out of range)."""


def run_steps(
    method: str,
    dims: list[int],
    reps: int,
    cap: int,
    search_cap: int,
    units: str,
    bias: str,
    gain: float,
    seed: int,
    out: str | Path,
    device: str = "cpu",
    dtype: str = "float32",
    manifest=None,
) -> list[dict]:
    """The Fig. 1 study of one method; rows of the long-form CSV written to ``out``."""
    import torch

    from tapmachine import ucd
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io.files import write_csv
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.pipeline.tracking.records import RunRecord

    if method not in ucd.METHODS:
        raise UCDError(f"method {method!r} is not one of {list(ucd.METHODS)}")
    for key, values in (
        ("dims", dims),
        ("reps", [reps]),
        ("cap", [cap]),
        ("search_cap", [search_cap]),
    ):
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < 1]
        if bad or not values:
            raise UCDError(f"{key} must be positive integers, got {values}")
    if units not in ("spin", "binary") or bias not in ("logistic", "zero"):
        raise UCDError(f"units {units!r} / bias {bias!r}: expected spin|binary and logistic|zero")
    if not (isinstance(gain, int | float) and math.isfinite(gain) and gain > 0):
        raise UCDError(f"gain must be a positive number, got {gain!r}")
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}[dtype]
    params = {
        "method": method,
        "dims": list(dims),
        "reps": reps,
        "cap": cap,
        "search_cap": search_cap,
        "units": units,
        "bias": bias,
        "gain": gain,
        "seed": seed,
        "dtype": dtype,
        "device": device,
    }
    rows = []
    record = RunRecord("ucd", f"fig1_{method}", params, artifacts=[out])
    with recording(manifest, record, out) as run:
        run.start()
        for d in dims:
            machine = ucd.random_machine(
                [d, d], seeded_generator(seed, "ucd_fig1", f"d{d}"), units, bias, gain, torch_dtype
            ).to(device=device)
            g = seeded_generator(seed, "ucd_fig1", f"d{d}", method, device=device)
            t0 = time.perf_counter()
            est = ucd.coupling_steps(machine, method, reps, cap, g, search_cap)
            seconds = time.perf_counter() - t0
            tau, steps, capped = est.tau.cpu(), est.steps.cpu(), est.capped.cpu()
            per_chain = zip(
                tau.tolist(),
                steps.tolist(),
                capped.tolist(),
                est.corrected.cpu().tolist(),
                est.search_capped.cpu().tolist(),
                strict=True,
            )
            rows += [
                {
                    "d": d,
                    "method": method,
                    "rep": r,
                    "tau": a,
                    "T": b,
                    "capped": int(c),
                    "corrected": int(k),
                    "search_capped": int(s),
                }
                for r, (a, b, c, k, s) in enumerate(per_chain)
            ]
            total = (tau + steps).double()
            metrics = {
                "tau_mean": float(tau.double().mean()),
                "T_mean": float(steps.double().mean()),
                "tau_plus_T_mean": float(total.mean()),
                "tau_plus_T_std": float(total.std()) if reps > 1 else 0.0,
                "tau_one_fraction": float((tau == 1).double().mean()),
                "corrected_fraction": float(est.corrected.double().mean()),
                "capped": float(capped.sum()),
                "search_capped": float(est.search_capped.sum()),
                "seconds": seconds,
            }
            run.log(metrics, step=d)
            print(
                f"{method} d={d}: tau {metrics['tau_mean']:.2f}, T {metrics['T_mean']:.2f}, "
                f"tau = 1 in {metrics['tau_one_fraction']:.3f} of {reps} chains, correction "
                f"non-zero in {metrics['corrected_fraction']:.3f}, capped {int(metrics['capped'])} "
                f"(cap {cap}), {seconds:.2f} s",
                flush=True,
            )
        write_csv(rows, out, STEP_FIELDS)
    return rows


def _cmd_steps(args) -> None:
    import torch

    torch.set_num_threads(max(1, args.threads))
    run_steps(
        method=args.method,
        dims=args.dims,
        reps=args.reps,
        cap=args.cap,
        search_cap=args.search_cap,
        units=args.units,
        bias=args.bias,
        gain=args.gain,
        seed=args.seed,
        out=args.out,
        device=args.device,
        dtype=args.dtype,
        manifest=args.tracking,
    )
    print(f"wrote {args.out}")


def register(subparsers) -> None:
    """Add ``tapmachine ucd ...`` (the UCD figures are in ``stages.figures.FIGURES``)."""
    import functools

    from tapmachine.pipeline.configuration import schema_default
    from tapmachine.pipeline.stages.common import add_numeric_args

    s = subparsers.add_parser("ucd", help="UCD-LMI (second paper): coupling studies")
    sub = s.add_subparsers(dest="ucd_command", required=True)
    st = sub.add_parser("steps", help="Fig. 1: coupling time tau and local-search steps T vs d")
    # checked by run_steps against ucd.METHODS: importing it here would load torch for --help
    st.add_argument("--method", required=True, help="a method of tapmachine.ucd.METHODS")
    st.add_argument("--dims", nargs="+", type=positive_int, required=True)
    fig1 = functools.partial(schema_default, "ucd", "fig1")
    st.add_argument("--reps", type=positive_int, default=fig1("reps"), help="chains per dimension")
    st.add_argument("--cap", type=positive_int, default=fig1("cap"), help="coupling steps at most")
    st.add_argument("--search-cap", type=positive_int, default=fig1("search_cap"))
    st.add_argument("--units", default=fig1("units"), choices=["spin", "binary"])
    st.add_argument("--bias", default=fig1("bias"), choices=["logistic", "zero"])
    st.add_argument("--gain", type=float, default=fig1("gain"), help="scale of the orthogonal W")
    st.add_argument("--out", required=True, help="long-form CSV (d, method, rep, tau, T, capped)")
    add_numeric_args(st)
    st.add_argument("--tracking", default=None)
    st.set_defaults(func=_cmd_steps)
    from tapmachine.pipeline.stages import ucd_classifier, ucd_dbm

    ucd_dbm.register(sub)
    ucd_classifier.register(sub)
