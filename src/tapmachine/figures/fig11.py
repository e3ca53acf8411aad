"""Fig. 11 (App. E): deep TAP machines, normalised TAP log-likelihood over joint training.

One panel per model (2 and 3 hidden layers in the paper): the TAP log-likelihood of eq. (121),
with clamped TAP solutions for the data term and the unique converged free solutions from
training images for ln Z, divided by the number of units, of training and test images after
every joint-training epoch (Alg. 4; the greedy pretraining precedes epoch 1).

Claims (docs/claims.md): both curves rise, and the train-test gap shows generalisation. Per
model: ``train_rises`` / ``test_rises`` are 1 when the last epoch is above the first and the
Spearman correlation with the epoch is positive; ``train_test_gap`` is train - test at the last
epoch (nats per unit).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tapmachine.figures.common import (
    COLUMN,
    PAGE,
    FigureError,
    FigureResult,
    claim,
    describe,
    model_info,
    new_figure,
    styled,
    substitute_claims,
    table,
)

__all__ = ["make", "rises"]


def rises(epochs: np.ndarray, y: np.ndarray) -> tuple[bool, float, float]:
    """(rises, last - first, Spearman rho with the epoch) over the epochs with a value (NaN: TAP
    converged from no row at that epoch)."""
    from scipy.stats import spearmanr

    found = np.isfinite(y)
    epochs, y = epochs[found], y[found]
    if len(y) < 2:
        return False, math.nan, math.nan
    gain = float(y[-1] - y[0])
    rho = float(spearmanr(epochs, y).statistic) if len(y) >= 3 and np.ptp(y) > 0 else math.nan
    return bool(gain > 0 and (math.isnan(rho) or rho > 0)), gain, rho


@styled
def make(curve_csvs, model_files) -> FigureResult:
    from matplotlib.ticker import MaxNLocator

    if len(curve_csvs) != len(model_files):
        raise FigureError("fig11 needs one model.pt per curve CSV")
    infos = [model_info(f) for f in model_files]
    fig = new_figure(min(PAGE, COLUMN * len(infos)), 3.0)
    axes = np.atleast_1d(fig.subplots(1, len(infos)))
    drawn, claims = [], []
    for ax, info, path in zip(axes, infos, curve_csvs, strict=True):
        df = pd.read_csv(path).sort_values("epoch")
        need = {"epoch", "tap_ll_train", "tap_ll_test"}
        if df.empty or need - set(df.columns):
            raise FigureError(f"{path}: needs columns {sorted(need)} (deep-curve --measure tap)")
        e = df["epoch"].to_numpy(float)
        for split, colour in (("test", "C0"), ("train", "C1")):
            y = df[f"tap_ll_{split}"].to_numpy(float)
            se = df[f"tap_ll_{split}_stderr"].to_numpy(float)
            ax.errorbar(
                e, y, yerr=se, color=colour, marker="o", ms=3, capsize=2, label=f"{split} images"
            )
            for ep, v, s in zip(e, y, se, strict=True):
                drawn.append(
                    {"model": info.name, "split": split, "epoch": int(ep), "value": v, "stderr": s}
                )
            ok, gain, rho = rises(e, y)
            claims.append(
                claim(
                    f"{split}_rises",
                    ok,
                    info.name,
                    f"{'held' if ok else 'not held'}: last - first {gain:+.4f} nats/unit, "
                    f"Spearman rho {rho:.2f} over {int(np.isfinite(y).sum())} epochs",
                )
            )
        gap = float(df["tap_ll_train"].iloc[-1] - df["tap_ll_test"].iloc[-1])
        claims.append(
            claim(
                "train_test_gap",
                gap,
                info.name,
                "train - test TAP log-likelihood at the last epoch (nats/unit)",
                int(e[-1]),
            )
        )
        n_hidden = len(info.sizes) - 1
        ax.set_title(f"{n_hidden} hidden layers {info.sizes}")
        ax.set_xlabel("joint training epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("TAP log-likelihood per unit (eq. 121)")
        ax.legend()
    small = all(max(i.sizes[1:]) < 500 for i in infos)
    note = (
        ("\nREDUCED SIZE and epochs (paper: 50 pretraining + 3,000 joint epochs)") if small else ""
    )
    fig.suptitle(f"Fig. 11: deep TAP machines, {describe(infos[0]).split(' on ')[-1]}{note}")
    claims += substitute_claims(infos[:1])
    return FigureResult(fig, table(drawn, claims), infos)
