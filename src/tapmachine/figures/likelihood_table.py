"""Likelihood table: TAP-trained vs CD-1 / CD-25 / PCD-trained RBMs by AIS test log-likelihood.

Drawn from each model's ``results/likelihood/{model}/final.csv`` (``likelihood.score_model``: one
row, AIS ln Z +- 3 stderr and the test log-likelihood in nats per image, with the model's training
settings). Beside the models computed here stands the published value of Salakhutdinov & Murray
(2008) for a CD-25-trained RBM with 500 hidden units on the MNIST test set: a reference row
(``source`` = "published", ``computed`` = 0), quoted, never computed by this pipeline, and trained
with their own binarisation, training set and schedule, so it is a yardstick, not a like-for-like
comparison. The chart draws each model's AIS test log-likelihood with its +- 3 sigma interval
(from ln Z) and the reference as a separate marker.
"""

from __future__ import annotations

import math

import pandas as pd

from tapmachine.figures.common import (
    FigureError,
    FigureResult,
    claim,
    model_info,
    new_figure,
    table,
)

__all__ = ["REFERENCE", "make", "method_label"]

#: The published yardstick (quoted, not computed).
REFERENCE = {
    "model": "Salakhutdinov & Murray (2008), CD-25, 500 hidden units",
    "method": "cd",
    "method_label": "CD-25 (published)",
    "sampling_steps": 25,
    "hidden_units": 500,
    "ais_ll_test": -86.34,
    "source": "published",
    "computed": 0,
    "reference": (
        "R. Salakhutdinov and I. Murray, On the quantitative analysis of deep belief networks, "
        "Proc. ICML 2008, pp. 872-879: CD-25-trained RBM with 500 hidden units, AIS estimate of "
        "the average test log-probability on MNIST, about -86.34 nats. Quoted, not computed here; "
        "their training (data, binarisation, length) differs from this pipeline's."
    ),
}


def method_label(method: str, steps) -> str:
    """ "TAP", "CD-25", "PCD-1", ..."""
    method = str(method).lower()
    if method == "tap":
        return "TAP"
    try:
        k = int(float(steps))
    except (TypeError, ValueError):
        k = 1
    return f"{method.upper()}-{k}"


def make(score_csvs: list, model_files: list, reference: bool = True) -> FigureResult:
    """The table and its chart from each model's ``final.csv`` and ``model.pt`` (same order)."""
    if len(score_csvs) != len(model_files) or not score_csvs:
        raise FigureError("likelihood_table needs one final.csv per model.pt (at least one)")
    infos, rows = [], []
    for csv_file, model_file in zip(score_csvs, model_files, strict=True):
        info = model_info(model_file)
        df = pd.read_csv(csv_file)
        need = {"ais_ll_test", "ais_ll_test_lower", "ais_ll_test_upper", "method"}
        missing = need - set(df.columns)
        if df.empty or missing:
            raise FigureError(f"{csv_file}: no scored row or missing columns {sorted(missing)}")
        r = df.iloc[0].to_dict()
        epochs = r.get("epochs")
        n_train = r.get("n_train")
        updates = r.get("updates", math.nan)
        rows.append(
            {
                "model": info.name,
                "method": r["method"],
                "method_label": method_label(r["method"], r.get("sampling_steps")),
                "sampling_steps": r.get("sampling_steps"),
                "hidden_units": r.get("hidden_units"),
                "n_train": n_train,
                "epochs": epochs,
                "updates": updates,
                "ais_ll_test": r["ais_ll_test"],
                "ais_ll_test_lower": r["ais_ll_test_lower"],
                "ais_ll_test_upper": r["ais_ll_test_upper"],
                "ais_ll_test_stderr_images": r.get("ais_ll_test_stderr"),
                "log_z_ais": r.get("log_z_ais"),
                "log_z_ais_stderr": r.get("log_z_ais_stderr"),
                "tap_ll_test": r.get("tap_ll_test"),
                "pl_test": r.get("pl_test"),
                "n_test_images": r.get("n_test_images"),
                "ais": r.get("ais_description"),
                "source": "computed here",
                "computed": 1,
                "reference": "",
            }
        )
        infos.append(info)
    if reference:
        rows.append(dict(REFERENCE))
    drawn = pd.DataFrame(rows)

    fig = new_figure(7.5, 0.9 + 0.55 * len(rows))
    ax = fig.subplots()
    labels = []
    for y, r in enumerate(rows):
        value = r["ais_ll_test"]
        if r["computed"]:
            lo, hi = r["ais_ll_test_lower"], r["ais_ll_test_upper"]
            colour = "C0" if r["method"] == "tap" else "C1"
            ax.errorbar(
                value,
                y,
                xerr=[[value - lo], [hi - value]],
                fmt="o",
                color=colour,
                capsize=4,
            )
            ax.annotate(
                f"{value:.2f} [{lo:.2f}, {hi:.2f}]",
                (value, y),
                xytext=(-4, 7),
                textcoords="offset points",
                ha="left",
                fontsize=7,
            )
            shape = f"{r['n_train']} img x {r['epochs']} ep = {r['updates']} updates"
            labels.append(f"{r['method_label']}: {r['model']}\n{shape}")
        else:
            ax.plot(value, y, marker="*", markersize=12, color="0.3", linestyle="none")
            ax.annotate(
                f"{value:.2f} (published)",
                (value, y),
                xytext=(4, 7),
                textcoords="offset points",
                ha="right",
                fontsize=7,
            )
            labels.append("Salakhutdinov & Murray 2008\nCD-25, Nh=500 (published)")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.margins(x=0.12)
    ax.invert_yaxis()
    ax.set_xlabel("AIS test log-likelihood (nats per image); bars: ln Z +- 3 stderr")
    ax.grid(axis="x", alpha=0.3)
    schedules = sorted({str(r["ais"]) for r in rows if r["computed"]})
    n_test = sorted({int(r["n_test_images"]) for r in rows if r["computed"]})
    fig.suptitle(
        "RBMs trained by TAP, CD and PCD: mean AIS log-likelihood of "
        f"{' / '.join(str(n) for n in n_test)} MNIST test images\n"
        f"AIS: {'; '.join(schedules)}; training lengths differ (updates shown)",
        fontsize=9,
    )
    claims = [
        claim(
            "ais_ll_test",
            float(r["ais_ll_test"]),
            r["model"],
            f"{r['method_label']}, nats per image, +- 3 sigma "
            f"[{r['ais_ll_test_lower']:.2f}, {r['ais_ll_test_upper']:.2f}]; {r['ais']}",
        )
        for r in rows
        if r["computed"]
    ]
    computed = drawn[drawn["computed"] == 1]
    tap_rows = computed[computed["method"] == "tap"]
    others = computed[computed["method"] != "tap"]
    if len(tap_rows) and len(others):
        best_other = others.loc[others["ais_ll_test"].idxmax()]
        t = tap_rows.iloc[0]
        separated = (
            t["ais_ll_test_lower"] > best_other["ais_ll_test_upper"]
            or t["ais_ll_test_upper"] < best_other["ais_ll_test_lower"]
        )
        claims.append(
            claim(
                "tap_minus_best_sampling_baseline",
                float(t["ais_ll_test"] - best_other["ais_ll_test"]),
                t["model"],
                f"TAP minus {best_other['method_label']} ({best_other['model']}), nats; "
                f"+-3 sigma intervals {'separate' if separated else 'overlap'}",
            )
        )
    if reference:
        claims.append(
            claim(
                "published_reference_cd25_h500",
                REFERENCE["ais_ll_test"],
                "",
                "Salakhutdinov & Murray (2008): published, not computed here",
            )
        )
    return FigureResult(
        fig,
        table(drawn, claims),
        infos,
        params={"score_csvs": [str(c) for c in score_csvs], "reference": reference},
    )
