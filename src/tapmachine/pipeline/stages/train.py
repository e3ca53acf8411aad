"""``tapmachine train``: train one model of the config, logging every epoch to MLflow."""

from __future__ import annotations

from pathlib import Path

from tapmachine.pipeline.stages.common import (
    add_numeric_args,
    job_kwargs,
    parse_json,
    set_threads,
)


def train_model(
    name: str,
    spec: dict,
    data_path,
    outdir,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    manifest=None,
):
    """``train_from_spec`` recorded as run ``name`` of experiment "train": metrics
    per epoch (live, and replayed from metrics.csv), a deep model's greedy pretraining epochs as
    ``pretrain_l{layer}.*``, metrics.csv as artifact, the machine as an MLflow model with its
    training rows; the record beside model.pt (``model.run.json``)."""
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.pipeline.tracking.records import RunRecord, Series
    from tapmachine.train import pretrain, train_from_spec

    outdir = Path(outdir)
    metrics_csv = outdir / "metrics.csv"
    record = RunRecord(
        "train",
        name,
        series=[Series(str(metrics_csv), "epoch")],
        artifacts=[metrics_csv],
        machine=(outdir / "model.pt", Path(data_path), spec.get("n_train")),
    )
    with recording(manifest, record, outdir / "model.pt", system_metrics=True) as run:

        def log_epoch(epoch, metrics, machine):
            run.log({k: v for k, v in metrics.items() if k != "epoch"}, step=epoch, keep=False)

        def log_history(rows, machine):
            steps = {row["epoch"]: {k: v for k, v in row.items() if k != "epoch"} for row in rows}
            run.log_steps(steps, keep=False)

        def log_pretrain_epoch(layer, epoch, metrics):
            run.log(pretrain.prefixed(layer, metrics), step=epoch)

        machine = train_from_spec(
            name,
            spec,
            str(data_path),
            str(outdir),
            seed=seed,
            device=device,
            dtype=dtype,
            on_start=run.start,
            on_epoch=log_epoch,
            on_history=log_history,
            on_pretrain_epoch=log_pretrain_epoch,
        )
    return machine


def train(args) -> None:
    set_threads(args.threads)
    spec = parse_json(args.spec, "--spec")
    train_model(args.model, spec, args.data, args.outdir, seed=args.seed, **job_kwargs(args))


def register(subparsers) -> None:
    s = subparsers.add_parser("train", help="train one model declared in the config")
    s.add_argument("--model", required=True)
    s.add_argument("--spec", required=True, help="the model's config entry as JSON")
    s.add_argument("--data", required=True)
    s.add_argument("--outdir", required=True)
    add_numeric_args(s)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=train)
