"""``tapmachine harvest``: the TAP solutions of one training epoch, tracked in MLflow."""

from __future__ import annotations

import contextlib

from tapmachine.pipeline.stages.common import LazyRun, job_kwargs, set_threads, write_params


def harvest_epoch(
    model_file, checkpoint, epoch: int, data_path, settings, out_npz, out_csv, manifest=None, **kw
) -> dict:
    """``harvest.run_harvest`` inside its own run of experiment "harvest" (summary as metrics,
    step = epoch; npz and CSV as artifacts), tagged ``model_run_id`` = the model's training run.
    Its params are kept beside the npz (``epoch_{e}.params.json``) for ``tapmachine track``.

    Nothing is written into the (finished) training run: a rerun makes a new harvest run instead
    of a second point at the same step of the training run.
    """
    from tapmachine.tap_paper import harvest

    with contextlib.ExitStack() as stack:
        tracked = LazyRun(stack, manifest, "harvest", lambda p: f"{p['model']}/epoch_{epoch}")
        summary = harvest.run_harvest(
            model_file,
            checkpoint,
            epoch,
            data_path,
            settings,
            out_npz,
            out_csv,
            on_start=tracked.on_start,
            **kw,
        )
        write_params(out_npz, tracked.params)  # epoch_{e}.params.json: for tapmachine track
        tracked.run.log_metrics(summary, step=epoch)
        tracked.run.log_artifact(out_npz)
        tracked.run.log_artifact(out_csv)
    return summary


def run(args) -> None:
    from tapmachine.tap_paper import harvest

    set_threads(args.threads)
    settings = harvest.HarvestSettings(
        n_init=args.n_init,
        dedup_tol=args.dedup_tol,
        tol=args.tol,
        max_iter=args.max_iter,
        damping=args.damping,
        retry_damping=args.retry_damping,
        merge_rule=args.merge_rule,
        solver=args.solver,
        polish_tol=args.polish_tol,
        polish_solver=args.polish_solver,
    )
    harvest_epoch(
        args.model_file,
        args.checkpoint,
        args.epoch,
        args.data,
        settings,
        args.out_npz,
        args.out_csv,
        **job_kwargs(args),
    )


def register(subparsers) -> None:
    import functools

    from tapmachine.pipeline.configuration import schema_default

    entry = functools.partial(schema_default, "harvest", "*")
    s = subparsers.add_parser("harvest", help="TAP solutions of one training epoch (Figs. 5-7)")
    s.add_argument("--model-file", required=True, help="the model's model.pt")
    s.add_argument("--checkpoint", required=True, help="checkpoints/epoch_{e}.pt of that model")
    s.add_argument("--epoch", type=int, required=True)
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument("--n-init", type=int, default=None, help="first n images (default: all)")
    s.add_argument("--dedup-tol", type=float, default=entry("dedup_tol"))
    s.add_argument("--tol", type=float, default=entry("tol"))
    s.add_argument("--max-iter", type=int, default=entry("max_iter"))
    s.add_argument("--damping", type=float, default=entry("damping"))
    s.add_argument(
        "--retry-damping",
        type=lambda v: None if v.lower() in ("none", "null") else float(v),
        default=entry("retry_damping"),
        help="damping of a second pass over rows not converged (none: no second pass)",
    )
    s.add_argument(
        "--merge-rule", default=entry("merge_rule"), choices=["magnetisations", "free_energy"]
    )
    s.add_argument("--solver", default=entry("solver"), choices=["damped", "anderson"])
    s.add_argument(
        "--polish-tol",
        type=lambda v: None if v.lower() in ("none", "null") else float(v),
        default=entry("polish_tol"),
        help="converged rows iterated on to this tolerance before merging (none: not polished)",
    )
    s.add_argument(
        "--polish-solver", default=entry("polish_solver"), choices=["damped", "anderson"]
    )
    s.add_argument("--out-npz", required=True)
    s.add_argument("--out-csv", required=True)
    s.add_argument("--device", default=schema_default("device"))
    s.add_argument("--dtype", default=entry("dtype"), choices=["float32", "float64"])
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=run)
