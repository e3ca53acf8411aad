"""Scoring from files: checkpoints and models in, one CSV row per parameter set out."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import torch

from tapmachine.io.files import write_csv
from tapmachine.io.modelfile import Checkpoint, ModelFile, checkpoint_path, model_path
from tapmachine.io.partial import KeptRows, file_digest, settings_digest
from tapmachine.io.runlog import kept_message
from tapmachine.tap_paper.likelihood.score import score_machine
from tapmachine.tap_paper.likelihood.settings import (
    PL_SITES_DRAWN_FOR,
    ScoreSettings,
    schedule_label,
)
from tapmachine.tap_paper.likelihood.tap_partition import (
    recorded_final_tap_partition,
    recorded_tap_partition,
)
from tapmachine.train.update import sampling_steps_at

__all__ = [
    "ais_check_model",
    "resolve_epochs",
    "score_checkpoints",
    "score_model",
    "tracked_metrics",
]


def _data_for(model: ModelFile, data_path, settings: ScoreSettings, dtype):
    """(images by split, TAP initialisations, AIS base data) for a model's dataset."""
    from tapmachine.io import data

    ds = data.load_dataset(data_path)
    spec = model.spec
    x_train = torch.as_tensor(ds.x_train, dtype=dtype)
    if spec.get("n_train"):
        x_train = x_train[: spec["n_train"]]  # the rows the model was trained on
    x_test = torch.as_tensor(ds.x_test, dtype=dtype)
    images = {
        "train": x_train if settings.n_train is None else x_train[: settings.n_train],
        "test": x_test if settings.n_test is None else x_test[: settings.n_test],
    }
    return images, x_train[: settings.tap_inits], x_train, ds


def _settings_columns(settings: ScoreSettings) -> dict:
    return {
        "ais_schedule": settings.schedule,
        "ais_runs": settings.ais_runs,
        "ais_description": schedule_label(settings),
        "pl_sites": settings.pl_sites,
        "pl_sites_drawn_for": PL_SITES_DRAWN_FOR,
        "tap_inits": settings.tap_inits,
    }


_TRACKED = (
    "tap_ll_train",
    "tap_ll_test",
    "tap_ll_per_unit_test",
    "ais_ll_train",
    "ais_ll_test",
    "ais_ll_test_lower",
    "ais_ll_test_upper",
    "pl_train",
    "pl_test",
    "log_z_ais",
    "log_z_ais_stderr",
    "log_z_tap",
    "log_z_exact",
)


def tracked_metrics(row: dict, prefix: str = "") -> dict:
    """The numbers of a score row worth logging, keys prefixed with ``prefix``."""
    return {f"{prefix}{k}": row[k] for k in _TRACKED if k in row and row[k] is not None}


def resolve_epochs(epochs, n_epochs: int) -> list[int]:
    """``"all"`` -> 1..n_epochs; ``"last"`` -> [n_epochs]; a list is checked against n_epochs."""
    if epochs in ("all", None):
        return list(range(1, n_epochs + 1))
    if epochs == "last":
        return [n_epochs]
    chosen = sorted({int(e) for e in epochs})
    bad = [e for e in chosen if not 1 <= e <= n_epochs]
    if bad:
        raise ValueError(f"epochs {bad} are outside 1..{n_epochs} (the model's epochs)")
    return chosen


def score_checkpoints(
    model_dir: str | os.PathLike,
    data_path: str | os.PathLike,
    out_csv: str | os.PathLike,
    settings: ScoreSettings,
    epochs="all",
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    on_start=None,
    on_row=None,
    reuse: bool = True,
) -> list[dict]:
    """Score the parameters after each epoch (the checkpoints of ``model_dir``): Fig. 12.

    Writes ``out_csv`` with one row per epoch (only once every epoch is scored). Each scored
    epoch is also kept (``io.partial.KeptRows``, under its checkpoint's bytes and these
    settings, data, seed and dtype), so that a job stopped part-way resumes (Fig. 12 at paper
    size: AIS on the full schedule for 100 epochs, 1.4 CPU-hours projected, more than a job
    sharing its cores may get before a stop): a kept epoch is used again, with the same
    numbers, while its checkpoint's file is unchanged. TAP's ln Z is
    taken from training's per-epoch evaluation when that was the same computation
    (``recorded_tap_partition``; ``reuse=False`` always solves), else solved; the row's
    ``log_z_tap_source`` (``training`` / ``solved``) says which, ``log_z_tap_note`` why not.
    ``on_start(params, tags, model)`` is called before the first epoch (``model``: the
    ModelFile), ``on_row(epoch, row)`` after each; ``tapmachine.pipeline.stages.likelihood`` passes
    callbacks that log to MLflow.
    """
    model_dir = Path(model_dir)
    blob = ModelFile.load(model_path(model_dir))
    name = blob.name
    n_epochs = blob.n_epochs
    chosen = resolve_epochs(epochs, n_epochs)
    missing = [str(checkpoint_path(model_dir, e)) for e in chosen]
    missing = [p for p in missing if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"checkpoints missing for scoring: {', '.join(missing)}")
    torch_dtype = getattr(torch, dtype)
    images, tap_init, base, ds = _data_for(blob, data_path, settings, torch_dtype)
    params = {"model": name, "epochs": chosen, **dataclasses.asdict(settings), "seed": seed}
    tags = {"model": name, "kind": "per-epoch"}
    if blob.mlflow_run_id:
        tags["model_run_id"] = str(blob.mlflow_run_id)
    if on_start is not None:
        on_start(params, tags, blob)
    signature = {k: v for k, v in params.items() if k != "epochs"}
    signature.update(
        dataset=ds.name, data=file_digest(data_path), device=device, dtype=dtype, reuse=reuse
    )
    kept = KeptRows(out_csv, settings_digest(signature))
    rows = []
    for epoch in chosen:
        t0, c0 = time.perf_counter(), time.process_time()
        key = f"epoch_{epoch}:{file_digest(checkpoint_path(model_dir, epoch))}"
        row = kept.get(key)
        if row is not None:
            print(kept_message(name, epoch), file=sys.stderr, flush=True)
            rows.append(row)
            if on_row is not None:
                on_row(epoch, row)
            continue
        ckpt = Checkpoint.load(checkpoint_path(model_dir, epoch))
        machine = ckpt.machine(device=device, dtype=torch_dtype)
        tap_info, why = recorded_tap_partition(ckpt, settings, torch_dtype) if reuse else (None, "")
        if tap_info is not None and blob.dataset != ds.name:
            tap_info, why = None, f"model trained on {blob.dataset!r}, scored on {ds.name!r}"
        row = {"model": name, "epoch": epoch, "dataset": ds.name}
        row.update(score_machine(machine, images, tap_init, base, settings, (seed, name), tap_info))
        row["log_z_tap_note"] = why if tap_info is None else ""
        row.update(_settings_columns(settings))
        row["seconds"] = time.perf_counter() - t0
        row["cpu_seconds"] = time.process_time() - c0
        rows.append(row)
        kept.keep(key, row)
        print(
            f"{name} epoch {epoch}: TAP {row.get('tap_ll_test', math.nan):.2f}, "
            f"AIS {row.get('ais_ll_test', math.nan):.2f} "
            f"(ln Z {row['log_z_ais']:.2f} +- {3 * row['log_z_ais_stderr']:.2f}), "
            f"PL {row.get('pl_test', math.nan):.2f} nats (test); "
            f"TAP ln Z {row['log_z_tap_source']}; {row['seconds']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if on_row is not None:
            on_row(epoch, row)
    write_csv(rows, out_csv)
    kept.discard()
    return rows


def score_model(
    model_file: str | os.PathLike,
    data_path: str | os.PathLike,
    out_csv: str | os.PathLike,
    settings: ScoreSettings,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    on_start=None,
    reuse: bool = True,
) -> dict:
    """Score a final model (``model.pt``), one CSV row with its training settings: the table.

    The row carries the model's method, sampling steps, hidden units, training images and epochs
    so that a table can be built from the CSVs alone. ``on_start(params, tags, model)`` is
    called before scoring (``pipeline.stages.likelihood`` opens an MLflow run there). TAP's
    ln Z comes from training's evaluation after the last epoch when that was the same solve
    (``recorded_final_tap_partition``; ``reuse=False`` always solves), as in
    ``score_checkpoints``.
    """
    blob = ModelFile.load(model_file)
    name = blob.name
    spec = blob.spec
    torch_dtype = getattr(torch, dtype)
    images, tap_init, base, ds = _data_for(blob, data_path, settings, torch_dtype)
    machine = blob.machine(device=device, dtype=torch_dtype)
    t0 = time.perf_counter()
    method = spec.get("method", "tap")
    row = {
        "model": name,
        "dataset": ds.name,
        "method": method,
        # a rising k (update.sampling_steps_at): the k of the last epoch
        "sampling_steps": sampling_steps_at(spec.get("sampling_steps", 1), blob.n_epochs)
        if method in ("cd", "pcd")
        else "",
        "hidden_units": machine.sizes[1],
        "n_train": base.shape[0],
        "epochs": blob.n_epochs,
        "batch_size": spec.get("batch_size", 100),
        "learning_rate": spec.get("learning_rate"),
        "mlflow_run_id": blob.mlflow_run_id,
    }
    row["updates"] = int(row["epochs"]) * max(1, row["n_train"] // int(row["batch_size"]))
    params = {"model": name, **dataclasses.asdict(settings), "seed": seed}
    tags = {"model": name, "kind": "final"}
    if blob.mlflow_run_id:
        tags["model_run_id"] = str(blob.mlflow_run_id)
    if on_start is not None:
        on_start(params, tags, blob)
    tap_info, why = (
        recorded_final_tap_partition(blob, settings, torch_dtype) if reuse else (None, "")
    )
    if tap_info is not None and blob.dataset != ds.name:
        tap_info, why = None, f"model trained on {blob.dataset!r}, scored on {ds.name!r}"
    row.update(
        score_machine(machine, images, tap_init, base, settings, (seed, name, "final"), tap_info)
    )
    row["log_z_tap_note"] = why if tap_info is None else ""
    row.update(_settings_columns(settings))
    row["seconds"] = time.perf_counter() - t0
    print(
        f"{name}: AIS test {row.get('ais_ll_test', math.nan):.2f} nats "
        f"[{row.get('ais_ll_test_lower', math.nan):.2f}, "
        f"{row.get('ais_ll_test_upper', math.nan):.2f}] ({row['ais_description']}), "
        f"TAP {row.get('tap_ll_test', math.nan):.2f}, PL {row.get('pl_test', math.nan):.2f}; "
        f"{row['seconds']:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    write_csv([row], out_csv)
    return row


def ais_check_model(
    model_dir: str | os.PathLike,
    data_path: str | os.PathLike,
    settings,
    epoch: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    on_row=None,
) -> list[dict]:
    """``ais_check.ais_check`` of a model's ``model.pt`` (or of its checkpoint ``epoch``) on its
    dataset: the base-rate model fitted to the rows it was trained on, every test image scored;
    each row also names the model, the epoch and the dataset."""
    from tapmachine.tap_paper.likelihood.ais_check import ais_check

    blob = ModelFile.load(model_path(model_dir))
    source = blob if epoch is None else Checkpoint.load(checkpoint_path(model_dir, epoch))
    torch_dtype = getattr(torch, dtype)
    images, _, base, ds = _data_for(blob, data_path, ScoreSettings(n_test=None), torch_dtype)
    if images["test"].shape[0] == 0:
        raise ValueError(f"{data_path} has no test images to score")
    machine = source.machine(device=device, dtype=torch_dtype)
    labels = (seed, blob.name, "ais-check")
    rows = ais_check(machine, base, images["test"], settings, labels, on_row)
    for row in rows:
        row.update(model=blob.name, epoch=epoch or blob.n_epochs, dataset=ds.name)
    return rows
