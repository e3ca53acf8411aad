"""Derived datasets: binarise (thresholded or stochastic), scale to [0, 1], 8-bit planes, spins;
label selection."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tapmachine.io.data.record import DataError, Dataset

# --------------------------------------------------------------------------------------------
# Derived datasets
# --------------------------------------------------------------------------------------------


def _unit_lut() -> np.ndarray:
    """Exact pixel/255 for every uint8 value (float64), a lookup table for threshold and scale."""
    return np.arange(256, dtype=np.float64) / 255.0


def threshold(x: np.ndarray, level: float = 0.5) -> np.ndarray:
    """Binarize: uint8 pixels as pixel/255 > level, floats as x > level; returns uint8 {0, 1}."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return (_unit_lut() > level).astype(np.uint8)[x]
    if np.issubdtype(x.dtype, np.floating):
        return (x > level).astype(np.uint8)
    raise DataError(f"threshold: needs uint8 pixels or floats in [0, 1], got {x.dtype}")


#: Splits a stochastic transform draws for, each from its own stream of the transform's seed.
SPLITS = ("train", "test")


def bernoulli(x: np.ndarray, seed: int, split: str = "train", chunk: int = 10000) -> np.ndarray:
    """Stochastic binarisation: each pixel independently 1 with probability pixel/255 (uint8)
    or x (floats in [0, 1]), as Salakhutdinov & Murray (2008) binarised MNIST; uint8 {0, 1}.

    The draws come from ``numpy.random.default_rng([seed, SPLITS.index(split)])``, one uniform
    per pixel in row order, so the same seed and split give the same images, and the training
    and test splits get independent draws. Rows are drawn ``chunk`` at a time (memory only).
    """
    x = np.asarray(x)
    if x.dtype == np.uint8:
        p = _unit_lut()
    elif np.issubdtype(x.dtype, np.floating):
        if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or np.isnan(x).any()):
            raise DataError("bernoulli: float input must lie in [0, 1]")
        p = None
    else:
        raise DataError(f"bernoulli: needs uint8 pixels or floats in [0, 1], got {x.dtype}")
    if split not in SPLITS:
        raise DataError(f"bernoulli: split must be one of {SPLITS}, not {split!r}")
    rng = np.random.default_rng([int(seed), SPLITS.index(split)])
    out = np.empty(x.shape, dtype=np.uint8)
    for start in range(0, len(x), chunk):
        part = x[start : start + chunk]
        prob = p[part] if p is not None else part.astype(np.float64)
        out[start : start + chunk] = rng.random(part.shape) < prob
    return out


def scale(x: np.ndarray) -> np.ndarray:
    """uint8 pixels -> pixel/255 as float32 in [0, 1]; floats already in [0, 1] are kept."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return _unit_lut().astype(np.float32)[x]
    if np.issubdtype(x.dtype, np.floating):
        if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or np.isnan(x).any()):
            raise DataError("scale: float input must lie in [0, 1]")
        return x.astype(np.float32, copy=False)
    raise DataError(f"scale: needs uint8 pixels or floats in [0, 1], got {x.dtype}")


def bits8(x: np.ndarray) -> np.ndarray:
    """Each uint8 pixel -> its 8 bits, most significant first (123 -> 0,1,1,1,1,0,1,1); uint8."""
    x = np.asarray(x)
    if x.dtype != np.uint8:
        raise DataError(f"bits8: needs uint8 pixels, got {x.dtype}")
    return np.unpackbits(x, axis=-1, bitorder="big")


def spin(x: np.ndarray) -> np.ndarray:
    """{0, 1} -> {-1, +1} as int8."""
    x = np.asarray(x)
    if x.size and not np.all((x == 0) | (x == 1)):
        raise DataError("spin: input must be binary {0, 1} (apply threshold or bits8 first)")
    return (2 * x.astype(np.int8) - 1).astype(np.int8)


#: Named pure transforms, composable in a list (see :func:`derive`).
DERIVED_TRANSFORMS: dict[str, Callable[..., np.ndarray]] = {
    "threshold": threshold,
    "scale": scale,
    "bits8": bits8,
    "spin": spin,
    "bernoulli": bernoulli,
}

#: Transforms that draw at random: ``derive`` passes them the split they transform.
STOCHASTIC = frozenset({"bernoulli"})

# How a transform changes (H, W); absent = unchanged.
_SHAPE_RULES: dict[str, Callable[[tuple[int, int]], tuple[int, int]]] = {
    "bits8": lambda s: (s[0], 8 * s[1]),
}


def _transform_spec(spec: str | dict) -> tuple[str, dict]:
    """Normalise ``"name"`` or ``{"name": ..., **params}`` into (name, params)."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and "name" in spec:
        params = {k: v for k, v in spec.items() if k != "name"}
        name = spec["name"]
    else:
        raise DataError(f"transform {spec!r}: expected a name or a dict with 'name'")
    if name not in DERIVED_TRANSFORMS:
        raise DataError(f"unknown transform {name!r}; known: {', '.join(DERIVED_TRANSFORMS)}")
    return name, params


def derive(ds: Dataset, transforms: Sequence[str | dict], name: str) -> Dataset:
    """Apply ``transforms`` in order to train and test images; labels are kept.

    Each entry is a name of :data:`DERIVED_TRANSFORMS` or a dict such as
    ``{"name": "threshold", "level": 0.5}`` or ``{"name": "bernoulli", "seed": 2008}`` (a
    :data:`STOCHASTIC` transform, told which split it draws for). The provenance keeps the
    parent's and lists the steps.
    """
    x_tr, x_te, shape, steps = ds.x_train, ds.x_test, ds.image_shape, []
    for spec in transforms:
        tname, params = _transform_spec(spec)
        fn = DERIVED_TRANSFORMS[tname]
        split = (lambda name: {"split": name}) if tname in STOCHASTIC else (lambda name: {})
        try:
            x_tr, x_te = fn(x_tr, **params, **split("train")), fn(x_te, **params, **split("test"))
        except TypeError as exc:
            raise DataError(f"transform {tname!r}: bad parameters {params} ({exc})") from None
        shape = _SHAPE_RULES.get(tname, lambda s: s)(shape)
        steps.append({"name": tname, **params})
    prov = {
        "dataset": name,
        "source": "derived",
        "derived_from": ds.name,
        "transforms": steps,
        "dtypes": {"x": str(x_tr.dtype), "y": str(ds.y_train.dtype)},
        "parent": ds.provenance,
    }
    if "substitute" in ds.provenance:
        prov["substitute"] = ds.provenance["substitute"]
    return Dataset(x_tr, ds.y_train.copy(), x_te, ds.y_test.copy(), shape, prov, name)


def select_labels(ds: Dataset, keep: Iterable[int], name: str | None = None) -> Dataset:
    """Keep only the examples whose label is in ``keep`` (e.g. faces only: ``keep=[1]``)."""
    keep = sorted(int(k) for k in keep)
    tr, te = np.isin(ds.y_train, keep), np.isin(ds.y_test, keep)
    prov = {**ds.provenance, "selected_labels": keep, "parent_name": ds.name}
    return Dataset(
        ds.x_train[tr], ds.y_train[tr], ds.x_test[te], ds.y_test[te], ds.image_shape, prov,
        name or ds.name,
    )  # fmt: skip


def label_counts(y: np.ndarray) -> list[int]:
    """Number of examples of each label 0..max(y)."""
    y = np.asarray(y).ravel()
    if y.size == 0:
        return []
    if y.min() < 0:
        raise DataError("label_counts: labels must be non-negative")
    return [int(c) for c in np.bincount(y.astype(np.int64))]
