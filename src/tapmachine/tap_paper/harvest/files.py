"""The files of a harvest: the solutions ``.npz`` and the CSV of unique solutions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tapmachine.core.tap import FREE_ENERGY_TERMS
from tapmachine.io.files import atomic_write
from tapmachine.tap_paper.harvest.settings import HarvestError

__all__ = ["UNIQUE_FIELDS", "load_solutions", "save_solutions", "unique_table"]


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
_SCALARS = ("dedup_tol", "tol", "damping", "retry_damping", "polish_tol", "energy_normaliser")
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
    distance to the nearest other unique solution, the parts of -F (``FREE_ENERGY_TERMS``)."""
    rows = []
    iters = arrays["iterations"]
    init_index = arrays.get("init_index", np.arange(len(iters)))
    G = len(arrays["representatives"])
    near = arrays.get("nearest_separation", np.full(G, np.nan))
    # files written before the harvest split F into its parts hold no terms: NaN
    terms = {n: arrays.get(f"unique_{n}", np.full(G, np.nan)) for n in FREE_ENERGY_TERMS}
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
                **{n: float(terms[n][g]) for n in FREE_ENERGY_TERMS},
            }
        )
    return rows


UNIQUE_FIELDS = [
    "solution",
    "representative_init",
    "free_energy",
    "multiplicity",
    "mean_iterations",
    "nearest_separation",
    *FREE_ENERGY_TERMS,
]
