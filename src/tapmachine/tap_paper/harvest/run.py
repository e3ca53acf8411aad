"""The harvest stage: read a training checkpoint, harvest one epoch, write its files."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tapmachine.io.files import write_csv
from tapmachine.io.partial import KeptChunks, file_digest, settings_digest
from tapmachine.tap_paper.harvest.files import UNIQUE_FIELDS, save_solutions, unique_table
from tapmachine.tap_paper.harvest.settings import HarvestError, HarvestSettings
from tapmachine.tap_paper.harvest.solutions import NEAR_COPY_DISTANCE, harvest, summarise

__all__ = ["load_checkpoint", "run_harvest"]


def load_checkpoint(model_file: Path, checkpoint: Path, epoch: int):
    """(ModelFile, Checkpoint), checked to belong to the same training run."""
    from tapmachine.io.modelfile import Checkpoint, ModelFile, ModelFileError

    if not model_file.exists():
        raise HarvestError(f"{model_file} not found: train the model first")
    try:
        model = ModelFile.load(model_file)
    except ModelFileError as err:
        raise HarvestError(str(err)) from err
    name = model.name
    n_epochs = len(model.history)
    if epoch < 1 or (n_epochs and epoch > n_epochs):
        raise HarvestError(
            f"model {name}: harvest epoch {epoch} is outside its {n_epochs} trained epochs"
        )
    if not checkpoint.exists():
        raise HarvestError(
            f"{checkpoint} not found: harvesting epoch {epoch} of model {name} needs the "
            "checkpoint that training writes after that epoch (delete model.pt to retrain)"
        )
    try:
        ckpt = Checkpoint.load(checkpoint)
    except ModelFileError as err:
        raise HarvestError(str(err)) from err
    if ckpt.epoch != epoch:
        raise HarvestError(f"{checkpoint} holds epoch {ckpt.epoch}, not {epoch}")
    # The checkpoint's history must be the start of the final model's: same training run.
    final = model.history
    mine = ckpt.history
    # NaN (an epoch whose evaluation found no TAP solution) equals NaN here; None is NaN
    mine_ll, final_ll = ([h.get("tap_ll") for h in rows] for rows in (mine, final[:epoch]))
    if final and not np.array_equal(
        np.array(mine_ll, dtype=float), np.array(final_ll, dtype=float), equal_nan=True
    ):
        raise HarvestError(
            f"{checkpoint} comes from another training run than {model_file} "
            "(stale checkpoints): retrain the model"
        )
    return model, ckpt


def run_harvest(
    model_file,
    checkpoint,
    epoch: int,
    data_path,
    settings: HarvestSettings,
    out_npz,
    out_csv,
    device: str = "cpu",
    dtype: str = "float64",
    on_start=None,
    progress: bool = True,
) -> dict:
    """Harvest one epoch of one model: read, solve, write npz + CSV; the summary.

    Each chunk of starts solved is kept beside ``out_npz`` (``<out_npz>.partial/``, under the
    checkpoint's and the dataset's bytes and every setting) until both files are written, so
    that a harvest stopped part-way resumes at its first unfinished chunk (``harvest``); the
    summary's ``seconds`` are this start's.

    ``on_start(params, tags)`` is called before solving and may return a run id, stored in the
    npz as ``harvest_run_id`` (``pipeline.stages.harvest`` passes one that opens an MLflow run).
    """
    from tapmachine.io import data

    model_file, checkpoint = Path(model_file), Path(checkpoint)
    model, ckpt = load_checkpoint(model_file, checkpoint, epoch)
    name = model.name
    torch_dtype = getattr(torch, dtype)
    machine = ckpt.machine(device=device, dtype=torch_dtype)
    ds = data.load_dataset(data_path)
    if ds.x_train.shape[1] != machine.sizes[0]:
        raise HarvestError(
            f"{data_path}: images have {ds.x_train.shape[1]} pixels, model {name} has "
            f"{machine.sizes[0]} visible units"
        )
    available = ds.x_train.shape[0]
    n = available if settings.n_init is None else min(settings.n_init, available)
    if settings.n_init is not None and settings.n_init > available:
        print(
            f"harvest {name}: n_init {settings.n_init} exceeds the {available} training images "
            f"of {ds.name}; using all {available}",
            file=sys.stderr,
        )
    x = torch.as_tensor(ds.x_train[:n], dtype=torch_dtype)
    substitute = ds.provenance.get("substitute") or model.substitute or ""
    train_run_id = model.mlflow_run_id or ""
    params = {
        "model": name,
        "epoch": epoch,
        "checkpoint": str(checkpoint),
        "dataset_file": str(data_path),
        "n_init": n,
        "dtype": dtype,
        "device": device,
        **{k: v for k, v in dataclasses.asdict(settings).items() if k != "n_init"},
    }
    tags = {"model": name, "epoch": str(epoch), "dataset": ds.name}
    if train_run_id:
        tags["model_run_id"] = train_run_id
    if substitute:
        tags["substitute"] = str(substitute)
    harvest_run_id = on_start(params, tags) if on_start is not None else None
    signature = {
        **params,
        "checkpoint": file_digest(checkpoint),
        "dataset_file": file_digest(data_path),
        "chunk_size": settings.chunk_size,
    }
    kept = KeptChunks(out_npz, settings_digest(signature))
    t0 = time.perf_counter()
    arrays = harvest(machine, x, settings, progress=progress, kept=kept)
    summary = summarise(arrays)
    summary["seconds"] = time.perf_counter() - t0
    if summary["n_not_converged"]:
        print(
            f"harvest {name} epoch {epoch}: {summary['n_not_converged']} of {n} "
            f"initialisations did not converge within max_iter={settings.max_iter} "
            f"(MSE >= {settings.tol:g}); counted, excluded from every statistic",
            file=sys.stderr,
        )
    meta = {
        "init_index": np.arange(n, dtype=np.int64),
        "labels": np.asarray(ds.y_train[:n], dtype=np.int64),
        "image_shape": np.asarray(ds.image_shape, dtype=np.int64),
        "epoch": np.int64(epoch),
        "model": name,
        "dataset": ds.name,
        "substitute": str(substitute),
        "train_run_id": train_run_id,
        "harvest_run_id": harvest_run_id or "",
        "dtype": dtype,
        "summary": summary,
    }
    save_solutions(out_npz, arrays, meta)
    try:
        write_csv(unique_table({**arrays, **meta}), out_csv, UNIQUE_FIELDS)
    except BaseException:
        Path(out_npz).unlink(missing_ok=True)
        raise
    kept.discard()
    print(
        f"harvest {name} epoch {epoch}: {summary['n_unique']} unique solutions from {n} "
        f"initialisations ({summary['n_not_converged']} not converged), Helmholtz estimate "
        f"{summary['helmholtz']:.4f} +- {summary['free_energy_std']:.4f} (std), "
        f"{summary['mean_iterations']:.1f} iterations on average, closest pair of unique "
        f"solutions {summary['min_separation']:.3g} (dedup_tol {settings.dedup_tol:g}), "
        f"{summary['near_copy_fraction']:.0%} of them within {NEAR_COPY_DISTANCE:g} of another, "
        f"{summary['seconds']:.1f} s",
        file=sys.stderr,
    )
    return summary
