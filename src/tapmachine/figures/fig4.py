"""Fig. 4: receptive fields (columns of W, reshaped to the image) ranked two ways.

For each model: the ``per_group`` most localised and most spread fields by the l_0.1 measure
sum_i |w_i / max_i |w_i||^0.1 (each field scaled to peak magnitude 1 first, so the measure
counts how many pixels carry weight comparable to the peak, independently of the field's
overall scale; small = localised), and the most and least active fields by the mean hidden
activation f_a(W^T x, 0) over the first ``n_images`` training images. Fields are shown scaled
to [-1, 1] (viridis: dark blue -1, green 0, yellow +1), as in the paper.

Claims (reproduction.md): localised and stroke-like fields on MNIST (visual; the table gives the
normalised spread l_0.1 / Nv of every model) and more localisation with larger Nh (the Spearman
correlation between Nh and the median spread among the models of one dataset: negative).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tapmachine.figures.common import (
    FigureError,
    FigureResult,
    claim,
    dataset_label,
    load_model_file,
    model_info,
    new_figure,
    table,
)
from tapmachine.figures.montage import tile

__all__ = ["make", "spread_l01", "hidden_activation"]

GROUPS = ("most localised", "most spread", "most active", "least active")


def spread_l01(W: np.ndarray, p: float = 0.1) -> np.ndarray:
    """sum_i |w_i / max|w||^p of each column of W (Nv, Nh); 0 for an all-zero column."""
    W = np.asarray(W, dtype=np.float64)
    peak = np.abs(W).max(0)
    scaled = np.abs(W) / np.where(peak > 0, peak, 1.0)
    return (scaled**p).sum(0)


def hidden_activation(model_file, x: np.ndarray) -> np.ndarray:
    """Mean over the rows of ``x`` of the first hidden layer's clamped TAP means, (Nh,)."""
    import torch

    from tapmachine import tap

    machine = load_model_file(model_file).machine(dtype=torch.float64)
    xt = torch.as_tensor(np.asarray(x, dtype=np.float64))
    means = []
    with torch.no_grad():
        for start in range(0, xt.shape[0], 2000):
            state = tap.clamped_state(machine, xt[start : start + 2000])
            means.append(state.a[1].sum(0))
    return (torch.stack(means).sum(0) / xt.shape[0]).numpy()


def _spearman(a, b) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(spearmanr(a, b).statistic)


def make(model_files: list, data_files: list, n_images: int = 2000, per_group: int = 8):
    """Fig. 4 for the models ``model_files`` with their datasets ``data_files`` (same order)."""

    from tapmachine.data import load_dataset

    if len(model_files) != len(data_files) or not model_files:
        raise FigureError("fig4 needs one dataset file per model.pt (and at least one model)")
    infos, rows, claims = [], [], []
    panels = []
    for pfile, dfile in zip(model_files, data_files, strict=True):
        info = model_info(pfile)
        ds = load_dataset(dfile)
        W = load_model_file(pfile).machine_state["weights"][0].double().numpy()
        if W.shape[0] != int(np.prod(ds.image_shape)):
            raise FigureError(
                f"{pfile}: {W.shape[0]} visible units do not match the images "
                f"{ds.image_shape} of {dfile}"
            )
        spread = spread_l01(W)
        act = hidden_activation(pfile, ds.x_train[:n_images])
        k = min(per_group, W.shape[1])
        by_spread = np.argsort(spread, kind="stable")
        by_act = np.argsort(-act, kind="stable")
        chosen = {
            GROUPS[0]: by_spread[:k],
            GROUPS[1]: by_spread[::-1][:k],
            GROUPS[2]: by_act[:k],
            GROUPS[3]: by_act[::-1][:k],
        }
        for group, units in chosen.items():
            fields = W[:, units].T
            peak = np.abs(fields).max(1, keepdims=True)
            fields = fields / np.where(peak > 0, peak, 1.0)
            panels.append((info, group, tile(fields, ds.image_shape, ncols=k)))
            for rank, u in enumerate(units):
                rows.append(
                    {
                        "model": info.name,
                        "dataset": info.dataset,
                        "group": group,
                        "rank": rank,
                        "unit": int(u),
                        "spread_l01": float(spread[u]),
                        "spread_l01_per_pixel": float(spread[u] / W.shape[0]),
                        "mean_activation": float(act[u]),
                        "field_norm": float(np.linalg.norm(W[:, u])),
                    }
                )
        nv = W.shape[0]
        claims += [
            claim(
                "median_spread_per_pixel",
                float(np.median(spread) / nv),
                info.name,
                "median over fields of l_0.1 / Nv (fields scaled to peak 1); small = localised",
            ),
            claim(
                "fraction_localised_fields",
                float((spread / nv < 0.5).mean()),
                info.name,
                "fields with l_0.1 / Nv < 0.5",
            ),
            claim("mean_activation", float(act.mean()), info.name, "mean over hidden units"),
            claim("hidden_units", W.shape[1], info.name, ""),
        ]
        infos.append((info, float(np.median(spread) / nv), W.shape[1]))

    for dataset in dict.fromkeys(i.dataset for i, _, _ in infos):
        members = [(nh, s) for i, s, nh in infos if i.dataset == dataset]
        claims.append(
            claim(
                "spearman_hidden_units_vs_median_spread",
                _spearman([m[0] for m in members], [m[1] for m in members]),
                "",
                f"dataset {dataset}: negative = more localisation with larger Nh "
                f"({len(members)} models; NaN with fewer than 3)",
            )
        )

    n = len(panels)
    height = 0.9 + 0.78 * n
    fig = new_figure(8.5, height)
    fig.set_layout_engine(None)  # explicit margins: row labels sit left of the axes
    top = 1.0 - 0.75 / height
    fig.subplots_adjust(left=0.2, right=0.86, top=top, bottom=0.15 / height, hspace=0.12)
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    image = None
    for ax, (info, group, grid) in zip(axes, panels, strict=True):
        image = ax.imshow(grid, cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(f"{info.name}\n{group}", rotation=0, ha="right", va="center", fontsize=7)
    cax = fig.add_axes((0.89, 0.5 - 1.5 / height, 0.02, 3.0 / height))
    fig.colorbar(image, cax=cax, label="w / max|w|")
    datasets = ", ".join(dict.fromkeys(dataset_label(i.dataset, i.substitute) for i, _, _ in infos))
    fig.suptitle(
        f"Fig. 4: receptive fields ranked by l_0.1 spread and by mean activation\n{datasets}",
        fontsize=9,
    )
    return FigureResult(
        fig,
        table(rows, claims),
        [i for i, _, _ in infos],
        params={
            "n_images": n_images,
            "per_group": per_group,
            "data_files": [str(Path(f)) for f in data_files],
        },
    )
