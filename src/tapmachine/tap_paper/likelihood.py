"""Likelihood of a trained RBM: TAP, AIS, pseudo-likelihood and exact (App. F, Fig. 12).

One set of parameters (a ``model.pt`` or a per-epoch checkpoint) is scored on training and/or
test images by

- the TAP log-likelihood (eq. 39): ln P(x) ~ -F_vis(x) + <F_TAP>, the mean TAP free energy of the
  unique converged solutions reached from ``tap_inits`` training images (as in Fig. 3 and the
  training loop's own evaluation), so that -<F_TAP> is TAP's estimate of ln Z;
- AIS (``estimators.ais_log_partition``; base-rate model fitted to the model's training rows):
  ln P(x) = -F_vis(x) - ln Z_AIS, with ln Z_AIS +- 3 stderr (delta method over the runs) giving
  the band [mean(-F) - upper, mean(-F) - lower];
- the pseudo-likelihood (Besag 1975), stochastic as in App. F: ``pl_sites`` of the Nv sites per
  block of ``pl_rows`` images (a fresh random subset per block), scaled by Nv / pl_sites, so it
  estimates sum_{i=1}^{Nv} ln P(x_i | x_-i) in nats per image;
- the exact log-likelihood, when the machine's smaller binary layer can be enumerated.

Every value is in nats per image (mean over the images scored); the TAP value is also given
divided by Nv + Nh (the normalisation of Fig. 3). Library functions take tensors; the file-level
functions (``score_checkpoints``, ``score_model``) read models and datasets, write one CSV row per
parameter set and mirror the numbers to MLflow.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core import estimators, tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.io.files import write_csv
from tapmachine.io.modelfile import Checkpoint, ModelFile, checkpoint_path, model_path

__all__ = [
    "ScoreSettings",
    "ais_schedule",
    "checkpoint_path",
    "evaluation_differs",
    "pseudo_log_likelihood_blocks",
    "recorded_final_tap_partition",
    "recorded_tap_partition",
    "score_checkpoints",
    "score_machine",
    "score_model",
    "schedule_label",
    "tap_log_partition",
]

SPLITS = ("train", "test")
FULL_SALAKHUTDINOV = 14501


@dataclasses.dataclass(frozen=True)
class ScoreSettings:
    """How one parameter set is scored (a config ``likelihood.fig12`` / ``likelihood.table``).

    ``n_train`` / ``n_test``: first images of each split scored (0 skips the split, None = all).
    ``schedule``: ``salakhutdinov`` (Salakhutdinov & Murray 2008; thinned evenly in index to
    ``n_betas`` values when given, which keeps its density profile) or ``linear`` (``n_betas``
    equally spaced values). ``tap_inits``: training images from which TAP is run to convergence.
    """

    ais_runs: int = 100
    schedule: str = "salakhutdinov"
    n_betas: int | None = None
    pl_sites: int = 100
    pl_rows: int = 100
    n_train: int | None = 1000
    n_test: int | None = 1000
    tap_inits: int = 500
    damping: float = 0.5
    tol: float = 1e-8
    max_iter: int = 500
    retry_damping: float | None = 0.95
    dedup_tol: float = 1e-2
    solver: str = "damped"

    @classmethod
    def from_config(cls, section: dict, model_spec: dict | None = None) -> ScoreSettings:
        """From a validated config section, with the TAP settings of the model's own entry."""
        ais = section.get("ais", {})
        values = {
            "ais_runs": ais.get("n_runs", cls.ais_runs),
            "schedule": ais.get("schedule", cls.schedule),
            "n_betas": ais.get("n_betas", cls.n_betas),
            "pl_sites": section.get("pl_sites", cls.pl_sites),
            "n_train": section.get("n_train", cls.n_train),
            "n_test": section.get("n_test", cls.n_test),
            "tap_inits": section.get("tap_inits", cls.tap_inits),
        }
        tap_spec = (model_spec or {}).get("tap", {})
        for key in ("damping", "tol", "max_iter", "retry_damping", "dedup_tol", "solver"):
            if key in tap_spec:
                values[key] = tap_spec[key]
        return cls(**values)


def ais_schedule(kind: str = "salakhutdinov", n_betas: int | None = None) -> Tensor:
    """Inverse temperatures for AIS (float64, 0 to 1, both ends included).

    ``salakhutdinov``: the 14,501 values of Salakhutdinov & Murray (2008), or, with ``n_betas``,
    that many of them taken evenly by index (so the 1e-3 / 1e-4 / 1e-5 regions keep their
    shares: about 3.4%, 27.6% and 69% of the values). ``linear``: ``n_betas`` equal steps.
    """
    if kind == "salakhutdinov":
        full = estimators.salakhutdinov_schedule()
        if n_betas is None or n_betas >= full.numel():
            return full
        if n_betas < 2:
            raise ValueError("an AIS schedule needs at least 2 inverse temperatures")
        idx = torch.linspace(0, full.numel() - 1, n_betas, dtype=torch.float64).round().long()
        return full[torch.unique(idx)]
    if kind == "linear":
        if n_betas is None or n_betas < 2:
            raise ValueError("a linear AIS schedule needs n_betas >= 2")
        return estimators.linear_schedule(n_betas)
    raise ValueError(f"unknown AIS schedule {kind!r} (salakhutdinov or linear)")


def schedule_label(settings: ScoreSettings) -> str:
    """A one-line description of the AIS settings, for CSVs and figure captions."""
    n = ais_schedule(settings.schedule, settings.n_betas).numel()
    if settings.schedule == "salakhutdinov":
        kind = "full Salakhutdinov" if n == FULL_SALAKHUTDINOV else "Salakhutdinov, thinned"
    else:
        kind = "linear"
    return f"{kind} schedule, {n} betas, {settings.ais_runs} runs"


def tap_log_partition(
    machine: BoltzmannMachine, x_init: Tensor, settings: ScoreSettings
) -> tuple[tap.TAPState, dict]:
    """TAP solutions from the rows of ``x_init`` and TAP's estimate of ln Z.

    Returns the unique converged solutions and ``{"log_z_tap": -<F>, "n_unique", "n_converged",
    "mean_iterations"}``, with <F> the mean TAP free energy (eq. 36) over the unique solutions
    (``tap.unique`` at ``dedup_tol``), the estimate eq. 39 uses; NaN (no solutions) when no
    row converges, also not in the second pass at ``retry_damping``.
    """
    states = tap.solve_with_retry(
        machine,
        x_init,
        damping=settings.damping,
        tol=settings.tol,
        max_iter=settings.max_iter,
        retry_damping=settings.retry_damping,
        solver=settings.solver,
    )
    reps, _, _ = tap.unique(states, settings.dedup_tol)
    unique = states.select(reps)
    info = {
        # NaN when no row converges (as training records it): that epoch has no TAP estimate
        "log_z_tap": float(-tap.free_energy(machine, unique).double().mean())
        if reps.numel()
        else math.nan,
        "n_unique": int(reps.numel()),
        "n_converged": int(states.converged.sum()),
        "mean_iterations": float(states.iterations.float().mean()),
    }
    return unique, info


#: The TAP numbers of a score row that come from one solve (or from training's record of it).
TAP_INFO_KEYS = ("log_z_tap", "n_unique", "n_converged", "mean_iterations")

#: Checkpoint ``settings`` keys (``training.TrainSettings``) that must equal the score settings'.
_SAME_TAP = ("damping", "tol", "max_iter", "dedup_tol")
#: Checkpoint settings written before the key existed did the run without its value here.
_ABSENT_MEANS = {"retry_damping": None, "solver": "damped"}


def evaluation_differs(trained: dict, settings: ScoreSettings) -> str:
    """Why training's per-epoch TAP evaluation (``trained``: ``TrainSettings`` as a dict) is not
    the solve scoring would do at ``settings``; "" when it is (see ``recorded_tap_partition``)."""
    if not trained:
        return "checkpoint has no training settings"
    if not trained.get("evaluate", True):
        return "training did not evaluate TAP"
    if trained.get("eval_samples") != settings.tap_inits:
        return f"eval_samples {trained.get('eval_samples')} != tap_inits {settings.tap_inits}"
    for key in _SAME_TAP:
        if key not in trained or trained[key] != getattr(settings, key):
            return f"training's {key} {trained.get(key)} != scoring's {getattr(settings, key)}"
    for key, absent in _ABSENT_MEANS.items():
        if trained.get(key, absent) != getattr(settings, key):
            ours = getattr(settings, key)
            return f"training's {key} {trained.get(key, absent)} != scoring's {ours}"
    return ""


def recorded_tap_partition(
    ckpt: Checkpoint, settings: ScoreSettings, dtype: torch.dtype
) -> tuple[dict | None, str]:
    """TAP's ln Z as training's per-epoch evaluation recorded it, if it is what scoring would get.

    Training (``training.evaluate_tap_log_likelihood``) solves TAP from the first
    ``eval_samples`` training rows after every epoch and records ``log_z_tap`` (minus the mean
    free energy of the unique converged solutions) with the solution counts in the checkpoint's
    history. Scoring solves from the first ``tap_inits`` of the same rows (``_data_for``: the
    model's ``n_train`` rows of its dataset), so the record is reused only when the evaluation
    was the same computation: ``eval_samples == tap_inits``, equal ``damping``, ``tol``,
    ``max_iter``, ``retry_damping``, second-pass tolerance (``tap.retry_tolerance``, recorded in
    the row) and ``dedup_tol``, and the checkpoint's parameters stored in ``dtype``.
    Returns ``(info, "training")`` or ``(None, why not)``; checkpoints written before training
    recorded ``log_z_tap`` (or without evaluation) give None.
    """
    return _recorded(ckpt.settings, ckpt.history, ckpt.epoch, ckpt.machine_state, settings, dtype)


def recorded_final_tap_partition(
    model: ModelFile, settings: ScoreSettings, dtype: torch.dtype
) -> tuple[dict | None, str]:
    """``recorded_tap_partition`` for a final model (``model.pt``): training's evaluation after
    its last epoch, with the training settings rebuilt from the model's config entry."""
    from tapmachine.train import TrainingError, TrainSettings

    try:
        trained = dataclasses.asdict(TrainSettings.from_spec(model.spec)) if model.spec else {}
    except (TrainingError, TypeError, ValueError) as err:
        return None, f"training settings not readable from the model's spec ({err})"
    return _recorded(trained, model.history, model.n_epochs, model.machine_state, settings, dtype)


def _recorded(trained, history, epoch, machine_state, settings, dtype):
    from tapmachine.train import evaluation_signature, expected_signature

    why = evaluation_differs(trained, settings)
    if why:
        return None, why
    row = next((r for r in history if r.get("epoch") == epoch), None)
    if row is None or any(k not in row for k in TAP_INFO_KEYS):
        return None, f"epoch {epoch} has no recorded log_z_tap"
    (_, recorded), (_, ours) = evaluation_signature(trained, row), expected_signature(settings)
    if recorded != ours:
        return None, f"training's second pass used tol {recorded}, scoring's uses {ours}"
    stored = machine_state["weights"][0].dtype
    if stored != dtype:
        return None, f"stored dtype {stored} != scoring dtype {dtype}"
    return {k: row[k] for k in TAP_INFO_KEYS}, "training"


@torch.no_grad()
def pseudo_log_likelihood_blocks(
    machine: BoltzmannMachine,
    x: Tensor,
    n_sites: int | None,
    generator: torch.Generator | None,
    rows: int = 100,
) -> Tensor:
    """Stochastic pseudo-likelihood of every row, a fresh site subset per block of ``rows`` rows.

    Each block gets ``n_sites`` distinct random sites (``estimators.pseudo_log_likelihood``,
    scaled by Nv / n_sites): an unbiased estimate of the full Nv-site sum, in nats per row, whose
    mean over many blocks does not hinge on one draw of sites. ``n_sites=None`` is exact.
    """
    parts = [
        estimators.pseudo_log_likelihood(machine, x[i : i + rows], n_sites, generator)
        for i in range(0, x.shape[0], rows)
    ]
    return torch.cat(parts) if parts else x.new_zeros(0)


def _enumerable(machine: BoltzmannMachine) -> bool:
    if machine.n_layers != 2:
        return False
    return any(
        isinstance(p, Bernoulli | Spin) and n <= estimators.MAX_ENUMERATED_UNITS
        for p, n in zip(machine.priors, machine.sizes, strict=True)
    )


def _mean_stderr(v: Tensor) -> tuple[float, float]:
    v = v.double()
    if v.numel() == 0:
        return math.nan, math.nan
    se = float(v.std(correction=1) / math.sqrt(v.numel())) if v.numel() > 1 else 0.0
    return float(v.mean()), se


@torch.no_grad()
def score_machine(
    machine: BoltzmannMachine,
    images: dict[str, Tensor],
    tap_init: Tensor,
    base_data: Tensor,
    settings: ScoreSettings,
    seed_labels: tuple = (0, "score"),
    tap_info: dict | None = None,
) -> dict:
    """Every likelihood estimate for one parameter set; a flat dict of numbers (nats per image).

    ``images``: split name -> rows to score; ``tap_init``: rows TAP starts from; ``base_data``:
    rows the AIS base-rate model is fitted to (the training data). Random streams (AIS runs, PL
    sites) come from ``training.seeded_generator(*seed_labels, stage)``: giving every epoch of a
    model the same labels makes their AIS and PL noise common (differences between epochs are
    then less noisy than the values).

    ``tap_info``: TAP's ln Z and solution counts already computed from ``tap_init`` at these
    settings (``recorded_tap_partition``: training's per-epoch evaluation); TAP is then not solved
    again. The TAP log-likelihood of an image needs only ln Z (eq. 39: data term - ln Z), so
    both ways give the same numbers; ``log_z_tap_source`` says which was used.
    """
    from tapmachine.core.seeding import seeded_generator

    if machine.n_layers != 2:
        raise ValueError("likelihood scoring needs an RBM (one hidden layer)")
    dtype, device = machine.dtype, machine.device
    n_units = sum(machine.sizes)
    out: dict = {}

    t0 = time.perf_counter()
    if tap_info is None:
        _, info = tap_log_partition(machine, tap_init.to(device, dtype), settings)
        info["log_z_tap_source"] = "solved"
    else:
        info = {k: tap_info[k] for k in TAP_INFO_KEYS}
        info["log_z_tap_source"] = str(tap_info.get("log_z_tap_source", "training"))
    out.update(info)
    out["tap_seconds"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    betas = ais_schedule(settings.schedule, settings.n_betas)
    ais = estimators.ais_log_partition(
        machine,
        data=base_data,
        n_runs=settings.ais_runs,
        betas=betas,
        generator=seeded_generator(*seed_labels, "ais"),
    )
    out.update(
        log_z_ais=ais.log_z,
        log_z_ais_stderr=ais.stderr,
        log_z_ais_lower=ais.lower,
        log_z_ais_upper=ais.upper,
        log_z_base=ais.log_z_base,
        ais_n_betas=ais.n_betas,
    )
    out["ais_seconds"] = time.perf_counter() - t0

    log_z_exact = None
    if _enumerable(machine):
        log_z_exact = float(estimators.exact_log_partition(machine))
    out["log_z_exact"] = log_z_exact if log_z_exact is not None else math.nan

    t0 = time.perf_counter()
    pl_gen = seeded_generator(*seed_labels, "pl")
    for split in SPLITS:
        x = images.get(split)
        if x is None or x.shape[0] == 0:
            continue
        x = x.to(device, dtype)
        neg_f = -machine.free_energy_visible(x).double()
        # eq. 39 with TAP's ln Z: what tap.log_likelihood gives with the unique solutions (which
        # adds their mean free energy), in float64 so a recorded ln Z reproduces it exactly.
        tap_ll = tap.data_log_term(machine, x).double() - out["log_z_tap"]
        m, se = _mean_stderr(tap_ll)
        out[f"tap_ll_{split}"] = m
        out[f"tap_ll_{split}_stderr"] = se
        out[f"tap_ll_per_unit_{split}"] = m / n_units
        m, se = _mean_stderr(neg_f)
        out[f"ais_ll_{split}"] = m - ais.log_z
        out[f"ais_ll_{split}_lower"] = m - ais.upper
        out[f"ais_ll_{split}_upper"] = m - ais.lower
        out[f"ais_ll_{split}_stderr"] = se  # over images, not AIS (that is the band)
        out[f"exact_ll_{split}"] = m - log_z_exact if log_z_exact is not None else math.nan
        if isinstance(machine.visible, Bernoulli | Spin):
            pl = pseudo_log_likelihood_blocks(
                machine, x, settings.pl_sites, pl_gen, rows=settings.pl_rows
            )
            out[f"pl_{split}"], out[f"pl_{split}_stderr"] = _mean_stderr(pl)
        else:
            out[f"pl_{split}"] = out[f"pl_{split}_stderr"] = math.nan
        out[f"n_{split}_images"] = int(x.shape[0])
    out["pl_seconds"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------------------------
# Files: checkpoints and models in, one CSV row per parameter set out
# ----------------------------------------------------------------------------------------------


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
        "pl_rows_per_site_draw": settings.pl_rows,
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

    Writes ``out_csv`` with one row per epoch (only once every epoch is scored). TAP's ln Z is
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
    rows = []
    for epoch in chosen:
        t0 = time.perf_counter()
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
        rows.append(row)
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
        "sampling_steps": spec.get("sampling_steps", 1) if method in ("cd", "pcd") else "",
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
