"""``tapmachine train``: train one model of the config, logging every epoch to MLflow."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tapmachine.pipeline.stages.common import (
    LazyRun,
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
    """``train_from_spec`` inside a run of experiment "train" (metrics per epoch,
    a deep model's greedy pretraining epochs as ``pretrain_l{layer}.*``, metrics.csv as artifact,
    the run id in model.pt)."""
    from tapmachine.train import train_from_spec
    from tapmachine.train.pretrain import prefixed

    with contextlib.ExitStack() as stack:
        tracked = LazyRun(stack, manifest, "train", name, system_metrics=True)

        def log_epoch(epoch, metrics, machine):
            tracked.run.log_metrics({k: v for k, v in metrics.items() if k != "epoch"}, step=epoch)

        def log_pretrain_epoch(layer, epoch, metrics):
            tracked.run.log_metrics(prefixed(layer, metrics), step=epoch)

        machine = train_from_spec(
            name,
            spec,
            str(data_path),
            str(outdir),
            seed=seed,
            device=device,
            dtype=dtype,
            on_start=tracked.on_start,
            on_epoch=log_epoch,
            on_pretrain_epoch=log_pretrain_epoch,
        )
        tracked.run.log_artifact(Path(outdir) / "metrics.csv")
        if tracked.run.active:
            # the MLflow model (pipeline.mlflow_model) and the training rows as its dataset
            from tapmachine.io import data

            ds = data.load_dataset(data_path)
            rows = ds.x_train[: spec["n_train"]] if spec.get("n_train") else ds.x_train
            tracked.run.log_machine(Path(outdir) / "model.pt", rows, data_path, ds.name)
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
