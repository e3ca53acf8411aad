"""Fig. 9: one test digit through the binary symmetric channel at several p, and its denoised
posterior means (not rounded; white = 0, black = 1 as in the paper) by the OPE, 1-NN and TAP on
each RBM. Every method sees the same noise realisation at a given p (checked: the noisy digits
stored by every denoising job must be equal).

Drawn from the same ``.npz`` files as Fig. 8. The table gives, per method and p, the MCC of the
rounded estimate of this digit and the mean of its posterior means; one claim row says whether the
noise realisations were the same for every method.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tapmachine.figures.common import (
    COLUMN,
    PAGE,
    FigureError,
    FigureResult,
    claim,
    model_info,
    new_figure,
    styled,
    table,
)

__all__ = ["make"]


def _mcc(est: np.ndarray, truth: np.ndarray) -> float:
    """``denoise.mcc`` of one image."""
    import torch

    from tapmachine.tap_paper.denoise import mcc

    row = [torch.as_tensor(np.asarray(v, np.float64)).reshape(1, -1) for v in (est, truth)]
    return float(mcc(*row)[0])


@styled
def make(tap_files: list, baselines_file, model_files: list, ps_shown=None, labels=None):
    """Fig. 9 from the denoising results (``ps_shown``: a subset of the p grid, default all)."""
    if labels is None:
        labels = [f"tap_{Path(f).parent.name}" for f in tap_files]
    if len(labels) != len(tap_files):
        raise FigureError(f"{len(tap_files)} TAP result files but {len(labels)} labels")
    with np.load(baselines_file, allow_pickle=False) as npz:
        ps = npz["ps"]
        shape = tuple(int(v) for v in npz["image_shape"])
        clean = npz["fig9_clean"]
        noisy = npz["fig9_noisy"]
        rows = {"ope": npz["fig9_ope"], "1nn": npz["fig9_knn"]}
    same = True
    for f, label in zip(tap_files, labels, strict=True):
        with np.load(f, allow_pickle=False) as npz:
            if not np.array_equal(npz["ps"], ps):
                raise FigureError(f"{f}: p grid differs from the baselines'")
            same &= bool(np.array_equal(npz["fig9_noisy"], noisy))
            same &= bool(np.array_equal(npz["fig9_clean"], clean))
            rows[label] = npz["fig9_means"]
    if ps_shown:
        cols = []
        for p in ps_shown:
            hit = np.flatnonzero(np.isclose(ps, p))
            if hit.size == 0:
                raise FigureError(f"fig9 p = {p} is not in the denoising grid {list(ps)}")
            cols.append(int(hit[0]))
    else:
        cols = list(range(len(ps)))
    panels = {"noisy": noisy, **rows}
    fig = new_figure(max(COLUMN, min(PAGE, 0.6 * (len(cols) + 1))), 0.65 * len(panels) + 0.5)
    axes = fig.subplots(len(panels), len(cols) + 1, squeeze=False)
    drawn = []
    for r, (method, images) in enumerate(panels.items()):
        first = axes[r][0]
        first.imshow(
            clean.reshape(shape) if r == 0 else np.zeros(shape), cmap="gray_r", vmin=0, vmax=1
        )
        first.set_ylabel(method)
        if r == 0:
            first.set_title("clean")
        for c, j in enumerate(cols):
            ax = axes[r][c + 1]
            ax.imshow(images[j].reshape(shape), cmap="gray_r", vmin=0, vmax=1)
            if r == 0:
                ax.set_title(f"p = {ps[j]:g}")
            drawn.append(
                {
                    "method": method,
                    "p": float(ps[j]),
                    "mcc": _mcc(np.round(images[j]), clean),
                    "mean_value": float(images[j].mean()),
                }
            )
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.spines[:].set_visible(False)
    fig.suptitle("Fig. 9: one test digit denoised\nposterior means, white 0, black 1")
    claims = [claim("same_noise_every_method", float(same), "", "1 = one realisation per p")]
    models = [model_info(f) for f in model_files]
    params = {"ps": [float(ps[j]) for j in cols], "methods": list(panels)}
    return FigureResult(fig, table(drawn, claims), models, params)
