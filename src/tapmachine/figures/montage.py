"""A grid of the first images of a dataset, written as a PNG (MLflow artifact of each data run)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from tapmachine.io.files import atomic_write

__all__ = ["montage", "tile"]


def tile(
    images: np.ndarray, image_shape: tuple[int, int], ncols: int = 10, pad: int = 1
) -> np.ndarray:
    """Arrange ``images`` ((n, H*W) or (n, H, W)) in a float grid, NaN in the gaps."""
    h, w = (int(s) for s in image_shape)
    arr = np.asarray(images, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[1] == h * w:
        arr = arr.reshape(-1, h, w)
    if arr.ndim != 3 or arr.shape[1:] != (h, w) or arr.shape[0] == 0:
        raise ValueError(f"montage: images of shape {np.shape(images)} do not match {(h, w)}")
    from skimage.util import montage as sk_montage

    n = arr.shape[0]
    ncols = max(1, min(int(ncols), n))
    nrows = math.ceil(n / ncols)
    grid = sk_montage(arr, fill=np.nan, grid_shape=(nrows, ncols), padding_width=pad)
    # skimage pads the outer border too; the figures want gaps between images only.
    return grid[pad : grid.shape[0] - pad, pad : grid.shape[1] - pad] if pad else grid


def montage(
    images: np.ndarray,
    image_shape: tuple[int, int],
    path: str | os.PathLike,
    ncols: int = 10,
    title: str | None = None,
    max_images: int = 100,
) -> Path:
    """Write a PNG grid of the first ``max_images`` images to ``path`` (atomically); return it.

    Grey scale from the data's minimum (black) to maximum (white), so uint8 pixels, [0, 1] reals,
    {0, 1} bits and {-1, +1} spins all display. Uses the Agg canvas directly: no pyplot state.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    grid = tile(np.asarray(images)[:max_images], image_shape, ncols)
    finite = grid[np.isfinite(grid)]
    vmin, vmax = float(finite.min()), float(finite.max())
    if vmax <= vmin:
        vmax = vmin + 1.0
    scale = 6.0 / max(grid.shape)
    fig = Figure(figsize=(max(2.0, grid.shape[1] * scale), max(2.0, grid.shape[0] * scale) + 0.4))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.88 if title else 0.96))
    cmap = matplotlib.colormaps["gray"].with_extremes(bad="#b03030")
    ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.set_axis_off()
    if title:
        fig.suptitle(title)
    return atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=100))
