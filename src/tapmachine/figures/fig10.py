"""Fig. 10 (App. D): adaTAP vs TAP for training binary RBMs.

Left: pseudo-likelihood (nats per image, stochastic over ``pl_sites`` sites drawn for every image,
App. F) of training images after every epoch of RBMs trained with TAP or adaTAP gradients,
each iterated a fixed number of times (``tap.train_iterations``: 3, 10, 100 in the paper, damping
0.5). Right: seconds per inference iteration vs batch size, TAP (Alg. 1) and adaTAP (Alg. 3),
measured in one run on the same machine and inputs (log-log).

Claims (docs/claims.md): all strategies comparable except adaTAP with 3 iterations, which is
the outlier (poorer); adaTAP is orders of magnitude slower per iteration. The strategies are
compared at ``epoch`` (``deep.fig10.epoch``; the paper gives no epoch count), else at each
curve's last epoch; the curves are drawn whole. The table gives, per
model, the final pseudo-likelihood; ``adatap3_is_outlier`` is 1 when adaTAP-3 ends lowest,
below every other curve by more than the spread among the others and by more than twice the
standard error of its gap to the lowest other (paired over the images, which every curve scores
on the same sites: ``deep-curve --last-rows``); ``time_ratio`` is the
adaTAP/TAP time per iteration at each batch size (the paper's batch is 100);
``paper_strategies_not_run`` counts the paper's six strategies without a curve (named in its
detail and, at the paper's size, in the title).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tapmachine.figures.common import (
    PAGE,
    FigureError,
    FigureResult,
    claim,
    describe,
    legend_below,
    model_info,
    new_figure,
    styled,
    substitute_claims,
    table,
)

__all__ = ["PAPER_STRATEGIES", "load_last_rows", "make", "outlier"]


#: Fig. 10's six strategies in the paper: TAP and adaTAP, each iterated 3, 10 and 100 times.
PAPER_STRATEGIES = tuple(
    f"{method} {its} it." for method in ("TAP", "adaTAP") for its in (3, 10, 100)
)


#: Curves of at most this many epochs are drawn point by point with error bars, longer ones as a
#: line in a band.
MARKED_EPOCHS = 20


def _label(inference: str, iterations: int) -> str:
    return f"{'adaTAP' if inference == 'adatap' else 'TAP'} {iterations} it."


def outlier(
    finals: dict[str, float],
    candidate: str,
    stderrs: dict[str, float] | None = None,
    rows: dict[str, np.ndarray] | None = None,
) -> tuple[bool, str]:
    """Whether ``candidate`` ends below every other curve by more than their spread and by more
    than twice the standard error of its difference from the lowest other curve (so that
    estimator noise alone does not make an outlier).

    That standard error is the paired one, std(others' rows - candidate's rows) / sqrt(n), where
    ``rows`` holds both curves' last-epoch values per image (scored on the same images and
    sites: ``deep-curve --last-rows``); else hypot of the two final ``stderrs``, which for
    curves sharing their images and sites overstates the noise of their difference."""
    others = {k: v for k, v in finals.items() if k != candidate}
    if candidate not in finals or not others:
        return False, "needs the candidate and at least one other curve"
    lowest = min(others, key=others.get)
    lo, hi = others[lowest], max(others.values())
    gap = lo - finals[candidate]
    spread = hi - lo
    noise, kind = 0.0, None
    if rows is not None and candidate in rows and lowest in rows:
        a, b = np.asarray(rows[lowest], float), np.asarray(rows[candidate], float)
        if a.shape != b.shape:
            raise FigureError(
                f"fig10: {lowest!r} and {candidate!r} were scored on {a.size} and {b.size} "
                "images: the paired standard error needs the same images"
            )
        diff = a - b
        if diff.size < 2:
            raise FigureError(f"fig10: {diff.size} paired row(s) for {candidate!r}, need 2 or more")
        noise, kind = 2.0 * float(diff.std(ddof=1)) / math.sqrt(diff.size), "paired "
    elif stderrs is not None:
        noise = 2.0 * math.hypot(stderrs.get(candidate, 0.0), stderrs.get(lowest, 0.0))
        kind = ""
    verdict = gap > 0 and gap > spread and gap > noise
    detail = (
        f"final PL {finals[candidate]:.3f} vs others {lo:.3f}..{hi:.3f} "
        f"(gap below the lowest other {gap:.3f}, spread among others {spread:.3f}"
        + (f", 2 {kind}stderr of the gap {noise:.3f})" if kind is not None else ")")
    )
    return verdict, detail


def load_last_rows(paths) -> list[tuple[int, np.ndarray]]:
    """The epoch and per-image pseudo-likelihoods of each ``deep-curve --last-rows`` file."""
    out = []
    for path in paths:
        try:
            with np.load(path) as npz:
                out.append((int(npz["epoch"]), np.asarray(npz["pl"], float)))
        except (OSError, KeyError, ValueError) as err:
            raise FigureError(f"{path}: no per-image pseudo-likelihood 'pl' ({err})") from err
    return out


def _at_epoch(df: pd.DataFrame, epoch: int | None, path) -> pd.Series:
    """The curve's row at ``epoch`` (its last row for None)."""
    if epoch is None:
        return df.iloc[-1]
    rows = df[df["epoch"] == epoch]
    if rows.empty:
        raise FigureError(
            f"{path}: no epoch {epoch} (epochs {int(df['epoch'].min())}..{int(df['epoch'].max())})"
            ": every curve must reach deep.fig10.epoch"
        )
    return rows.iloc[0]


@styled
def make(curve_csvs, model_files, timing_csv, last_rows=None, epoch=None) -> FigureResult:
    """Fig. 10 from the models' ``deep-curve`` CSVs (same order as their ``model.pt``), the
    timing CSV and, optionally, their ``--last-rows`` files (same order: the outlier verdict's
    paired standard error, used when every file holds the compared epoch), the strategies
    compared at ``epoch`` (None: each curve's last)."""
    if len(curve_csvs) != len(model_files):
        raise FigureError("fig10 needs one model.pt per curve CSV")
    if last_rows is not None and len(last_rows) != len(curve_csvs):
        raise FigureError("fig10 needs one --last-rows file per curve CSV")
    per_image = load_last_rows(last_rows) if last_rows is not None else None
    rows_note = ""
    if per_image is not None and epoch is not None:
        elsewhere = [
            f"{path} (epoch {e})"
            for path, (e, _) in zip(last_rows, per_image, strict=True)
            if e != epoch
        ]
        if elsewhere:
            per_image = None
            rows_note = f"; per-image rows not at epoch {epoch}: {', '.join(elsewhere)}"
    infos = [model_info(f) for f in model_files]
    frames = []
    for path in curve_csvs:
        df = pd.read_csv(path)
        if df.empty or "pl" not in df:
            raise FigureError(f"{path}: no pseudo-likelihood per epoch (deep-curve --measure pl)")
        frames.append(df.sort_values("epoch"))
    timing = pd.read_csv(timing_csv).sort_values("batch_size")
    if timing.empty:
        raise FigureError(f"{timing_csv}: no timings")

    fig = new_figure(PAGE, 3.0)
    ax_pl, ax_t = fig.subplots(1, 2)
    drawn, claims, finals, final_stderrs, final_rows = [], [], {}, {}, {}
    labels = {}
    for i, (info, df) in enumerate(zip(infos, frames, strict=True)):
        inference = str(df["inference"].iloc[0])
        its = int(df["train_iterations"].iloc[0])
        label = _label(inference, its)
        labels[info.name] = label
        style = "-" if inference == "tap" else "--"
        if len(df) <= MARKED_EPOCHS:
            ax_pl.errorbar(
                df["epoch"],
                df["pl"],
                yerr=df["pl_stderr"],
                ls=style,
                marker="o",
                ms=3,
                capsize=2,
                label=label,
            )
        else:  # a line in its +-1 stderr band: markers and caps would hide the curves
            (line,) = ax_pl.plot(df["epoch"], df["pl"], ls=style, label=label)
            ax_pl.fill_between(
                df["epoch"],
                df["pl"] - df["pl_stderr"],
                df["pl"] + df["pl_stderr"],
                color=line.get_color(),
                alpha=0.25,
                lw=0,
            )
        compared = _at_epoch(df, epoch, curve_csvs[i])
        finals[label] = float(compared["pl"])
        final_stderrs[label] = float(compared["pl_stderr"])
        if per_image is not None:
            final_rows[label] = per_image[i][1]
        for _, r in df.iterrows():
            drawn.append(
                {
                    "panel": "pl",
                    "model": info.name,
                    "label": label,
                    "epoch": int(r["epoch"]),
                    "value": r["pl"],
                    "stderr": r["pl_stderr"],
                }
            )
        claims.append(claim("final_pl", finals[label], info.name, label, int(compared["epoch"])))
    ax_pl.set_xlabel("epoch")
    ax_pl.set_ylabel("pseudo-likelihood (nats / image)")
    legend_below(ax_pl, ncols=2)  # a column of TAP, one of adaTAP
    ax_pl.set_title("pseudo-likelihood over training")

    b = timing["batch_size"].to_numpy(float)
    ax_t.loglog(b, timing["tap_seconds"], "o-", label="TAP (Alg. 1)")
    ax_t.loglog(b, timing["adatap_seconds"], "s--", label="adaTAP / VAMP (Alg. 3)")
    ax_t.set_xlabel("batch size")
    ax_t.set_ylabel("seconds per iteration")
    legend_below(ax_t, ncols=1)
    t0 = timing.iloc[0]
    ax_t.set_title(
        f"one iteration, Nv={int(t0['n_visible'])}, Nh={int(t0['n_hidden'])}, "
        f"{int(t0['threads'])} thread(s), {t0['dtype']}",
    )
    for _, r in timing.iterrows():
        drawn.append(
            {
                "panel": "timing",
                "label": "tap",
                "batch_size": int(r["batch_size"]),
                "value": r["tap_seconds"],
            }
        )
        drawn.append(
            {
                "panel": "timing",
                "label": "adatap",
                "batch_size": int(r["batch_size"]),
                "value": r["adatap_seconds"],
            }
        )
        claims.append(
            claim(
                f"time_ratio_batch_{int(r['batch_size'])}",
                float(r["ratio"]),
                "",
                f"adaTAP / TAP seconds per iteration at batch {int(r['batch_size'])}: "
                f"{r['adatap_seconds']:.3g} s / {r['tap_seconds']:.3g} s",
            )
        )
    at100 = timing[timing["batch_size"] == 100]
    if len(at100):
        ratio = float(at100["ratio"].iloc[0])
        claims.append(
            claim(
                "adatap_orders_slower_at_batch_100",
                ratio >= 100,
                "",
                f"held: ratio {ratio:.0f} (log10 {math.log10(ratio):.1f}; paper: ~3 orders)"
                if ratio >= 100
                else f"not held: ratio {ratio:.0f} < 100",
            )
        )

    ada3 = [lab for lab in finals if lab.startswith("adaTAP 3 ")]
    if ada3:
        verdict, detail = outlier(finals, ada3[0], final_stderrs, final_rows or None)
        claims.append(
            claim(
                "adatap3_is_outlier",
                verdict,
                "",
                ("held: " if verdict else "not held: ")
                + detail
                + (f" at epoch {epoch}" if epoch is not None else "")
                + rows_note,
            )
        )
        others = [v for k, v in finals.items() if k != ada3[0]]
        claims.append(
            claim(
                "spread_of_others",
                float(np.ptp(others)) if others else math.nan,
                "",
                "max - min final PL of the other strategies",
            )
        )

    sizes = infos[0].sizes
    n_images = int(frames[0]["n_images"].iloc[0]) if "n_images" in frames[0] else None
    absent = [lab for lab in PAPER_STRATEGIES if lab not in labels.values()]
    claims.append(
        claim(
            "paper_strategies_not_run",
            float(len(absent)),
            "",
            ", ".join(absent) if absent else "all six of the paper's strategies ran",
        )
    )
    note = (
        ""
        if sizes and sizes[-1] >= 500
        else ("\nREDUCED SIZE (paper: Nh = 500 on 5,000 images; workflow/config/paper.yaml)")
    )
    if absent and not note:
        note = f"\nnot run: {', '.join(absent)} (CPU-hours: a GPU's job; docs/runbook.md)"
    fig.suptitle(
        f"Fig. 10: TAP vs adaTAP, {describe(infos[0]).split(' on ')[-1]}, RBM {sizes}"
        + (f", {n_images} images scored" if n_images else "")
        + (f", compared at epoch {epoch}" if epoch is not None else "")
        + note,
    )
    claims += substitute_claims(infos[:1])
    return FigureResult(fig, table(drawn, claims), infos, {"labels": labels})
