"""``tapmachine harvest``: the TAP solutions of one training epoch, tracked in MLflow."""

from __future__ import annotations

from tapmachine.pipeline.stages.common import job_kwargs, optional_float, set_threads


def harvest_epoch(
    model_file, checkpoint, epoch: int, data_path, settings, out_npz, out_csv, manifest=None, **kw
) -> dict:
    """``harvest.run_harvest`` recorded as its own run ``{model}/epoch_{epoch}`` of experiment
    "harvest" (summary as metrics, step = epoch; npz and CSV as artifacts), linked to the
    model's training run (``model_run_id``); the record beside the npz.

    Nothing is written into the (finished) training run: a rerun makes a new harvest run instead
    of a second point at the same step of the training run.
    """
    from tapmachine.pipeline.recorder import recording
    from tapmachine.pipeline.records import RunRecord, source_run
    from tapmachine.tap_paper import harvest

    train_run = source_run(model_file)
    links = {"model_run_id": train_run} if train_run else {}
    record = RunRecord("harvest", "", links=links, artifacts=[out_npz, out_csv])
    with recording(manifest, record, out_npz) as run:

        def on_start(params, tags):
            record.name = f"{params['model']}/epoch_{epoch}"
            return run.start(params, tags)

        summary = harvest.run_harvest(
            model_file,
            checkpoint,
            epoch,
            data_path,
            settings,
            out_npz,
            out_csv,
            on_start=on_start,
            **kw,
        )
        record.add_metrics(summary, step=epoch)
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
        type=optional_float,
        default=entry("retry_damping"),
        help="damping of a second pass over rows not converged (none: no second pass)",
    )
    s.add_argument(
        "--merge-rule", default=entry("merge_rule"), choices=["magnetisations", "free_energy"]
    )
    s.add_argument("--solver", default=entry("solver"), choices=["damped", "anderson"])
    s.add_argument(
        "--polish-tol",
        type=optional_float,
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
