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

    info = tracking.init_store(args.store, args.manifest, best_effort=True)
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


def _cmd_harvest(args) -> None:
    import torch

    from tapmachine import harvest

    torch.set_num_threads(max(1, args.threads))
    settings = harvest.HarvestSettings(
        n_init=args.n_init,
        dedup_tol=args.dedup_tol,
        tol=args.tol,
        max_iter=args.max_iter,
        damping=args.damping,
    )
    harvest.run_harvest(
        model_file=args.model_file,
        checkpoint=args.checkpoint,
        epoch=args.epoch,
        data_path=args.data,
        settings=settings,
        out_npz=args.out_npz,
        out_csv=args.out_csv,
        device=args.device,
        dtype=args.dtype,
        manifest=args.tracking,
    )


def _cmd_figure(args) -> None:
    import os

    import torch

    from tapmachine.figures import common

    torch.set_num_threads(max(1, args.threads))
    if getattr(args, "embedding", None) == "umap" and not os.environ.get("NUMBA_CACHE_DIR"):
        cache = Path("results/cache/numba").resolve()
        cache.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(cache)
    if args.figure == "fig3":
        from tapmachine.figures import fig3

        result = fig3.make(args.metrics, args.model_files)
    elif args.figure == "fig4":
        from tapmachine.figures import fig4

        result = fig4.make(args.model_files, args.data, args.n_images, args.per_group)
    elif args.figure == "fig5":
        from tapmachine.figures import fig5

        result = fig5.make(args.solutions, args.slices)
    elif args.figure == "fig6":
        from tapmachine.figures import fig6

        result = fig6.make(args.solutions, args.embedding, args.n_neighbors, args.seed)
    else:
        from tapmachine.figures import fig7

        result = fig7.make(
            args.solutions,
            args.data,
            args.digits,
            args.n_images,
            args.embedding,
            args.n_neighbors,
            args.seed,
        )
    paths = common.save(result, args.png, args.pdf, args.csv)
    common.track(args.tracking, args.figure, result, paths)
    claims = result.table[result.table["kind"] == "claim"]
    print(claims[["claim", "model", "epoch", "value", "detail"]].to_string(index=False))
    print(f"wrote {', '.join(str(p) for p in paths)}")


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

    s = sub.add_parser("harvest", help="TAP solutions of one training epoch (Figs. 5-7)")
    s.add_argument("--model-file", required=True, help="the model's model.pt")
    s.add_argument("--checkpoint", required=True, help="checkpoints/epoch_{e}.pt of that model")
    s.add_argument("--epoch", type=int, required=True)
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument("--n-init", type=int, default=None, help="first n images (default: all)")
    s.add_argument("--dedup-tol", type=float, default=0.01)
    s.add_argument("--tol", type=float, default=1e-12)
    s.add_argument("--max-iter", type=int, default=2000)
    s.add_argument("--damping", type=float, default=0.5)
    s.add_argument("--out-npz", required=True)
    s.add_argument("--out-csv", required=True)
    s.add_argument("--device", default="cpu")
    s.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_harvest)

    s = sub.add_parser("figure", help="draw one figure of the first paper (fig3 ... fig7)")
    figs = s.add_subparsers(dest="figure", required=True)
    f3 = figs.add_parser("fig3", help="TAP log-likelihood per epoch")
    f3.add_argument("--metrics", nargs="+", required=True, help="metrics.csv of each model")
    f3.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    f4 = figs.add_parser("fig4", help="receptive fields ranked by spread and activation")
    f4.add_argument("--model-files", nargs="+", required=True)
    f4.add_argument("--data", nargs="+", required=True, help="dataset of each model, same order")
    f4.add_argument("--n-images", type=int, default=2000)
    f4.add_argument("--per-group", type=int, default=8)
    f5 = figs.add_parser("fig5", help="free energies and counts of TAP solutions per epoch")
    f5.add_argument("--solutions", nargs="+", required=True, help="harvest .npz files")
    f5.add_argument("--slices", nargs="*", type=int, default=None, help="histogram epochs")
    f6 = figs.add_parser("fig6", help="embedding of TAP solutions over training")
    f6.add_argument("--solutions", nargs="+", required=True)
    f7 = figs.add_parser("fig7", help="embedding of initialisations and their TAP solutions")
    f7.add_argument("--solutions", nargs="+", required=True)
    f7.add_argument("--data", required=True, help="the model's dataset (.npz)")
    f7.add_argument("--digits", nargs="*", type=int, default=None, help="labels (default: all)")
    f7.add_argument("--n-images", type=int, default=None)
    for f in (f6, f7):
        f.add_argument("--embedding", default="isomap", choices=["isomap", "umap"])
        f.add_argument("--n-neighbors", type=int, default=10)
        f.add_argument("--seed", type=int, default=0)
    for f in (f3, f4, f5, f6, f7):
        f.add_argument("--png", required=True)
        f.add_argument("--pdf", required=True)
        f.add_argument("--csv", required=True)
        f.add_argument("--threads", type=int, default=1)
        f.add_argument("--tracking", default=None)
        f.set_defaults(func=_cmd_figure)
    _add_likelihood_parsers(sub, figs)
    from tapmachine.stages import track

    track.register(sub)
    return p


def _add_numeric_args(s) -> None:
    s.add_argument("--device", default="cpu")
    s.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)


# --- likelihood yardsticks (App. F): `tapmachine score`, `tapmachine figure fig12|likelihood_table`


def _cmd_score(args) -> None:
    import torch

    from tapmachine import likelihood

    torch.set_num_threads(max(1, args.threads))
    try:
        section = json.loads(args.settings)
    except json.JSONDecodeError as err:
        raise UsageError(f"--settings is not JSON: {err}") from err
    model_dir = Path(args.model_dir)
    blob = torch.load(model_dir / "model.pt", map_location="cpu", weights_only=False)
    settings = likelihood.ScoreSettings.from_config(section, blob.get("spec"))
    common = dict(
        data_path=args.data,
        out_csv=args.out,
        settings=settings,
        seed=args.seed,
        device=args.device,
        dtype=args.dtype,
        manifest=args.tracking,
    )
    try:
        if args.epochs is None:
            likelihood.score_model(model_dir / "model.pt", **common)
        else:
            epochs = args.epochs
            if epochs not in ("all", "last"):
                epochs = [int(e) for e in epochs.split(",")]
            likelihood.score_checkpoints(model_dir, epochs=epochs, **common)
    except (ValueError, RuntimeError) as err:
        raise UsageError(f"scoring {model_dir}: {err}") from err
    print(f"wrote {args.out}")


def _cmd_likelihood_figure(args) -> None:
    from tapmachine.figures import common

    if args.figure == "fig12":
        from tapmachine.figures import fig12

        result = fig12.make(args.scores, args.model_file)
    else:
        from tapmachine.figures import likelihood_table

        result = likelihood_table.make(args.scores, args.model_files, not args.no_reference)
    paths = common.save(result, args.png, args.pdf, args.csv)
    common.track(args.tracking, args.figure, result, paths)
    claims = result.table[result.table["kind"] == "claim"]
    print(claims[["claim", "model", "value", "detail"]].to_string(index=False))
    print(f"wrote {', '.join(str(p) for p in paths)}")


def _add_likelihood_parsers(sub, figs) -> None:
    s = sub.add_parser("score", help="AIS, TAP and pseudo-likelihood of a model (App. F)")
    s.add_argument("--model-dir", required=True, help="results/models/{model} (model.pt inside)")
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument(
        "--epochs",
        default=None,
        help="all | last | comma-separated epochs: score those checkpoints (one row each); "
        "omitted: score model.pt (one row with the training settings)",
    )
    s.add_argument(
        "--settings",
        default="{}",
        help='JSON: {"ais": {"n_runs", "schedule", "n_betas"}, "pl_sites", "n_train", '
        '"n_test", "tap_inits"} (a likelihood.fig12 / likelihood.table config section)',
    )
    s.add_argument("--out", required=True, help="CSV to write")
    _add_numeric_args(s)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_score)

    f12 = figs.add_parser("fig12", help="TAP vs AIS vs pseudo-likelihood per epoch (App. F)")
    f12.add_argument("--scores", required=True, help="scores.csv of `tapmachine score --epochs`")
    f12.add_argument("--model-file", required=True, help="the model's model.pt")
    tab = figs.add_parser("likelihood_table", help="AIS test log-likelihood: TAP vs CD / PCD")
    tab.add_argument("--scores", nargs="+", required=True, help="final.csv of each model")
    tab.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    tab.add_argument("--no-reference", action="store_true", help="omit the published row")
    for f in (f12, tab):
        f.add_argument("--png", required=True)
        f.add_argument("--pdf", required=True)
        f.add_argument("--csv", required=True)
        f.add_argument("--tracking", default=None)
        f.set_defaults(func=_cmd_likelihood_figure)


def main(argv: list[str] | None = None) -> int:
    from tapmachine.data import DataError
    from tapmachine.figures.common import FigureError
    from tapmachine.harvest import HarvestError
    from tapmachine.stages.track import TrackError
    from tapmachine.training import TrainingError

    args = _parser().parse_args(argv)
    try:
        args.func(args)
    except (
        UsageError,
        DataError,
        TrainingError,
        HarvestError,
        FigureError,
        TrackError,
        FileNotFoundError,
    ) as err:
        print(f"tapmachine: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
