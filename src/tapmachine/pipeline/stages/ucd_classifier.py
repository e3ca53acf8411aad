"""The classifier of the classifier FID (second paper, Table 1, with a feature network trained
here in place of Inception): ``tapmachine ucd classifier`` trains it on a binary dataset
(``tapmachine.ucd.fid``), logs and writes it with its test accuracy (``fid.save_classifier``);
``ucd score`` loads it (``fid.load_classifier``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tapmachine.pipeline.stages.ucd_dbm import UCDDBMError

__all__ = ["register", "train_classifier"]


def train_classifier(data_path, out, settings: dict, seed: int = 0, manifest=None) -> float:
    """Train the FID classifier on ``data_path``; write it (with its test accuracy) to ``out``."""
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io import data
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.pipeline.tracking.records import RunRecord
    from tapmachine.ucd import fid

    ds = data.load_dataset(data_path)
    cs = dict(settings)
    n_train = cs.pop("n_train", None)
    if "channels" in cs:
        cs["channels"] = tuple(cs["channels"])
    try:
        cfg = fid.ClassifierSettings(**cs)
    except TypeError as exc:
        raise UCDDBMError(f"ucd.dbm.classifier: {exc}") from None
    x, y = ds.x_train, ds.y_train
    if n_train:
        x, y = x[:n_train], y[:n_train]
    g = seeded_generator(seed, "ucd_classifier", ds.name)
    params = {"dataset": ds.name, **settings}
    record = RunRecord("ucd", f"classifier_{ds.name}", params, artifacts=[out])
    with recording(manifest, record, out) as run:
        run.start()
        t0 = time.perf_counter()
        net = fid.train_classifier(torch.as_tensor(x), torch.as_tensor(y), ds.image_shape, cfg, g)
        seconds = time.perf_counter() - t0
        acc = fid.accuracy(net, ds.x_test, ds.y_test)
        run.log({"test_accuracy": acc, "train_seconds": seconds})
        fid.save_classifier(Path(out), net, acc, seconds)
    print(f"classifier on {ds.name}: test accuracy {acc:.4f}, trained in {seconds:.0f} s")
    return acc


def _cmd_classifier(args) -> None:
    import torch

    torch.set_num_threads(max(1, args.threads))
    train_classifier(args.data, args.out, json.loads(args.spec), args.seed, args.tracking)


def register(ucd_sub) -> None:
    """Add ``tapmachine ucd classifier``."""
    from tapmachine.pipeline.configuration import schema_default

    c = ucd_sub.add_parser("classifier", help="train the classifier of the classifier FID")
    c.add_argument("--data", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--spec", default="{}", help="config ucd.dbm.classifier as JSON")
    c.add_argument("--seed", type=int, default=schema_default("seed"))
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--tracking", default=None)
    c.set_defaults(func=_cmd_classifier)
