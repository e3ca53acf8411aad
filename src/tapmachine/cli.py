"""Command-line entry points called by the Snakemake rules (``tapmachine <command> ...``).

Each command names its inputs, outputs and parameters explicitly and does nothing else: the
science is in the library modules. Errors the user can act on are printed as one line prefixed
with ``tapmachine:`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

__all__ = ["main"]


class UsageError(Exception):
    """An error in the user's input, reported as one line."""


def _cmd_tracking_init(args) -> None:
    from tapmachine import tracking

    info = tracking.init_store(args.store, args.manifest)
    print(f"tracking store {info['tracking_uri']}; experiments {info['experiments']}")


def _cmd_fetch(args) -> None:
    from tapmachine import data
    from tapmachine.figures.montage import montage

    if args.dataset == "mnist":
        ds = data.fetch_mnist(args.cache_dir, local_path=args.local_path)
    elif args.dataset == "fashion_mnist":
        ds = data.fetch_fashion_mnist(args.cache_dir, local_path=args.local_path)
    else:
        ds = data.fetch_faces(cbcl_archive=args.cbcl_archive)
    ds = dataclasses.replace(ds, name=args.dataset)
    _save_and_track(ds, args.out, args.tracking, montage)


def _cmd_derive(args) -> None:
    from tapmachine import data
    from tapmachine.figures.montage import montage

    try:
        transforms = json.loads(args.transforms)
    except json.JSONDecodeError as err:
        raise UsageError(f"--transforms is not JSON: {err}") from err
    source = data.load_dataset(args.source)
    if args.labels:
        source = data.select_labels(source, json.loads(args.labels))
    ds = data.derive(source, transforms, name=args.name)
    _save_and_track(ds, args.out, args.tracking, montage)


def _save_and_track(ds, out, manifest, montage) -> None:
    from tapmachine import data, tracking

    out = Path(out)
    data.save_dataset(ds, out)
    counts = data.label_counts(ds.y_train)
    summary = {
        "name": ds.name,
        "train_shape": list(ds.x_train.shape),
        "test_shape": list(ds.x_test.shape),
        "dtype": str(ds.x_train.dtype),
        "train_label_counts": counts,
        "provenance": ds.provenance,
    }
    print(json.dumps(summary, indent=2, default=str))
    tags = {"dataset": ds.name}
    if ds.provenance.get("substitute"):
        tags["substitute"] = str(ds.provenance["substitute"])
    with tracking.start_run(manifest, "data", ds.name, params=summary, tags=tags) as run:
        mean_value = float(ds.x_train[:10000].astype("float64").mean())
        run.log_metrics({"n_train": len(ds.x_train), "n_test": len(ds.x_test), "mean": mean_value})
        picture = out.with_suffix(".montage.png")
        title = ds.name
        if ds.provenance.get("substitute"):
            title += f" (substitute: {ds.provenance['substitute']})"
        try:
            montage(ds.x_train[:50], tuple(ds.image_shape), picture, title=title)
            run.log_artifact(picture)
        finally:
            picture.unlink(missing_ok=True)


def _cmd_train(args) -> None:
    import torch

    from tapmachine import training

    torch.set_num_threads(max(1, args.threads))
    try:
        spec = json.loads(args.spec)
    except json.JSONDecodeError as err:
        raise UsageError(f"--spec is not JSON: {err}") from err
    training.train_from_spec(
        name=args.model,
        spec=spec,
        data_path=args.data,
        outdir=args.outdir,
        seed=args.seed,
        device=args.device,
        dtype=args.dtype,
        manifest=args.tracking,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tapmachine", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("tracking-init", help="create the MLflow store and experiments")
    s.add_argument("--store", required=True, help="directory of the embedded SQLite store")
    s.add_argument("--manifest", required=True, help="JSON file receiving the experiment ids")
    s.set_defaults(func=_cmd_tracking_init)

    s = sub.add_parser("fetch", help="fetch, verify and convert a raw dataset")
    s.add_argument("--dataset", required=True, choices=["mnist", "fashion_mnist", "faces"])
    s.add_argument("--cache-dir", required=True)
    s.add_argument("--local-path", default=None, help="directory with the official idx files")
    s.add_argument("--cbcl-archive", default=None, help="MIT CBCL faces.tar.gz (faces only)")
    s.add_argument("--out", required=True)
    s.add_argument("--tracking", default=None, help="manifest of tracking-init (omit: no MLflow)")
    s.set_defaults(func=_cmd_fetch)

    s = sub.add_parser("derive", help="write a derived dataset (binarised, scaled, 8-bit, spin)")
    s.add_argument("--source", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--transforms", required=True, help="JSON list of transforms")
    s.add_argument("--labels", default=None, help="JSON list of labels to keep (default: all)")
    s.add_argument("--out", required=True)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_derive)

    s = sub.add_parser("train", help="train one model declared in the config")
    s.add_argument("--model", required=True)
    s.add_argument("--spec", required=True, help="the model's config entry as JSON")
    s.add_argument("--data", required=True)
    s.add_argument("--outdir", required=True)
    _add_numeric_args(s)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_train)
    return p


def _add_numeric_args(s) -> None:
    s.add_argument("--device", default="cpu")
    s.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)


def main(argv: list[str] | None = None) -> int:
    from tapmachine.data import DataError
    from tapmachine.training import TrainingError

    args = _parser().parse_args(argv)
    try:
        args.func(args)
    except (UsageError, DataError, TrainingError, FileNotFoundError) as err:
        print(f"tapmachine: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
