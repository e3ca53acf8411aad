"""Stage wiring of UCD-LMI DBM training and evaluation (second paper, Secs. 4-5, App. C).

Commands (all under ``tapmachine ucd``; figures under ``tapmachine figure``):

- ``ucd train-dbm``: one DBM of config ``ucd.dbm.models`` / ``ucd.dbm.ablation`` on one dataset,
  by the one training loop (``train.train``, methods ``ucd_lmi``, ``dbm_pcd``,
  ``centered_pcd``); per step to MLflow (experiment ``ucd``): tau, T, corrected fraction, start
  energy gap, estimator norm; per epoch: an image of samples and reconstructions. Writes
  ``model.pt`` (machine, spec, per-epoch history, the tau histogram) and ``steps.csv`` (its
  rows kept step by step in ``checkpoints/steps.jsonl`` until then, so a rerun keeps them); the
  machine is logged as an MLflow model ``{dataset}_{model}``
  (``pipeline.tracking.model_registry``).
- ``ucd classifier``: the classifier of the classifier FID (``stages.ucd_classifier``).
- ``ucd score``: one DBM scored (``tapmachine.ucd.score``) by the classifier FID of its samples
  (local modes from uniform states) against the test set, by the TAP log-likelihood (first
  paper, App. E) of test images, and by the AIS test log-likelihood of Salakhutdinov & Hinton
  (2009) (``tapmachine.ucd.ais``: ln Z by AIS on the odd layers, the data term by the mean-field
  lower bound, so the number is an estimated lower bound on ln P(v), nats per image).
- ``figure ucd_samples`` / ``ucd_completion`` / ``ucd_table1`` / ``ucd_table2`` are registered by
  ``stages.figures`` (table ``FIGURES``).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from tapmachine.core.errors import TapmachineError

__all__ = ["UCDDBMError", "register", "train_dbm", "score"]


class UCDDBMError(TapmachineError):
    """Bad input to a DBM stage (spec, file, size)."""


def _load_binary(path):
    import numpy as np
    import torch

    from tapmachine.io import data

    ds = data.load_dataset(path)
    for name, arr in (("x_train", ds.x_train), ("x_test", ds.x_test)):
        if not np.isin(arr, (0, 1)).all():
            raise UCDDBMError(f"{path}: {name} is not binary {{0, 1}}; UCD-LMI needs binary data")
    return (
        ds,
        torch.as_tensor(ds.x_train, dtype=torch.float32),
        torch.as_tensor(ds.x_test, dtype=torch.float32),
    )


def train_dbm(
    name: str,
    spec: dict,
    data_path,
    outdir,
    seed: int = 0,
    n_train: int | None = None,
    manifest=None,
    progress: bool = False,
    device: str = "cpu",
):
    """Train one DBM (config ``ucd.dbm.models.<name>``) on the binary dataset ``data_path`` by
    the one training job (``train.train_from_spec``; the DBM methods' start: ``ucd.training``),
    recorded as run ``train_{dataset}_{name}`` of experiment "ucd": per step (``on_step``) tau,
    T, corrected fraction, start energy gap and estimator norm, also to ``steps.csv``; per epoch
    an image of samples and reconstructions; model.pt keeps the method, image shape, seconds,
    steps, the seconds its epochs took over every start and the tau summary (``extras``)."""
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.figures.ucd_dbm import epoch_image
    from tapmachine.io import modelfile
    from tapmachine.io.files import write_csv
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.pipeline.tracking.records import RunRecord, Series
    from tapmachine.train import train_from_spec
    from tapmachine.ucd.dbm import DBM_METHODS
    from tapmachine.ucd.training import tau_summary

    if spec.get("method") not in DBM_METHODS:
        raise UCDDBMError(f"method {spec.get('method')!r} is not one of {list(DBM_METHODS)}")
    outdir = Path(outdir)
    steps_csv = outdir / "steps.csv"
    # Snakemake deletes a job's declared outputs (steps.csv among them) before it reruns the job,
    # so the steps run before an interruption are kept beside the checkpoints, one per line.
    steps_kept = outdir / STEPS_KEPT
    earlier = _read_kept_steps(steps_kept)
    steps: list[dict] = []
    job = {}
    record = RunRecord("ucd", f"train_{name}", series=[Series(str(steps_csv), "step")])
    with recording(manifest, record, outdir / "model.pt", system_metrics=True) as run:

        def on_start(params, tags, prepared):
            ds, x, machine = prepared.dataset, prepared.x, prepared.machine
            job.update(prepared=prepared, label=f"{ds.name}/{name}")
            job["images"] = seeded_generator(
                seed, "ucd_dbm", job["label"], "epoch_images", device=device
            )
            run_info = {"seed": seed, "n_train": int(x.shape[0]), "device": str(device)}
            record.name = f"train_{ds.name}_{name}"
            record.machine = (modelfile.model_path(outdir), Path(data_path), int(x.shape[0]))
            return run.start(
                {
                    "model": name,
                    "dataset": ds.name,
                    **run_info,
                    **spec,
                    "sizes": list(machine.sizes),
                },
                {"model": name, "dataset": ds.name, "method": tags["method"], "stage": "ucd_train"},
            )

        def on_step(step, metrics):
            metrics = {k: float(v) for k, v in metrics.items()}
            steps.append({"step": step, **metrics})
            _keep_step(steps_kept, steps[-1])
            run.log(metrics, step=step, keep=False)

        def on_epoch(epoch, metrics, m):
            ds = job["prepared"].dataset
            run.log({k: v for k, v in metrics.items() if k != "epoch"}, step=epoch)
            png = outdir / "epochs" / f"epoch_{epoch}.png"
            png.parent.mkdir(exist_ok=True)
            epoch_image(m, job["prepared"].rows, ds.image_shape, job["images"], png)
            run.log_artifact(png, "epochs")

        def extras(history):
            prepared = job["prepared"]
            # Every start's epochs: this start's clock would time only the epochs it trained.
            job["seconds"] = sum(float(row["epoch_seconds"]) for row in history)
            job["steps"] = _merged(earlier, steps)
            write_csv(job["steps"], steps_csv)
            batches = max(1, prepared.x.shape[0] // prepared.settings.batch_size)
            return {
                "image_shape": list(prepared.dataset.image_shape),
                "method": prepared.settings.method,
                "seconds": job["seconds"],
                "steps": len(history) * batches,
                "tau_hist": tau_summary(job["steps"]),
            }

        machine = train_from_spec(
            name,
            spec,
            data_path,
            outdir,
            seed=seed,
            device=device,
            on_start=on_start,
            on_epoch=on_epoch,
            on_step=on_step,
            extras=extras,
            n_train=n_train,
            progress=progress,
        )
        run.log({"train_seconds_total": job["seconds"]})
        record.artifacts.append(steps_csv)
    last = job["steps"][-1] if job["steps"] else {}
    print(f"{job['label']}: {len(job['steps'])} steps in {job['seconds']:.1f} s; last {last}")
    return machine


#: Where a DBM's training keeps its per-step rows until ``steps.csv`` is written: inside the
#: checkpoint folder, which the job does not declare as output and so a rerun leaves in place.
STEPS_KEPT = "checkpoints/steps.jsonl"


def _keep_step(path: Path, row: dict) -> None:
    """Append one step's row to the kept record (one JSON object a line, flushed at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def _read_kept_steps(path: Path) -> list[dict]:
    """The steps kept by earlier, interrupted runs ([] if none), and the file rewritten to hold
    just them. Each run appended from the step it resumed at, so a row replaces every kept row
    from its step on; a line an interruption cut short is left out."""
    from tapmachine.io.files import atomic_write

    rows: list[dict] = []
    if not path.exists():
        return rows
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
                row = {**row, "step": int(row["step"])}
            except (ValueError, KeyError, TypeError):
                continue
            _append_steps(rows, [row])
    lines = [json.dumps(row) + "\n" for row in rows]
    atomic_write(path, lambda fh: fh.writelines(lines), text=True)
    return rows


def _merged(earlier: list[dict], new: list[dict]) -> list[dict]:
    """Earlier rows before the first new step, then the new rows (a resumed run's full record)."""
    rows = list(earlier)
    _append_steps(rows, new)
    return rows


def _append_steps(rows: list[dict], new: list[dict]) -> None:
    """Append ``new`` to ``rows`` in place, each new row replacing the rows from its step on."""
    for row in new:
        while rows and rows[-1]["step"] >= row["step"]:
            rows.pop()
        rows.append(row)


def score(
    model_path,
    classifier_path,
    data_path,
    out,
    n_samples,
    n_ll,
    seed=0,
    manifest=None,
    ais_runs: int = 100,
    ais_betas: int = 1000,
    mean_field_steps: int = 30,
    device: str = "cpu",
):
    """``ucd.score.score_dbm`` of one DBM on its binary dataset, the test images in
    ``ucd.score.test_order``, written as one JSON row with the model's description and training
    summary and recorded as run ``score_{dataset}_{model}`` of experiment "ucd"."""
    from tapmachine.io.files import atomic_write
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.pipeline.tracking.recorder import publish
    from tapmachine.pipeline.tracking.records import RunRecord, source_run
    from tapmachine.ucd import dbm, fid
    from tapmachine.ucd.score import score_dbm, test_order

    for key, value, low in (
        ("ais_runs", ais_runs, 2),
        ("ais_betas", ais_betas, 4),
        ("mean_field_steps", mean_field_steps, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UCDDBMError(f"{key} must be an integer >= {low}, got {value!r}")
    model = ModelFile.load(model_path)
    blob = {"name": model.name, "dataset": model.dataset, "spec": model.spec, **model.extras}
    machine = model.machine(device=device)
    ds, x_train, x_test = _load_binary(data_path)
    x_train, x_test = x_train.to(device), x_test[test_order(x_test.shape[0], seed)].to(device)
    net, acc = fid.load_classifier(classifier_path)
    label = f"{blob['dataset']}/{blob['name']}"
    t0 = time.perf_counter()
    scores = score_dbm(
        machine,
        x_train,
        x_test,
        net,
        n_samples,
        n_ll,
        label,
        seed,
        ais_runs,
        ais_betas,
        mean_field_steps,
    )
    row = {
        "dataset": blob["dataset"],
        "model": blob["name"],
        "method": blob["method"],
        "spec": json.dumps(blob["spec"].get("ucd") or {}, sort_keys=True),
        "sizes": dbm.size_label(model.sizes),
        "classifier_fid": scores.pop("classifier_fid"),
        "classifier_accuracy": acc,
        "fid_samples": int(n_samples),
        **{k: scores.pop(k) for k in ("fid_real", "fid_floor", "fid_floor_images")},
        **{k: scores.pop(k) for k in ("tap_ll", "tap_ll_stderr")},
        "tap_ll_images": int(n_ll),
        **scores,  # the AIS numbers, then the samples' mean coupling time
        "train_seconds": blob.get("seconds", math.nan),
        **{k: v for k, v in (blob.get("tau_hist") or {}).items()},
        "seconds": time.perf_counter() - t0,
    }
    tags = {"model": blob["name"], "dataset": blob["dataset"], "stage": "ucd_score"}
    train_run = source_run(model_path)
    run_name = f"score_{blob['dataset']}_{blob['name']}"
    links = {"model_run_id": train_run} if train_run else {}
    record = RunRecord("ucd", run_name, row, tags, links=links, artifacts=[out])
    record.add_metrics({k: v for k, v in row.items() if isinstance(v, float | int)})
    atomic_write(Path(out), lambda fh: fh.write(json.dumps(row, indent=1).encode()))
    publish(manifest, record, out)
    print(json.dumps(row))
    return row


def cifar10(archive, out, manifest=None) -> None:
    """binary_cifar10 (channels thresholded at 1/2) from the user's md5-verified archive."""
    from tapmachine.io import data
    from tapmachine.pipeline.tracking.recorder import recording
    from tapmachine.pipeline.tracking.records import RunRecord
    from tapmachine.ucd import cifar

    try:
        x_train, y_train, x_test, y_test = cifar.load_cifar10(archive)
    except cifar.CifarError as exc:
        raise UCDDBMError(str(exc)) from None
    ds = data.Dataset(
        x_train=cifar.binarise(x_train),
        y_train=y_train,
        x_test=cifar.binarise(x_test),
        y_test=y_test,
        image_shape=(32, 96),
        provenance={"source": str(archive), "md5": cifar.CIFAR10_MD5, "transform": "x >= 128"},
        name="binary_cifar10",
    )
    record = RunRecord("ucd", "data_binary_cifar10", {"archive": str(archive)})
    with recording(manifest, record, out) as run:
        run.start()
        data.save_dataset(ds, out)
    print(f"wrote {out}")


def _cmd_train(args) -> None:
    import torch

    torch.set_num_threads(max(1, args.threads))
    try:
        spec = json.loads(args.spec)
    except json.JSONDecodeError as exc:
        raise UCDDBMError(f"--spec is not JSON: {exc}") from None
    train_dbm(
        args.model,
        spec,
        args.data,
        args.out_dir,
        args.seed,
        args.n_train,
        args.tracking,
        progress=True,  # the job's log shows each epoch's bar and the job's ETA
        device=args.device,
    )


def _cmd_score(args) -> None:
    import torch

    torch.set_num_threads(max(1, args.threads))
    score(
        args.model,
        args.classifier,
        args.data,
        args.out,
        args.samples,
        args.ll_images,
        args.seed,
        args.tracking,
        args.ais_runs,
        args.ais_betas,
        args.mean_field_steps,
        args.device,
    )


def _cmd_cifar10(args) -> None:
    cifar10(args.archive, args.out, args.tracking)


def register(ucd_sub) -> None:
    """Add the DBM commands under ``tapmachine ucd`` (the figures are in ``stages.figures``, the
    classifier in ``stages.ucd_classifier``)."""
    import functools

    from tapmachine.pipeline.configuration import schema_default
    from tapmachine.pipeline.stages.common import positive_int

    dbm = functools.partial(schema_default, "ucd", "dbm")
    seed, device = schema_default("seed"), schema_default("device")

    t = ucd_sub.add_parser("train-dbm", help="train one DBM (UCD-LMI, PCD or centered PCD)")
    t.add_argument("--model", required=True)
    t.add_argument("--spec", required=True, help="the model's config entry as JSON")
    t.add_argument("--data", required=True, help="binary dataset .npz")
    t.add_argument("--out-dir", required=True)
    t.add_argument("--n-train", type=positive_int, default=dbm("n_train"))
    t.add_argument("--seed", type=int, default=seed)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--device", default=device, help="cpu or cuda[:N]")
    t.add_argument("--tracking", default=None)
    t.set_defaults(func=_cmd_train)
    s = ucd_sub.add_parser("score", help="classifier FID, TAP and AIS log-likelihood of one DBM")
    s.add_argument("--model", required=True)
    s.add_argument("--classifier", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--samples", type=positive_int, default=dbm("fid_samples"))
    s.add_argument("--ll-images", type=positive_int, default=dbm("ll_images"))
    ais = functools.partial(dbm, "ais")
    s.add_argument("--ais-runs", type=positive_int, default=ais("n_runs"), help="AIS runs (>= 2)")
    s.add_argument("--ais-betas", type=positive_int, default=ais("n_betas"), help="temperatures")
    s.add_argument("--mean-field-steps", type=positive_int, default=ais("mean_field_steps"))
    s.add_argument("--seed", type=int, default=seed)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--device", default=device, help="cpu or cuda[:N]")
    s.add_argument("--tracking", default=None)
    s.set_defaults(func=_cmd_score)
    a = ucd_sub.add_parser("cifar10", help="binary CIFAR-10 from the official archive (md5 first)")
    a.add_argument("--archive", required=True, help="cifar-10-python.tar.gz")
    a.add_argument("--out", required=True)
    a.add_argument("--tracking", default=None)
    a.set_defaults(func=_cmd_cifar10)
