"""Fig. 3's curve computed exactly: the log-likelihood of the rows training's per-epoch
evaluation scores, after chosen epochs, for an RBM whose hidden layer can be enumerated.

Fig. 3 draws TAP's estimate (eq. 39 with TAP's ln Z). For its smallest model (Nh = 25) ln Z can be
had exactly by enumerating the 2^25 hidden states (``estimators.exact_log_partition``: about 100
CPU-seconds an epoch in float32 chunks in a job, whose heap is kept, ``pipeline.heap``; 330
without), so the figure can show where the estimate and the likelihood it estimates part:
second-order TAP holds for weak couplings, and training on its free energy drives Nh = 25 past
them.

The same epochs can also be scored by AIS (``ais``): with ln Z known exactly, the difference of
AIS's ln Z from it, in AIS's own standard errors, checks the estimator the likelihood table and
Fig. 12 rely on, at paper size, against an exact answer.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import torch

from tapmachine.core.estimators import ais_log_partition, exact_log_partition
from tapmachine.core.seeding import seeded_generator
from tapmachine.io.files import write_csv
from tapmachine.io.modelfile import Checkpoint, ModelFile, checkpoint_path, model_path
from tapmachine.io.runlog import kept_message
from tapmachine.tap_paper.likelihood.files import resolve_epochs
from tapmachine.tap_paper.likelihood.settings import MAX_CURVE_UNITS, ais_schedule

__all__ = [
    "MAX_CURVE_UNITS",
    "exact_log_likelihood_per_unit",
    "ais_against_exact",
    "exact_curve",
    "partial_path",
]


def exact_log_likelihood_per_unit(machine, x: torch.Tensor) -> tuple[float, float, float]:
    """(mean, standard error over rows) of ln P(x) / (Nv + Nh), Fig. 3's normalisation, and ln Z.

    ln P(x) = -F_vis(x) - ln Z with ln Z by enumeration (float32 chunks, float64 sum)."""
    log_z = float(
        exact_log_partition(machine, max_units=MAX_CURVE_UNITS, chunk_dtype=torch.float32)
    )
    ll = (-machine.free_energy_visible(x).double() - log_z) / sum(machine.sizes)
    se = float(ll.std() / math.sqrt(ll.numel())) if ll.numel() > 1 else 0.0
    return float(ll.mean()), se, log_z


#: The columns ``ais_against_exact`` adds to an epoch's row.
AIS_COLUMNS = (
    "log_z_ais",
    "log_z_ais_stderr",
    "ais_z",
    "ais_ll_minus_exact",
    "ais_n_betas",
    "ais_cpu_seconds",
)


def ais_against_exact(
    machine, log_z_exact: float, base_data: torch.Tensor, ais: dict, generator: torch.Generator
) -> dict:
    """AIS's ln Z of ``machine`` (App. F; ``ais``: n_runs, schedule, n_betas; the base-rate
    model fitted to ``base_data``) beside the exact one: ``ais_z`` is (ln Z_AIS - ln Z) over
    AIS's standard error (delta method over the runs), and ``ais_ll_minus_exact`` the same
    difference in the per-unit log-likelihood, -(ln Z_AIS - ln Z) / (Nv + Nh)."""
    result = ais_log_partition(
        machine,
        data=base_data,
        n_runs=ais["n_runs"],
        betas=ais_schedule(ais["schedule"], ais["n_betas"]),
        generator=generator,
    )
    gap = result.log_z - log_z_exact
    return {
        "log_z_ais": result.log_z,
        "log_z_ais_stderr": result.stderr,
        "ais_z": gap / result.stderr if result.stderr > 0 else math.nan,
        "ais_ll_minus_exact": -gap / sum(machine.sizes),
        "ais_n_betas": result.n_betas,
    }


def exact_curve(
    model_dir: str | os.PathLike,
    data_path: str | os.PathLike,
    out_csv: str | os.PathLike,
    epochs="all",
    device: str = "cpu",
    on_row=None,
    ais: dict | None = None,
    seed: int = 0,
    while_training: bool = False,
    n_train: int | None = None,
) -> list[dict]:
    """One row per chosen epoch: the exact log-likelihood per unit of the training rows that
    training's evaluation scored (the first ``eval_samples`` of the rows it trained on), beside
    the TAP value it recorded for that epoch (``tap_ll``, NaN if it recorded none).

    Computed in float64 (the machine) with float32 enumeration chunks. Writes ``out_csv`` once
    every epoch is done; ``on_row(epoch, row)`` is called after each. Each finished epoch is
    also kept in ``partial_path(out_csv)`` with its checkpoint's fingerprint, so that a job
    stopped part-way (at a session's end, say) resumes: a kept row is used
    again when its checkpoint is unchanged (only its AIS columns computed if ``ais`` asks for
    them and it has none), and the file goes once ``out_csv`` is written. With ``ais`` (a
    likelihood ``ais`` section) each epoch is also scored by AIS (``ais_against_exact``;
    generator from ``seed``, the model and the epoch), its base-rate model fitted to the rows
    the model trained on. ``seconds`` is the wall time an epoch took in the start that finished
    it (``cpu_seconds`` and ``ais_cpu_seconds`` its CPU time), and the log names each epoch kept
    whole from an earlier start (``runlog.kept_message``), so that the job's time counts every
    start.

    ``while_training``: the model is still training (no ``model.pt`` yet; ``n_train``, its
    training rows, None for all): the chosen epochs whose checkpoints exist are computed and
    kept in the partial file only, for the job to use once training ends, and ``out_csv`` is not
    written. A kept row is used again only for a model trained on as many rows
    (``rows_trained``), so a wrong ``n_train`` here costs a recomputation, not a wrong curve.
    """
    from tapmachine.io.data import load_dataset

    model_dir = Path(model_dir)
    if while_training and not model_path(model_dir).exists():
        name, n_epochs = _training_under_way(model_dir)
    else:
        blob = ModelFile.load(model_path(model_dir))
        name, n_epochs, n_train = blob.name, blob.n_epochs, blob.spec.get("n_train")
    chosen = resolve_epochs(epochs, n_epochs)
    missing = [p for e in chosen if not (p := checkpoint_path(model_dir, e)).exists()]
    if while_training:
        chosen = [e for e in chosen if checkpoint_path(model_dir, e).exists()]
    elif missing:
        raise FileNotFoundError(f"checkpoints missing: {', '.join(map(str, missing))}")
    ds = load_dataset(data_path)
    rows_trained = ds.x_train[:n_train] if n_train else ds.x_train
    partial = partial_path(out_csv)
    kept = _kept_rows(partial, len(rows_trained))
    rows, kept_now = [], []
    for epoch in chosen:
        t0, w0 = time.process_time(), time.perf_counter()
        ckpt = Checkpoint.load(checkpoint_path(model_dir, epoch))
        row = kept.get((epoch, ckpt.fingerprint))
        whole = row is not None and (ais is None or "log_z_ais" in row)
        if whole:
            print(kept_message(name, epoch), file=sys.stderr, flush=True)
        if row is None:
            row = _exact_row(name, epoch, ckpt, rows_trained, device, t0)
        if ais is not None and "log_z_ais" not in row:
            t1 = time.process_time()
            machine = ckpt.machine(device=device, dtype=torch.float32)
            base = torch.as_tensor(rows_trained, dtype=torch.float32, device=machine.device)
            g = seeded_generator(seed, name, f"epoch_{epoch}", "exact_ais")
            row.update(ais_against_exact(machine, row["log_z_exact"], base, ais, g))
            row["ais_cpu_seconds"] = time.process_time() - t1
        if not whole:
            row["seconds"] = time.perf_counter() - w0  # the wall time of this start's part
        rows.append(row)
        kept_now.append({**row, "fingerprint": ckpt.fingerprint})
        write_csv(kept_now, partial)
        if on_row is not None:
            on_row(epoch, row)
    if while_training:
        return rows
    write_csv(rows, out_csv)
    partial.unlink(missing_ok=True)
    return rows


def _training_under_way(model_dir: Path) -> tuple[str, int]:
    """(name, epochs to train) of a model still training, from its latest checkpoint."""
    from tapmachine.io.modelfile import checkpoint_dir, latest_checkpoint

    latest = latest_checkpoint(checkpoint_dir(model_dir))
    if latest is None:
        raise FileNotFoundError(f"{model_dir} has no model.pt and no checkpoint yet")
    return model_dir.name, int(Checkpoint.load(latest).settings["epochs"])


def _exact_row(name: str, epoch: int, ckpt: Checkpoint, rows_trained, device, t0: float) -> dict:
    """One epoch's row of ``exact_curve``, computed (and said on stderr)."""
    machine = ckpt.machine(device=device, dtype=torch.float64)
    x = torch.as_tensor(rows_trained[: ckpt.settings["eval_samples"]], dtype=torch.float64)
    mean, se, log_z = exact_log_likelihood_per_unit(machine, x.to(machine.device))
    recorded = next((r for r in ckpt.history if r["epoch"] == epoch), {})
    row = {
        "model": name,
        "epoch": epoch,
        "rows_trained": len(rows_trained),
        "exact_ll": mean,
        "exact_ll_stderr": se,
        "log_z_exact": log_z,
        "tap_ll": recorded.get("tap_ll", math.nan),
        "log_z_tap": recorded.get("log_z_tap", math.nan),
        "rows": x.shape[0],
        "cpu_seconds": time.process_time() - t0,
    }
    print(
        f"{name} epoch {epoch}: exact {mean:.5f}, TAP {row['tap_ll']:.5f} per unit "
        f"({x.shape[0]} rows; {row['cpu_seconds']:.0f} CPU s)",
        file=sys.stderr,
        flush=True,
    )
    return row


def partial_path(out_csv: str | os.PathLike) -> Path:
    """Where ``exact_curve`` keeps the epochs it has finished until ``out_csv`` is written."""
    out_csv = Path(out_csv)
    return out_csv.with_name(out_csv.name + ".partial.csv")


def _kept_rows(partial: Path, rows_trained: int) -> dict:
    """The rows of a partial file by (epoch, checkpoint fingerprint), as ``exact_curve`` makes
    them, of a model trained on ``rows_trained`` rows (a row that does not record them is
    taken); none when there is no such file."""
    if not partial.exists():
        return {}
    import pandas as pd

    kept = {}
    for record in pd.read_csv(partial).to_dict("records"):
        fingerprint = record.pop("fingerprint")
        # an epoch kept without AIS has NaN there (its columns came from other epochs' rows)
        record = {k: v for k, v in record.items() if not (k in AIS_COLUMNS and math.isnan(v))}
        record["epoch"], record["rows"] = int(record["epoch"]), int(record["rows"])
        trained_on = record.get("rows_trained", math.nan)
        if not (isinstance(trained_on, float) and math.isnan(trained_on)):
            if int(trained_on) != rows_trained:
                continue
            record["rows_trained"] = int(trained_on)
        kept[(record["epoch"], fingerprint)] = record
    return kept
