"""Fig. 3: normalised TAP log-likelihood (eq. 39 / (Nv + Nh)) per epoch, one panel per dataset.

Drawn from each model's ``metrics.csv`` (``tap_ll`` and its standard error ``tap_ll_stderr``
over the evaluated training images). Claim (reproduction.md): the log-likelihood rises fast, then
grows at a near-constant slope after about epoch 20. The table gives, per model, least-squares
slopes before and after a breakpoint -- epoch 20 when the run has at least 40 epochs, else the
midpoint epoch (the ``detail`` column says which) -- their ratio, and the R^2 of a straight line
over the late segment (near 1: constant slope). An epoch whose evaluation found no TAP solution
(``tap_ll`` NaN) is a gap in the curve, counted in the title and the table, and left out of the
fits.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from tapmachine.figures.common import (
    FigureError,
    FigureResult,
    claim,
    dataset_label,
    model_info,
    new_figure,
    size_note,
    table,
)

__all__ = ["make", "breakpoint_epoch", "segment_fit"]


def breakpoint_epoch(last_epoch: int) -> tuple[int, str]:
    """The epoch separating the fast rise from the constant-slope phase, and the rule used."""
    if last_epoch >= 40:
        return 20, "epoch 20 (paper)"
    return max(1, last_epoch // 2), f"midpoint epoch {max(1, last_epoch // 2)} of a short run"


def segment_fit(epochs: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(slope, R^2) of a least-squares line; NaN with fewer than 2 points."""
    if len(epochs) < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(epochs, values, 1)
    residual = values - (slope * epochs + intercept)
    total = ((values - values.mean()) ** 2).sum()
    r2 = 1.0 - (residual**2).sum() / total if total > 0 else 1.0
    return float(slope), float(r2)


def _title_note(curves) -> str:
    """Further title lines: the shortest run below the paper's 100 epochs, and epochs without a
    TAP solution."""
    notes = [size_note(min(int(df["epoch"].max()) for df in curves))]
    gaps = sum(int(df["tap_ll"].isna().sum()) for df in curves)
    if gaps:
        notes.append(f"{gaps} epoch(s) without a converged TAP solution: gaps in the curves")
    return "".join(f"\n{n}" for n in notes if n)


def make(metrics_files: list, model_files: list) -> FigureResult:
    """Fig. 3 for the models whose ``metrics.csv`` and ``model.pt`` are given (same order)."""
    if len(metrics_files) != len(model_files) or not metrics_files:
        raise FigureError("fig3 needs one metrics.csv per model.pt (and at least one model)")
    infos, curves = [], []
    for mfile, pfile in zip(metrics_files, model_files, strict=True):
        info = model_info(pfile)
        df = pd.read_csv(mfile)
        missing = {"epoch", "tap_ll", "tap_ll_stderr"} - set(df.columns)
        if missing:
            raise FigureError(f"{mfile}: missing columns {sorted(missing)}")
        if df.empty:
            raise FigureError(f"{mfile}: no epochs")
        infos.append(info)
        curves.append(df.sort_values("epoch"))

    datasets = list(dict.fromkeys(i.dataset for i in infos))
    fig = new_figure(4.6 * len(datasets), 3.8)
    axes = fig.subplots(1, len(datasets), squeeze=False)[0]
    drawn, claims = [], []
    for ax, dataset in zip(axes, datasets, strict=True):
        substitute = ""
        for info, df in zip(infos, curves, strict=True):
            if info.dataset != dataset:
                continue
            substitute = substitute or info.substitute
            e = df["epoch"].to_numpy(float)
            m = df["tap_ll"].to_numpy(float)
            s = df["tap_ll_stderr"].to_numpy(float)
            nh = info.sizes[1] if len(info.sizes) > 1 else "?"
            (line,) = ax.plot(e, m, marker="." if len(e) < 30 else None, label=f"{info.name}")
            ax.fill_between(e, m - s, m + s, color=line.get_color(), alpha=0.25, linewidth=0)
            for ei, mi, si in zip(e, m, s, strict=True):
                drawn.append(
                    {
                        "model": info.name,
                        "dataset": dataset,
                        "hidden_units": nh,
                        "epoch": int(ei),
                        "tap_ll": mi,
                        "tap_ll_stderr": si,
                    }
                )
            claims += _claims(info.name, e, m)
        ax.set_title(dataset_label(dataset, substitute), fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("TAP log-likelihood per unit")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    substitutes = sorted({i.substitute for i in infos if i.substitute})
    fig.suptitle(
        "Fig. 3: normalised TAP log-likelihood (mean +- standard error over training images)\n"
        f"models {', '.join(i.name for i in infos)} on {', '.join(datasets)}"
        + (f" [SUBSTITUTE data: {'; '.join(substitutes)}]" if substitutes else "")
        + _title_note(curves),
        fontsize=9,
    )
    return FigureResult(
        fig,
        table(drawn, claims),
        infos,
        params={"metrics_files": [str(Path(f)) for f in metrics_files]},
    )


def _claims(model: str, epochs: np.ndarray, ll: np.ndarray) -> list[dict]:
    """The claims over the epochs that have a TAP log-likelihood (NaN: no solution converged),
    with a row counting the others when there are any."""
    found = np.isfinite(ll)
    gaps = []
    if not found.all():
        gaps.append(
            claim(
                "epochs_without_solution",
                float((~found).sum()),
                model,
                "epochs at which TAP converged from no evaluated row (gaps in the curve)",
            )
        )
    epochs, ll = epochs[found], ll[found]
    if len(epochs) == 0:
        return gaps
    last = int(epochs.max())
    b, rule = breakpoint_epoch(last)
    early = epochs <= b
    late = epochs >= b
    s_early, _ = segment_fit(epochs[early], ll[early])
    s_late, r2_late = segment_fit(epochs[late], ll[late])
    ratio = s_early / s_late if s_late and math.isfinite(s_late) else math.nan
    return [
        claim(
            "ll_increase_first_to_last",
            float(ll[-1] - ll[0]),
            model,
            "rises: > 0",
            held=bool(ll[-1] > ll[0]),
        ),
        claim("slope_before_breakpoint", s_early, model, f"per epoch, epochs <= {b}; {rule}"),
        claim("slope_after_breakpoint", s_late, model, f"per epoch, epochs >= {b}; {rule}"),
        claim(
            "slope_ratio_early_over_late",
            ratio,
            model,
            "fast rise then slower constant slope: > 1",
            held=bool(ratio > 1) if np.isfinite(ratio) else None,
        ),
        claim(
            "late_segment_linear_r2",
            r2_late,
            model,
            f"R^2 of a line over epochs >= {b}: near 1 = constant slope",
        ),
        claim("breakpoint_epoch", b, model, rule),
        *gaps,
    ]
