"""``tapmachine fetch``, ``read-file`` and ``derive``: the datasets, with a montage in MLflow."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tapmachine.pipeline.stages.common import parse_json


def fetch(args) -> None:
    from tapmachine.io import data

    if args.dataset == "mnist":
        ds = data.fetch_mnist(args.cache_dir, local_path=args.local_path)
    elif args.dataset == "fashion_mnist":
        ds = data.fetch_fashion_mnist(args.cache_dir, local_path=args.local_path)
    else:
        ds = data.fetch_faces(cbcl_archive=args.cbcl_archive)
    ds = dataclasses.replace(ds, name=args.dataset)
    save_and_track(ds, args.out, args.tracking)


def derive(args) -> None:
    from tapmachine.io import data

    transforms = parse_json(args.transforms, "--transforms")
    source = data.load_dataset(args.source)
    if args.labels:
        source = data.select_labels(source, parse_json(args.labels, "--labels"))
    ds = data.derive(source, transforms, name=args.name)
    save_and_track(ds, args.out, args.tracking)


def read_file(args) -> None:
    """A dataset of the user's own file (``io.data.own``), its entry of config ``data.files``."""
    from tapmachine.io import data

    spec = parse_json(args.spec, "--spec")
    test = spec.get("test") or {}
    ds = data.read_own(
        args.name,
        spec["path"],
        array=spec.get("array"),
        labels=spec.get("labels"),
        test_path=test.get("path"),
        test_fraction=None if test.get("path") else test.get("fraction"),
        seed=test.get("seed", 0),
        image_shape=spec.get("image_shape"),
    )
    save_and_track(ds, args.out, args.tracking)


def dataset_params(ds) -> dict:
    """The params of a dataset's run (experiment ``data``): name, shapes, dtype, training label
    counts and provenance, all read from the dataset itself. The provenance is taken as the .npz
    keeps it (JSON with sorted keys, ``data.save_dataset``), so that a dict inside a list (a
    transform's settings) gives the same string before saving and after reading back."""
    from tapmachine.io import data

    return {
        "name": ds.name,
        "train_shape": list(ds.x_train.shape),
        "test_shape": list(ds.x_test.shape),
        "dtype": str(ds.x_train.dtype),
        "train_label_counts": data.label_counts(ds.y_train),
        "provenance": json.loads(json.dumps(ds.provenance, sort_keys=True)),
    }


def dataset_metrics(ds) -> dict:
    """The metrics of a dataset's run: the numbers of training and test images and the mean
    value of the first 10,000 training images."""
    mean_value = float(ds.x_train[:10000].astype("float64").mean())
    return {"n_train": len(ds.x_train), "n_test": len(ds.x_test), "mean": mean_value}


def save_and_track(ds, out, manifest) -> None:
    """Write ``ds`` to ``out`` and a montage of 50 images beside it (``<stem>.montage.png``);
    record run ``ds.name`` of experiment "data": ``dataset_params`` and ``dataset_metrics``,
    the montage as artifact."""
    from tapmachine.figures.montage import montage
    from tapmachine.io import data
    from tapmachine.pipeline.tracking.recorder import publish
    from tapmachine.pipeline.tracking.records import RunRecord

    out = Path(out)
    data.save_dataset(ds, out)
    summary = dataset_params(ds)
    print(json.dumps(summary, indent=2, default=str))
    tags = {"dataset": ds.name}
    if ds.provenance.get("substitute"):
        tags["substitute"] = str(ds.provenance["substitute"])
    picture = out.with_suffix(".montage.png")
    title = ds.name
    if ds.provenance.get("substitute"):
        title += f" (substitute: {ds.provenance['substitute']})"
    montage(ds.x_train[:50], tuple(ds.image_shape), picture, title=title)
    record = RunRecord("data", ds.name, summary, tags, artifacts=[picture])
    record.add_metrics(dataset_metrics(ds))
    publish(manifest, record, out)


def register(subparsers) -> None:
    s = subparsers.add_parser("fetch", help="fetch, verify and convert a raw dataset")
    s.add_argument("--dataset", required=True, choices=["mnist", "fashion_mnist", "faces"])
    s.add_argument("--cache-dir", required=True)
    s.add_argument("--local-path", default=None, help="directory with the official idx files")
    s.add_argument("--cbcl-archive", default=None, help="MIT CBCL faces.tar.gz (faces only)")
    s.add_argument("--out", required=True)
    s.add_argument("--tracking", default=None, help="manifest of tracking-init (omit: no MLflow)")
    s.set_defaults(func=fetch)

    s = subparsers.add_parser("read-file", help="read a dataset from your own file")
    s.add_argument("--name", required=True)
    s.add_argument("--spec", required=True, help="its entry of config data.files as JSON")
    s.add_argument("--out", required=True)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=read_file)

    s = subparsers.add_parser(
        "derive", help="write a derived dataset (binarised, scaled, 8-bit, spin)"
    )
    s.add_argument("--source", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--transforms", required=True, help="JSON list of transforms")
    s.add_argument("--labels", default=None, help="JSON list of labels to keep (default: all)")
    s.add_argument("--out", required=True)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=derive)
