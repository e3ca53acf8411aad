"""Project benchmarks: `python benchmarks/run.py [NAME ...]` (or `python -m benchmarks`).

Each benchmark prints one JSON object per line with at least ``name``, ``seconds``, ``gflops``
(achieved GFLOP/s, from an explicit operation count) and ``ratio_to_matmul``: the achieved rate
divided by this machine's float32 matmul rate on the same operand shapes, measured in the same
run. Ratios, not absolute times, are the goals (they transfer between machines). Results are
also logged to the MLflow experiment ``benchmarks`` of the store in ``results/mlflow`` (or
``$MLFLOW_TRACKING_URI``).

One module per area (``benchmarks.<module>``): ``training_epoch`` (tap_epoch),
``converged_epoch`` (tap_converged_epoch), ``side_by_side`` (tap_side_by_side),
``rounding_drift`` (tap_rounding_drift),
``compiled_step`` (tap_epoch_compiled),
``tap_iteration``, ``adatap``, ``harvest``,
``denoise``, ``ais`` (ais, dbm_ais), ``priors``, ``tap_solve`` (tap_solve, tap_hybrid),
``relaxation`` (tap_relaxation),
``paper_profile``, ``ucd`` (ucd_coupling, ucd_train_step); ``common`` and ``checkpoints`` hold
what they share. This module is the command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    # run as a script: import the package from the repository root, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402

import torch  # noqa: E402

from benchmarks import ROOT  # noqa: E402
from benchmarks.adatap import bench_adatap  # noqa: E402
from benchmarks.ais import bench_ais, bench_dbm_ais  # noqa: E402
from benchmarks.checkpoints import CHECKPOINTS  # noqa: E402
from benchmarks.compiled_step import bench_tap_epoch_compiled  # noqa: E402
from benchmarks.converged_epoch import bench_tap_converged_epoch  # noqa: E402
from benchmarks.denoise import bench_denoise  # noqa: E402
from benchmarks.harvest import bench_harvest  # noqa: E402
from benchmarks.paper_profile import PROFILE_TARGETS, bench_paper_profile  # noqa: E402
from benchmarks.priors import bench_priors  # noqa: E402
from benchmarks.relaxation import bench_tap_relaxation  # noqa: E402
from benchmarks.rounding_drift import bench_tap_rounding_drift  # noqa: E402
from benchmarks.side_by_side import bench_tap_side_by_side  # noqa: E402
from benchmarks.tap_iteration import bench_tap_iteration  # noqa: E402
from benchmarks.tap_solve import bench_tap_hybrid, bench_tap_solve  # noqa: E402
from benchmarks.training_epoch import bench_tap_epoch  # noqa: E402
from benchmarks.ucd import UCD_STEP, bench_ucd_coupling, bench_ucd_train_step  # noqa: E402
from tapmachine.pipeline.heap import keep_freed_memory  # noqa: E402
from tapmachine.pipeline.tracking import store as tracking  # noqa: E402

BENCHMARKS = {
    "tap_epoch": bench_tap_epoch,
    "tap_iteration": bench_tap_iteration,
    "tap_converged_epoch": bench_tap_converged_epoch,
    "tap_epoch_compiled": bench_tap_epoch_compiled,
    "tap_side_by_side": bench_tap_side_by_side,
    "tap_rounding_drift": bench_tap_rounding_drift,
    "denoise": bench_denoise,
    "harvest": bench_harvest,
    "ais": bench_ais,
    "priors": bench_priors,
    "paper_profile": bench_paper_profile,
    "tap_solve": bench_tap_solve,
    "tap_hybrid": bench_tap_hybrid,
    "tap_relaxation": bench_tap_relaxation,
    "adatap": bench_adatap,
    "ucd_coupling": bench_ucd_coupling,
    "ucd_train_step": bench_ucd_train_step,
    "dbm_ais": bench_dbm_ais,
}

#: Benchmarks that take ``checkpoints`` (``--checkpoints``).
USES_CHECKPOINTS = {
    "tap_solve",
    "tap_hybrid",
    "tap_relaxation",
    "paper_profile",
    "tap_converged_epoch",
    "tap_side_by_side",
    "tap_rounding_drift",
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"any of {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for smoke tests")
    p.add_argument("--no-tracking", action="store_true")
    p.add_argument(
        "--ucd-sizes",
        default=None,
        help="ucd_train_step's layer sizes, e.g. 784,784,784 (default) or 6272,6272,6272",
    )
    p.add_argument("--ucd-batch", type=int, default=None, help="ucd_train_step's batch (1,000)")
    p.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        help="tap_solve, tap_hybrid, paper_profile, tap_converged_epoch, tap_side_by_side, "
        "tap_rounding_drift, tap_relaxation (default there: results/paper/models, a run's): "
        f"DIR/{{model}}/epoch_{{e}}.pt to read or train (default {CHECKPOINTS.relative_to(ROOT)})",
    )
    p.add_argument(
        "--counts-from",
        type=Path,
        default=None,
        help="paper_profile: count TAP iterations on a run's own checkpoints where it has them "
        "(RUN_MODELS/{model}/checkpoints/epoch_{e}.pt, e.g. results/paper/models)",
    )
    p.add_argument(
        "--overlays",
        type=Path,
        nargs="+",
        default=[],
        help="paper_profile: config files laid over workflow/config/paper.yaml, as a run gives "
        "them to snakemake after it (e.g. workflow/config/paper_cpu.yaml)",
    )
    p.add_argument(
        "--targets",
        nargs="+",
        default=list(PROFILE_TARGETS),
        help="paper_profile: the targets whose jobs are priced, as a run gives them to snakemake "
        f"(default: all of {', '.join(PROFILE_TARGETS)}); the Fig. 10 and Fig. 11 choices "
        "are made for all of them only",
    )
    args = p.parse_args(argv)
    unknown_targets = sorted(set(args.targets) - set(PROFILE_TARGETS))
    if unknown_targets:
        p.error(f"--targets: no such target {unknown_targets}; choose from {list(PROFILE_TARGETS)}")
    if args.counts_from and not args.counts_from.is_dir():
        p.error(f"--counts-from {args.counts_from}: no such directory")
    missing = [str(f) for f in args.overlays if not f.is_file()]
    if missing:
        p.error(f"--overlays: no such file: {', '.join(missing)}")
    if args.ucd_sizes:
        UCD_STEP["sizes"] = [int(n) for n in args.ucd_sizes.split(",")]
    if args.ucd_batch:
        UCD_STEP["batch"] = args.ucd_batch
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    on_cpu = torch.device(args.device).type == "cpu"
    if "paper_profile" in args.names and not on_cpu:
        p.error(
            f"paper_profile prices one CPU thread and projects 2 CPU cores; it has no "
            f"{args.device} projection (run it with --device cpu)"
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as a `tapmachine` job runs (tapmachine.pipeline.heap)
    manifest = None
    if not args.no_tracking:
        store = ROOT / "results" / "mlflow"
        manifest = store / "experiments.json"
        if not manifest.exists():
            tracking.init_store(store, manifest)
    env = {
        "device": args.device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }
    if torch.device(args.device).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    for name in args.names or list(BENCHMARKS):
        if name == "paper_profile" and not on_cpu:
            print(f"paper_profile skipped: it prices CPU time, not {args.device}", file=sys.stderr)
            continue
        fn = BENCHMARKS[name]
        if name == "paper_profile":
            results = fn(
                args.device,
                args.quick,
                args.checkpoints,
                args.counts_from,
                args.overlays,
                args.targets,
            )
        elif name in USES_CHECKPOINTS:
            results = fn(args.device, args.quick, checkpoints=args.checkpoints)
        else:
            results = fn(args.device, args.quick)
        printed = isinstance(results, list)  # one line per checkpoint, printed as measured
        for result in results if printed else [results]:
            result.update(env)
            result["quick"] = args.quick
            if not printed:
                print(json.dumps(result), flush=True)
            with tracking.start_run(manifest, "benchmarks", name, params=env) as run:
                run.log_metrics({k: v for k, v in result.items() if isinstance(v, int | float)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
