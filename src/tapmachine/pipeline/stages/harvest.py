"""``tapmachine harvest``: the TAP solutions of one training epoch, tracked in MLflow."""

from __future__ import annotations

from tapmachine.pipeline.stages.common import parse_json, set_threads


def harvest_epoch(
    model_file, checkpoint, epoch: int, data_path, settings, out_npz, out_csv, manifest=None, **kw
) -> dict:
    """``harvest.run_harvest`` recorded as its own run ``{model}/epoch_{epoch}`` of experiment
    "harvest" (summary as metrics, step = epoch; npz and CSV as artifacts), linked to the
    model's training run (``model_run_id``); the record beside the npz.

    Nothing is written into the (finished) training run: a rerun makes a new harvest run instead
    of a second point at the same step of the training run.
    """
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.pipeline.tracking.records import RunRecord, source_run
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
    from tapmachine.pipeline.configuration import schema_default
    from tapmachine.tap_paper import harvest

    set_threads(args.threads)
    spec = parse_json(args.spec, "--spec")
    settings = harvest.HarvestSettings.from_spec(spec)
    harvest_epoch(
        args.model_file,
        args.checkpoint,
        args.epoch,
        args.data,
        settings,
        args.out_npz,
        args.out_csv,
        device=args.device,
        dtype=spec.get("dtype", schema_default("harvest", "*", "dtype")),
        manifest=args.tracking,
    )


def register(subparsers) -> None:
    from tapmachine.pipeline.configuration import schema_default

    s = subparsers.add_parser("harvest", help="TAP solutions of one training epoch (Figs. 5-7)")
    s.add_argument("--model-file", required=True, help="the model's model.pt")
    s.add_argument("--checkpoint", required=True, help="checkpoints/epoch_{e}.pt of that model")
    s.add_argument("--epoch", type=int, required=True)
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument(
        "--spec",
        default="{}",
        help="the model's config harvest entry as JSON (keys left out: the schema's defaults)",
    )
    s.add_argument("--out-npz", required=True)
    s.add_argument("--out-csv", required=True)
    s.add_argument("--device", default=schema_default("device"))
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=run)
