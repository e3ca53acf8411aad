"""Beyond the paper: denoising real-valued MNIST through an additive Gaussian channel.

y = x + sigma z; the truncated Gauss-Bernoulli RBM's visible prior is tilted by the likelihood
(A += 1/sigma^2, B += y/sigma^2) and TAP is run from the pointwise posterior mean under the
per-site empirical prior, which is shown beside it with 1-NN (Euclidean) and the noisy input.
Drawn from the ``.npz`` of ``tapmachine denoise real``: MSE (+- standard error over images) and
PSNR = 10 log10(1 / MSE) vs sigma, and one test image at every sigma. Claims: at which sigma TAP
has a lower MSE than the pointwise estimator and than 1-NN (paired difference beyond 2 se).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tapmachine.figures.common import (
    PAGE,
    FigureError,
    FigureResult,
    claim,
    model_info,
    new_figure,
    styled,
    table,
)
from tapmachine.figures.fig8 import paired

__all__ = ["make"]


@styled
def make(results_file, model_file) -> FigureResult:
    path = Path(results_file)
    if not path.exists():
        raise FigureError(f"{path} not found: run `tapmachine denoise real` first")
    with np.load(path, allow_pickle=False) as npz:
        sigmas = npz["sigmas"]
        methods = [str(m) for m in npz["methods"]]
        mse = {m: npz[f"mse_{m}"] for m in methods}
        images = {m: npz[f"fig_{m}"] for m in methods}
        clean = npz["fig_clean"]
        shape = tuple(int(v) for v in npz["image_shape"])
        converged = float(npz["converged"].mean())
    drawn = []
    for m, v in mse.items():
        for i, s in enumerate(sigmas):
            mean = float(v[i].mean())
            drawn.append(
                {
                    "method": m,
                    "sigma": float(s),
                    "mse": mean,
                    "mse_se": float(v[i].std(ddof=1) / math.sqrt(v.shape[1])),
                    "psnr": 10 * math.log10(1 / mean) if mean > 0 else math.inf,
                }
            )
    claims = [claim("converged_fraction", converged, "tap", "rows whose TAP iteration met tol")]
    for other in [m for m in methods if m not in ("tap", "noisy")]:
        wins, losses = [], []
        for i, s in enumerate(sigmas):
            d, se = paired(mse["tap"][i], mse[other][i])
            if d < -2 * se:
                wins.append(float(s))
            elif d > 2 * se:
                losses.append(float(s))
        claims.append(
            claim(
                f"tap_beats_{other}",
                len(wins) / len(sigmas),
                "tap",
                f"TAP MSE below {other} by > 2 paired se at sigma = {wins}; above at {losses}",
            )
        )
    fig = new_figure(PAGE, 2.6 + 0.7 * len(methods))
    grid = fig.add_gridspec(2, 1, height_ratios=[3.0, 1.0 * len(methods)])
    top = grid[0].subgridspec(1, 2)
    ax_mse, ax_psnr = fig.add_subplot(top[0]), fig.add_subplot(top[1])
    for m in methods:
        rows = [r for r in drawn if r["method"] == m]
        ax_mse.errorbar(
            sigmas,
            [r["mse"] for r in rows],
            yerr=[r["mse_se"] for r in rows],
            marker=".",
            capsize=2,
            label=m,
        )
        ax_psnr.plot(sigmas, [r["psnr"] for r in rows], marker=".", label=m)
    ax_mse.set_yscale("log")
    ax_mse.set_xlabel("noise std sigma")
    ax_mse.set_ylabel("MSE per pixel")
    ax_psnr.set_xlabel("noise std sigma")
    ax_psnr.set_ylabel("PSNR (dB)")
    ax_mse.legend()
    for ax in (ax_mse, ax_psnr):
        ax.grid(alpha=0.3)
    strip = grid[1].subgridspec(len(methods), len(sigmas) + 1)
    for r, m in enumerate(methods):
        for c in range(len(sigmas) + 1):
            ax = fig.add_subplot(strip[r, c])
            img = clean if c == 0 else images[m][c - 1]
            ax.imshow(np.clip(img, 0, 1).reshape(shape), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(m)
            if r == 0:
                ax.set_title("clean" if c == 0 else f"sigma = {sigmas[c - 1]:g}")
    info = model_info(model_file)
    fig.suptitle(f"Gaussian-channel denoising with {info.name} ({info.dataset})")
    params = {"sigmas": [float(s) for s in sigmas], "methods": methods}
    return FigureResult(fig, table(drawn, claims), [info], params)
