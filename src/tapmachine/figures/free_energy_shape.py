"""Bands and modes of one epoch's unique TAP free energies (Fig. 5's distribution claims).

Bands: a new band starts at every gap wider than ``BAND_GAP`` of the range of free energies, and
bands holding fewer than ``BAND_MIN_SHARE`` of the unique solutions are not counted. Modes: the
significant peaks of a Gaussian kernel density estimate (Scott's bandwidth), with each unique
solution counted once or weighted by its basin size (``count_modes``).
"""

from __future__ import annotations

import math

import numpy as np

from tapmachine.figures.common import claim

__all__ = [
    "BAND_GAP",
    "BAND_MIN_SHARE",
    "MODE_MAX_DIP",
    "MODE_MIN_HEIGHT",
    "MODES_MIN_SOLUTIONS",
    "count_bands",
    "count_modes",
    "epoch_shape",
    "gaussian_kde",
    "shape_claims",
]

BAND_GAP = 0.10
BAND_MIN_SHARE = 0.05
#: A KDE peak is a mode when at least this share of the highest peak ...
MODE_MIN_HEIGHT = 0.2
#: ... and the density between it and the previous mode dips below this share of the lower one.
MODE_MAX_DIP = 0.8
#: Fewer unique solutions than this give no distribution to count modes of.
MODES_MIN_SOLUTIONS = 5


def count_bands(values, gap: float = BAND_GAP, min_share: float = BAND_MIN_SHARE):
    """(number of bands, [(low, high, size), ...]) of 1-D values by the gap criterion above."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    v = v[np.isfinite(v)]
    if v.size == 0:
        return 0, []
    span = v[-1] - v[0]
    if span <= 0:
        return 1, [(float(v[0]), float(v[-1]), int(v.size))]
    cuts = np.nonzero(np.diff(v) > gap * span)[0] + 1
    bands = [b for b in np.split(v, cuts)]
    kept = [(float(b[0]), float(b[-1]), int(b.size)) for b in bands if b.size >= min_share * v.size]
    return len(kept), kept


def gaussian_kde(values, grid, weights=None) -> np.ndarray | None:
    """Gaussian KDE with Scott's bandwidth (``scipy.stats.gaussian_kde``), as a density on
    ``grid``; ``weights`` (one per value, e.g. basin sizes) weigh the kernels, and Scott's rule
    then uses the effective count (sum w)^2 / sum w^2. None if degenerate (fewer than two
    values or no spread: scipy raises there)."""
    from scipy.stats import gaussian_kde as kde

    v = np.asarray(values, dtype=np.float64)
    if v.size < 2 or not v.std() > 0:
        return None
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    return kde(v, bw_method="scott", weights=w)(np.asarray(grid, dtype=np.float64))


def count_modes(
    values,
    min_height: float = MODE_MIN_HEIGHT,
    max_dip: float = MODE_MAX_DIP,
    points: int = 512,
    weights=None,
) -> list[float]:
    """Locations of the significant modes of ``values``' Gaussian KDE (Scott's bandwidth;
    ``weights``: one per value, as in ``gaussian_kde``).

    A local maximum of the density on a grid over the values' range (padded by 5%) counts when
    it is at least ``min_height`` of the highest one; of two neighbouring ones, both count only
    if the density between them falls below ``max_dip`` of the lower, else the higher stands
    for both. Empty for degenerate values (``gaussian_kde`` None).
    """
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    finite = np.isfinite(v)
    v, w = v[finite], w[finite]
    if v.size < 2:
        return []
    pad = 0.05 * (v.max() - v.min())
    grid = np.linspace(v.min() - pad, v.max() + pad, points)
    y = gaussian_kde(v, grid, None if weights is None else w)
    if y is None:
        return []
    inner = np.arange(1, points - 1)
    peaks = inner[(y[inner] > y[inner - 1]) & (y[inner] >= y[inner + 1])]
    modes: list[int] = []
    for i in peaks[y[peaks] >= min_height * y.max()]:
        if modes and y[modes[-1] : i + 1].min() >= max_dip * min(y[i], y[modes[-1]]):
            modes[-1] = i if y[i] > y[modes[-1]] else modes[-1]
        else:
            modes.append(int(i))
    return [float(grid[i]) for i in modes]


def epoch_shape(free_energies, multiplicity) -> dict:
    """Bands and modes of one epoch's unique free energies: ``n_bands`` and ``bands``
    (``count_bands``), and where there are at least ``MODES_MIN_SOLUTIONS`` unique solutions
    the modes of their KDE counted two ways (``count_modes``): ``modes``, each unique solution
    once (the paper's histogram of unique solutions), and ``modes_weighted``, each weighted by
    its basin size, the number of data initialisations that reached it (``multiplicity``); None
    with fewer solutions."""
    Fu = np.asarray(free_energies, dtype=np.float64)
    n_bands, band_list = count_bands(Fu)
    enough = Fu.size >= MODES_MIN_SOLUTIONS
    return {
        "n_bands": n_bands,
        "bands": band_list,
        "modes": count_modes(Fu) if enough else None,
        "modes_weighted": count_modes(Fu, weights=multiplicity) if enough else None,
    }


def _modes_detail(modes) -> str:
    return ", ".join(f"{m:.4g}" for m in modes) if modes is not None else "too few solutions"


def shape_claims(model: str, epoch: int, shape: dict) -> list[dict]:
    """The per-epoch band and mode rows of ``epoch_shape``."""
    kde = (
        f"KDE peaks >= {MODE_MIN_HEIGHT:.0%} of the highest, a dip below {MODE_MAX_DIP:.0%} between"
    )

    def count(modes):
        return len(modes) if modes is not None else math.nan

    return [
        claim(
            "n_bands",
            shape["n_bands"],
            model,
            f"gap > {BAND_GAP:.0%} of range, bands >= {BAND_MIN_SHARE:.0%} of solutions: "
            + "; ".join(f"[{lo:.4g}, {hi:.4g}] x{n}" for lo, hi, n in shape["bands"]),
            epoch,
        ),
        claim(
            "n_modes",
            count(shape["modes"]),
            model,
            f"{kde}, each unique solution once: {_modes_detail(shape['modes'])}",
            epoch,
        ),
        claim(
            "n_modes_weighted",
            count(shape["modes_weighted"]),
            model,
            f"{kde}, each unique solution weighted by its basin (initialisations reaching it): "
            f"{_modes_detail(shape['modes_weighted'])}",
            epoch,
        ),
    ]
