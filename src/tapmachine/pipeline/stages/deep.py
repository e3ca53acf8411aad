"""Stage wiring of Figs. 10-11 (first paper, App. D-E): per-epoch curves, timing, figures.

Commands (``register`` adds them):

- ``tapmachine deep-curve``: pseudo-likelihood (``--measure pl``, Fig. 10) or normalised TAP
  log-likelihood of train and test images (``--measure tap``, Fig. 11) at every checkpoint of a
  trained model, to one CSV, and the last epoch's per-image values (``--last-rows``); logged as
  a run ``{model}-curve`` of experiment "likelihood" (step = epoch), tagged ``model_run_id`` =
  the model's training run (which is left untouched).
- ``tapmachine deep-timing``: seconds per TAP and adaTAP iteration vs batch size, one run.
- ``tapmachine figure fig10`` / ``fig11`` (``stages.figures.FIGURES``) draw the figures from
  those CSVs.

``deep-curve`` and ``deep-timing`` keep their run's record beside their CSV (``<stem>.run.json``,
``pipeline.tracking.records``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tapmachine.core.errors import TapmachineError
from tapmachine.pipeline.stages.common import set_threads

__all__ = ["register", "curve_args", "DeepStageError"]


class DeepStageError(TapmachineError):
    """Inputs of the deep / adaTAP stage are missing or inconsistent."""


def curve_args(deep: dict, model: str) -> str:
    """``deep-curve`` options of ``model`` from the config's ``deep`` section (for deep.smk):
    pseudo-likelihood for a Fig. 10 model (its per-image rows at ``fig10.epoch`` when set),
    TAP train/test likelihood for a Fig. 11 model."""
    fig10 = deep.get("fig10") or {}
    if model in fig10.get("models", []):
        sites = fig10["pl_sites"]
        extra = f" --pl-sites {sites}" if sites else ""
        if fig10.get("epoch"):
            extra += f" --rows-epoch {fig10['epoch']}"
        return f"--measure pl --n-train {fig10['n_images']}{extra}"
    fig11 = deep["fig11"]
    return (
        f"--measure tap --n-train {fig11['n_train']} --n-test {fig11['n_test']} "
        f"--tap-inits {fig11['tap_inits']}"
    )


def _cmd_curve(args) -> None:
    import numpy as np
    import torch

    from tapmachine.core import tap
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io import data, modelfile
    from tapmachine.io.files import atomic_write, write_csv
    from tapmachine.io.schema import defaults
    from tapmachine.pipeline.tracking.recorder import publish
    from tapmachine.pipeline.tracking.records import RunRecord, source_run
    from tapmachine.tap_paper import curves

    set_threads(args.threads)
    model_file = Path(args.model_file)
    if not model_file.exists():
        raise DeepStageError(f"{model_file} not found: train the model first")
    model = modelfile.ModelFile.load(model_file)
    name = model.name
    spec = model.spec
    ckpt_dir = modelfile.checkpoint_dir(model_file.parent)
    dtype = getattr(torch, args.dtype)
    machines = curves.load_checkpoint_machines(ckpt_dir, dtype=dtype)
    if not machines:
        raise DeepStageError(f"no checkpoints epoch_*.pt in {ckpt_dir}")
    ds = data.load_dataset(args.data)
    x_train = torch.as_tensor(ds.x_train, dtype=dtype)
    if spec.get("n_train"):
        x_train = x_train[: spec["n_train"]]
    model_defaults = defaults("model")  # a spec from the workflow has them filled already
    tap_spec = {**model_defaults["tap"], **spec.get("tap", {})}
    if args.rows_epoch is not None and args.measure != "pl":
        raise DeepStageError("--rows-epoch is for --measure pl (Fig. 10)")
    if args.measure == "pl":
        if machines[0][1].n_layers != 2:
            raise DeepStageError(f"--measure pl: {name} is not an RBM")
        sites = seeded_generator(args.seed, curves.SITES_SEED_LABEL)  # shared by the models
        x = x_train[: args.n_train]
        epochs = [epoch for epoch, _ in machines]
        if args.rows_epoch is not None and args.rows_epoch not in epochs:
            raise DeepStageError(
                f"--rows-epoch {args.rows_epoch}: {name} has checkpoints of epochs "
                f"{epochs[0]}..{epochs[-1]} in {ckpt_dir}"
            )
        curve = curves.pseudo_likelihood_curve(
            machines, x, args.pl_sites, sites, rows_epoch=args.rows_epoch
        )
    else:
        x_test = torch.as_tensor(ds.x_test[: args.n_test], dtype=dtype)
        curve = curves.tap_likelihood_curve(
            machines,
            x_train[: args.n_train],
            x_test,
            args.tap_inits,
            tap.SolverSettings.of(tap_spec),
            dedup_tol=tap_spec["dedup_tol"],
        )
    info = {
        "model": name,
        "inference": spec.get("inference", model_defaults["inference"]),
        "train_iterations": tap_spec["train_iterations"],
        "n_hidden_layers": len(spec.get("hidden", [])),
        "measure": args.measure,
    }
    rows = [{**info, **r} for r in curve.rows]
    write_csv(rows, args.out)
    if args.last_rows:
        arrays = {k: v.double().cpu().numpy() for k, v in curve.last.items()}
        rows_epoch = args.rows_epoch or rows[-1]["epoch"]
        atomic_write(args.last_rows, lambda fh: np.savez(fh, epoch=rows_epoch, **arrays))
    params = {**info, "n_train": args.n_train, "n_test": args.n_test, "pl_sites": args.pl_sites}
    train_run = source_run(model_file)
    record = RunRecord(
        "likelihood",
        f"{name}-curve",
        params,
        {"model": name, "measure": args.measure},
        links={"model_run_id": train_run} if train_run else {},
        artifacts=[args.out, *([args.last_rows] if args.last_rows else [])],
    )
    for r in rows:
        values = {k: v for k, v in r.items() if k not in info and k != "epoch"}
        record.add_metrics(values, r["epoch"])
    publish(args.tracking, record, args.out)
    print(f"wrote {args.out} ({len(rows)} epochs)", file=sys.stderr)


def _cmd_timing(args) -> None:
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io.files import write_csv
    from tapmachine.pipeline.tracking.recorder import publish
    from tapmachine.pipeline.tracking.records import RunRecord
    from tapmachine.tap_paper import curves

    set_threads(args.threads)
    gen = seeded_generator(args.seed, "fig10", "timing")
    rows = curves.inference_timing(
        args.visible,
        args.hidden,
        args.batch_sizes,
        gen,
        repeats=args.repeats,
        tap_iterations=args.tap_iterations,
        adatap_iterations=args.adatap_iterations,
        dtype=getattr(torch, args.dtype),
        adatap_method=args.adatap_method,
    )
    write_csv(rows, args.out)
    record = RunRecord("benchmarks", "fig10/timing", vars_of(args), artifacts=[args.out])
    for r in rows:
        record.add_metrics(
            {"tap_seconds": r["tap_seconds"], "adatap_seconds": r["adatap_seconds"]},
            step=r["batch_size"],
        )
    publish(args.tracking, record, args.out)
    for r in rows:
        print(json.dumps(r), file=sys.stderr)


def vars_of(args) -> dict:
    return {k: v for k, v in vars(args).items() if k != "func"}


def register(subparsers) -> None:
    """Add ``deep-curve`` and ``deep-timing`` (fig10 and fig11 are in ``stages.figures``)."""
    import functools

    from tapmachine.pipeline.configuration import schema_default

    fig11 = functools.partial(schema_default, "deep", "fig11")
    timing = functools.partial(schema_default, "deep", "fig10", "timing")
    s = subparsers.add_parser("deep-curve", help="per-epoch PL or TAP likelihood (Figs. 10-11)")
    s.add_argument("--model-file", required=True, help="results/{run}/models/{model}/model.pt")
    s.add_argument("--data", required=True, help="the model's dataset (.npz)")
    s.add_argument("--measure", required=True, choices=["pl", "tap"])
    s.add_argument(
        "--n-train", type=int, default=fig11("n_train"), help="first training images scored"
    )
    s.add_argument("--n-test", type=int, default=fig11("n_test"), help="first test images (tap)")
    s.add_argument("--pl-sites", type=int, default=None, help="PL sites per image (pl)")
    s.add_argument(
        "--tap-inits", type=int, default=fig11("tap_inits"), help="TAP initialisations (tap)"
    )
    s.add_argument("--out", required=True)
    s.add_argument(
        "--last-rows",
        default=None,
        help="also write the last epoch's per-image values here (.npz: pl, or tap_ll_train and "
        "tap_ll_test; epoch), for paired comparisons of models scored on the same images",
    )
    s.add_argument(
        "--rows-epoch",
        type=int,
        default=None,
        help="write --last-rows at this epoch instead of the last (pl: Fig. 10's deep.fig10.epoch)",
    )
    s.add_argument("--seed", type=int, default=schema_default("seed"))
    s.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_curve)

    s = subparsers.add_parser("deep-timing", help="seconds per TAP / adaTAP iteration (Fig. 10)")
    s.add_argument("--visible", type=int, default=timing("visible_units"))
    s.add_argument("--hidden", type=int, default=timing("hidden_units"))
    s.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    s.add_argument("--repeats", type=int, default=timing("repeats"))
    s.add_argument("--tap-iterations", type=int, default=timing("tap_iterations"))
    s.add_argument("--adatap-iterations", type=int, default=timing("adatap_iterations"))
    s.add_argument(
        "--adatap-method", default=timing("adatap_method"), choices=["bipartite", "joint"]
    )
    s.add_argument("--dtype", default=schema_default("dtype"), choices=["float32", "float64"])
    s.add_argument("--seed", type=int, default=schema_default("seed"))
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out", required=True)
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_timing)
