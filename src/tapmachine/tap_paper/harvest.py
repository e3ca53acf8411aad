"""Harvest of TAP solutions over training (first paper, Sec. VII.2-VII.3, Figs. 5-7).

For a machine saved after a given epoch, TAP (Alg. 1) is started from the first ``n_init``
training images (eqs. 37-38: a_v = x, c_v = 0, hidden layers at their prior means) and iterated
until the mean squared step of the magnetisations falls below ``tol`` (the paper: 1e-8), or
``max_iter`` iterations. Converged solutions are grouped into unique solutions by
``tap.unique`` (max-abs distance of all layers' magnetisations within ``dedup_tol``); every
initialisation maps to its unique solution, or to -1 if it did not converge. Non-converged rows
are counted and reported and never used: their magnetisations, variances and free energies are
stored as NaN.

The solutions of one epoch are written to one ``.npz`` file (``save_solutions``; keys below) and
one small CSV of the unique solutions. ``run_harvest`` is the stage the workflow runs: it reads a
training checkpoint, harvests, writes both files atomically and logs to MLflow (a run in the
"harvest" experiment, plus per-epoch metrics on the model's training run).

Keys of the ``.npz`` (K initialisations, G unique solutions, Nv visible, Nh hidden units of all
hidden layers side by side):

    a_visible, c_visible (K, Nv); a_hidden, c_hidden (K, Nh)   converged a and c (float32),
                                 NaN where not converged
    free_energy (K,)             TAP free energy F (``tap.free_energy``), NaN if not converged
    converged (K,) bool; iterations (K,) int
    inverse (K,) int             unique solution of each initialisation, -1 if not converged
    representatives (G,) int     initialisation whose solution represents each unique solution
    multiplicity (G,) int        initialisations mapped to each unique solution
    unique_free_energy (G,)      F of each unique solution (its representative's)
    nearest_separation (G,)      max-abs distance of each unique solution to its nearest other
                                 (``separation_stats``: near copies split by the tolerance)
    init_index (K,) int          row of the dataset's training split each initialisation is
    labels (K,) int              label of each initialisation
    layer_sizes, image_shape     unit counts per layer; (H, W) of the visible layer
    dedup_tol, tol, max_iter, damping, retry_damping   the settings that produced the file
                                 (retry_damping NaN: no second pass)
    merge_rule, solver, polish_solver, polish_tol      merging and solving (polish_tol NaN: not
                                 polished; ``HarvestSettings``)
    polished (K,) bool; polish_iterations (K,) int     rows brought to polish_tol, and how many
                                 iterations that took
    epoch, model, dataset, substitute, train_run_id, harvest_run_id, dtype   provenance
    summary                      JSON of ``summarise`` (counts, Helmholtz estimate, spread, ...)
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.files import atomic_write, write_csv

__all__ = [
    "HarvestError",
    "HarvestSettings",
    "harvest",
    "summarise",
    "save_solutions",
    "load_solutions",
    "unique_table",
    "run_harvest",
]


class HarvestError(Exception):
    """The harvest cannot run (missing or inconsistent checkpoint, bad settings)."""


@dataclasses.dataclass(frozen=True)
class HarvestSettings:
    """Settings of one harvest (a config ``harvest.<model>`` entry, validated).

    ``n_init=None`` uses every training image. ``chunk_size`` only bounds memory: rows do not
    interact, so the solutions do not depend on it. Rows not converged within ``max_iter`` get a
    second pass at ``retry_damping`` (``tap.solve_with_retry``; None: none). ``solver`` runs both
    passes (``tap.SOLVERS``; Alg. 1's ``damped`` keeps Figs. 5-7's solutions the attractors of
    the data starts under Alg. 1's dynamics, which another solver need not reach).

    Polishing (``polish``): converged rows are iterated on from where they stopped, by
    ``polish_solver``, to ``polish_tol`` (None: not polished) before they are merged. A row
    stopped at the paper's tol 1e-8 near marginal stability lies up to 0.02-0.1 from its fixed
    point, farther than the merge tolerance, so one fixed point counted as several (the paper
    run's bmnist_h100 at epoch 40: 2,287 "unique" solutions at tol 1e-8, 623 polished to
    1e-12). Polishing starts inside the basin the first pass found, so it moves no start to
    another solution; rows it does not converge stay as the first pass left them (``polished``
    False).

    Merging (``merge_rule``, tolerance ``dedup_tol``): ``magnetisations`` groups converged rows
    whose means (all layers) agree within ``dedup_tol`` in max-abs distance (``tap.unique``);
    ``free_energy`` groups rows whose TAP free energies lie within ``dedup_tol`` of their
    group's lowest (``tap.unique_free_energy``; about 1e-3 suits it). The paper states no rule.
    """

    n_init: int | None = 10000
    dedup_tol: float = 0.01
    merge_rule: str = "magnetisations"
    solver: str = "damped"
    polish_tol: float | None = 1e-12
    polish_solver: str = "anderson"
    tol: float = 1e-12
    max_iter: int = 2000
    damping: float = 0.5
    retry_damping: float | None = 0.95
    chunk_size: int = 2000

    def __post_init__(self):
        if self.n_init is not None and self.n_init < 1:
            raise HarvestError(f"n_init must be >= 1 or None, got {self.n_init}")
        if not self.dedup_tol > 0 or not self.tol > 0:
            raise HarvestError(f"dedup_tol and tol must be > 0, got {self.dedup_tol}, {self.tol}")
        if self.max_iter < 1 or self.chunk_size < 1:
            raise HarvestError("max_iter and chunk_size must be >= 1")
        if self.merge_rule not in MERGE_RULES:
            raise HarvestError(f"merge_rule must be one of {MERGE_RULES}, got {self.merge_rule!r}")
        for name in ("solver", "polish_solver"):
            if getattr(self, name) not in tap.SOLVERS:
                raise HarvestError(f"{name} must be one of {tap.SOLVERS}")
        if self.polish_tol is not None and not self.polish_tol > 0:
            raise HarvestError(f"polish_tol must be > 0 or None, got {self.polish_tol}")
        for name in ("damping", "retry_damping"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise HarvestError(f"{name} must be in [0, 1), got {value}")


#: Rules by which converged solutions are merged into unique ones (``HarvestSettings``).
MERGE_RULES = ("magnetisations", "free_energy")


def polish(machine: BoltzmannMachine, state: tap.TAPState, settings: HarvestSettings):
    """The converged rows of ``state`` iterated on to ``settings.polish_tol`` (see
    ``HarvestSettings``); returns (state, polished mask, polishing iterations per row)."""
    K = state.n_rows
    polished = state.converged.clone()
    extra = torch.zeros(K, dtype=torch.long, device=state.converged.device)
    if settings.polish_tol is None or settings.polish_tol >= settings.tol:
        return state, polished, extra
    rows = torch.nonzero(state.converged, as_tuple=True)[0]
    for start in range(0, rows.numel(), settings.chunk_size):
        idx = rows[start : start + settings.chunk_size]
        sub = state.select(idx)
        again = tap.solve(
            machine,
            sub.a[0],
            c_visible=sub.c[0],
            a_hidden=sub.a[1:],
            c_hidden=sub.c[1:],
            damping=settings.damping,
            tol=settings.polish_tol,
            max_iter=settings.max_iter,
            solver=settings.polish_solver,
        )
        done = idx[again.converged]
        for part in ("a", "c", "A", "B"):
            for merged, new in zip(getattr(state, part), getattr(again, part), strict=True):
                merged[done] = new[again.converged]
        polished[idx] = again.converged
        extra[idx] = again.iterations
    return state, polished, extra


def merge(state: tap.TAPState, free_energy: torch.Tensor, settings: HarvestSettings):
    """(representatives, inverse, counts) of the converged rows by ``settings.merge_rule``."""
    if settings.merge_rule == "free_energy":
        return tap.unique_free_energy(free_energy, state.converged, settings.dedup_tol)
    return tap.unique(state, settings.dedup_tol)


#: Max-abs distance (magnetisations) below which a unique solution counts as a near copy of
#: another: ten times the default ``dedup_tol``. Distinct TAP fixed points differ by O(1) in some
#: unit (on the paper run's bmnist_h100 at epoch 40, harvested at tol 1e-12: 95% of unique
#: solutions lie 0.57 or more from their nearest other); copies of one fixed point that the
#: stopping tolerance left short of it, and deduplication kept apart, lie just above
#: ``dedup_tol`` (the same model at the paper's tol 1e-8: median 0.021, 2,287 "unique"
#: solutions against 623 at 1e-12).
NEAR_COPY_DISTANCE = 0.1


def nearest_separation(X: torch.Tensor, chunk: int = 500) -> torch.Tensor:
    """Max-abs distance from each row of ``X`` to its nearest other row (inf for a lone row),
    in blocks of ``chunk`` rows (memory chunk x len(X))."""
    G = X.shape[0]
    out = torch.full((G,), math.inf, dtype=X.dtype, device=X.device)
    for start in range(0, G, chunk):
        D = torch.cdist(X[start : start + chunk], X, p=float("inf"))
        rows = torch.arange(D.shape[0], device=X.device)
        D[rows, rows + start] = math.inf
        out[start : start + chunk] = D.min(dim=1).values
    return out


def separation_stats(arrays: dict) -> dict:
    """``min_separation``, ``median_nearest_separation`` and ``near_copy_fraction`` (share of
    unique solutions within ``NEAR_COPY_DISTANCE`` of another) of a harvest's unique solutions;
    NaN with fewer than two, or for files written before ``nearest_separation`` was stored. A
    minimum barely above ``dedup_tol`` and a large near-copy share say that the count of unique
    solutions includes copies of one fixed point split by the stopping tolerance."""
    near = np.asarray(arrays.get("nearest_separation", []), dtype=np.float64)
    if near.size < 2:
        return {
            "min_separation": math.nan,
            "median_nearest_separation": math.nan,
            "near_copy_fraction": math.nan,
        }
    return {
        "min_separation": float(near.min()),
        "median_nearest_separation": float(np.median(near)),
        "near_copy_fraction": float((near < NEAR_COPY_DISTANCE).mean()),
    }


def harvest(
    machine: BoltzmannMachine,
    x_init: torch.Tensor,
    settings: HarvestSettings,
    progress: bool = False,
) -> dict[str, np.ndarray]:
    """TAP solutions from every row of ``x_init`` (eqs. 37-38), deduplicated; arrays by key.

    Runs in the machine's dtype and device. Returns the array keys of the module docstring
    that do not depend on provenance (a_visible ... unique_free_energy, layer_sizes and the
    settings) plus ``nearest_separation`` (``nearest_separation`` of the unique solutions'
    magnetisations, all layers).
    """
    from tqdm import tqdm

    x_init = torch.as_tensor(x_init, dtype=machine.dtype, device=machine.device)
    K = x_init.shape[0]
    if K == 0:
        raise HarvestError("harvest needs at least one initialisation")
    states = []
    starts = range(0, K, settings.chunk_size)
    for start in tqdm(starts, desc="TAP", file=sys.stderr, disable=not progress):
        states.append(
            tap.solve_with_retry(
                machine,
                x_init[start : start + settings.chunk_size],
                damping=settings.damping,
                tol=settings.tol,
                max_iter=settings.max_iter,
                retry_damping=settings.retry_damping,
                solver=settings.solver,
            )
        )
    state = tap.TAPState.concat(states)
    state, polished, polish_iterations = polish(machine, state, settings)
    with torch.no_grad():
        F = tap.free_energy(machine, state)
    reps, inverse, counts = merge(state, F, settings)
    converged = state.converged.cpu().numpy()

    def arr(t, dtype=np.float64):
        out = t.detach().cpu().numpy().astype(dtype)
        out[~converged] = np.nan
        return out

    hidden_a = torch.cat(state.a[1:], dim=1)
    hidden_c = torch.cat(state.c[1:], dim=1)
    F_np = arr(F)
    reps_np = reps.cpu().numpy().astype(np.int64)
    return {
        # Per-row moments in float32: far finer than the convergence accuracy (about 1e-4),
        # and half the disk of float64.
        "a_visible": arr(state.a[0], np.float32),
        "c_visible": arr(state.c[0], np.float32),
        "a_hidden": arr(hidden_a, np.float32),
        "c_hidden": arr(hidden_c, np.float32),
        "free_energy": F_np,
        "converged": converged.astype(bool),
        "iterations": state.iterations.cpu().numpy().astype(np.int64),
        "polished": polished.cpu().numpy().astype(bool),
        "polish_iterations": polish_iterations.cpu().numpy().astype(np.int64),
        "inverse": inverse.cpu().numpy().astype(np.int64),
        "representatives": reps_np,
        "multiplicity": counts.cpu().numpy().astype(np.int64),
        "unique_free_energy": F_np[reps_np],
        "layer_sizes": np.asarray(machine.sizes, dtype=np.int64),
        "dedup_tol": np.float64(settings.dedup_tol),
        "merge_rule": np.asarray(settings.merge_rule),
        "solver": np.asarray(settings.solver),
        "polish_solver": np.asarray(settings.polish_solver),
        "polish_tol": np.float64(math.nan if settings.polish_tol is None else settings.polish_tol),
        "tol": np.float64(settings.tol),
        "max_iter": np.int64(settings.max_iter),
        "damping": np.float64(settings.damping),
        "retry_damping": np.float64(
            math.nan if settings.retry_damping is None else settings.retry_damping
        ),
        "nearest_separation": nearest_separation(state.magnetisations()[reps].double())
        .cpu()
        .numpy(),
    }


def summarise(arrays: dict) -> dict:
    """Per-epoch numbers of a harvest: counts, Helmholtz estimate, spread, iterations."""
    K = int(arrays["converged"].shape[0])
    n_conv = int(arrays["converged"].sum())
    Fu = np.asarray(arrays["unique_free_energy"], dtype=np.float64)
    G = int(Fu.shape[0])
    iters = np.asarray(arrays["iterations"])
    conv_iters = iters[arrays["converged"]]
    return {
        "n_init": K,
        "n_converged": n_conv,
        "n_not_converged": K - n_conv,
        "n_unique": G,
        "unique_fraction": G / K,
        # Helmholtz free energy estimate: uniform average over the unique solutions (Fig. 5).
        "helmholtz": float(Fu.mean()) if G else math.nan,
        "free_energy_std": float(Fu.std()) if G else math.nan,
        "free_energy_min": float(Fu.min()) if G else math.nan,
        "free_energy_max": float(Fu.max()) if G else math.nan,
        "mean_iterations": float(iters.mean()),
        "mean_iterations_converged": float(conv_iters.mean()) if n_conv else math.nan,
        "max_iterations": int(iters.max()),
        "largest_multiplicity": int(arrays["multiplicity"].max()) if G else 0,
        # rows converged at tol that polishing did not bring to polish_tol (kept as they were)
        "n_unpolished": int((arrays["converged"] & ~arrays["polished"]).sum())
        if "polished" in arrays
        else 0,
        **separation_stats(arrays),
    }


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def save_solutions(path, arrays: dict, meta: dict) -> Path:
    """Write the arrays of ``harvest`` and the provenance ``meta`` to ``path`` (.npz, atomic).

    ``meta`` values are scalars, strings (stored as 0-d unicode arrays, no pickling), arrays,
    or dicts (stored as JSON strings).
    """
    payload = dict(arrays)
    for key, value in meta.items():
        if isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        if value is None:
            value = ""
        payload[key] = np.asarray(value)
    atomic_write(path, lambda fh: np.savez_compressed(fh, **payload))
    return Path(path)


_STRINGS = (
    "model",
    "dataset",
    "substitute",
    "train_run_id",
    "harvest_run_id",
    "dtype",
    "merge_rule",
    "solver",
    "polish_solver",
)
_SCALARS = ("dedup_tol", "tol", "damping", "retry_damping", "polish_tol")
_INTS = ("max_iter", "epoch")


def load_solutions(path) -> dict:
    """The contents of a solutions file: arrays as numpy, scalars and strings as Python values,
    ``summary`` as a dict. Raises HarvestError naming the file if a key is missing."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError) as err:
        raise HarvestError(f"{path}: not a readable solutions file ({err})") from None
    required = ("a_visible", "a_hidden", "free_energy", "inverse", "representatives", "epoch")
    missing = [k for k in required if k not in out]
    if missing:
        raise HarvestError(f"{path}: missing keys {missing}")
    for k in _STRINGS:
        if k in out:
            out[k] = str(out[k])
    for k in _SCALARS:
        if k in out:
            out[k] = float(out[k])
    for k in _INTS:
        if k in out:
            out[k] = int(out[k])
    if "summary" in out:
        out["summary"] = json.loads(str(out["summary"]))
    if "image_shape" in out:
        out["image_shape"] = tuple(int(s) for s in out["image_shape"])
    out["path"] = str(path)
    return out


def unique_table(arrays: dict) -> list[dict]:
    """One row per unique solution: id, representative, free energy, multiplicity, iterations,
    distance to the nearest other unique solution."""
    rows = []
    iters = arrays["iterations"]
    init_index = arrays.get("init_index", np.arange(len(iters)))
    near = arrays.get("nearest_separation", np.full(len(arrays["representatives"]), np.nan))
    for g, (rep, F, mult) in enumerate(
        zip(
            arrays["representatives"],
            arrays["unique_free_energy"],
            arrays["multiplicity"],
            strict=True,
        )
    ):
        members = arrays["inverse"] == g
        rows.append(
            {
                "solution": g,
                "representative_init": int(init_index[rep]),
                "free_energy": float(F),
                "multiplicity": int(mult),
                "mean_iterations": float(iters[members].mean()),
                "nearest_separation": float(near[g]),
            }
        )
    return rows


_UNIQUE_FIELDS = [
    "solution",
    "representative_init",
    "free_energy",
    "multiplicity",
    "mean_iterations",
    "nearest_separation",
]


# ----------------------------------------------------------------------------------------------
# The workflow stage
# ----------------------------------------------------------------------------------------------


def _load_checkpoint(model_file: Path, checkpoint: Path, epoch: int):
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

    ``on_start(params, tags)`` is called before solving and may return a run id, stored in the
    npz as ``harvest_run_id`` (``pipeline.stages.harvest`` passes one that opens an MLflow run).
    """
    from tapmachine.io import data

    model_file, checkpoint = Path(model_file), Path(checkpoint)
    model, ckpt = _load_checkpoint(model_file, checkpoint, epoch)
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
    t0 = time.perf_counter()
    arrays = harvest(machine, x, settings, progress=progress)
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
        write_csv(unique_table({**arrays, **meta}), out_csv, _UNIQUE_FIELDS)
    except BaseException:
        Path(out_npz).unlink(missing_ok=True)
        raise
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
