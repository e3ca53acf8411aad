"""Fig. 12 (App. F): TAP log-likelihood, AIS log-likelihood and pseudo-likelihood after each epoch.

Drawn from ``results/likelihood/{model}/scores.csv`` (``likelihood.score_checkpoints``: one row per
epoch, all three measures on the same parameters). Every value is in nats per image: the TAP
log-likelihood unnormalised (eq. 39; Fig. 3 divides it by Nv + Nh), the AIS log-likelihood
-F(x) - ln Z_AIS with the band from ln Z_AIS +- 3 stderr, and the stochastic pseudo-likelihood
(``pl_sites`` random sites drawn anew for every image, scaled to all Nv sites). Test images are
drawn solid, training images (the rows the model was trained on, as in Fig. 3) dashed.

Claim (docs/claims.md): all three increase together. The table gives, per split, each
measure's change from the first to the last scored epoch, its Spearman rank correlation with
the epoch, the Spearman correlation of each pair across epochs, the sign of every
epoch-to-epoch change (drawn rows ``sign_*``) and the fraction of steps on which the three
signs agree, and a verdict ``rise_together`` (1 when every measure rises from the first to the
last epoch and every pairwise Spearman correlation is positive).

The drawn rows carry, beside each split's curves, what the title and the claim rows read from
the model and the scoring settings (``dataset``, ``substitute``, ``visible_units`` and
``SETTINGS``), so that ``from_table`` reads ``draw``'s inputs back from the CSV alone
(``figures.redraw``); a CSV written before they were carried cannot be redrawn.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tapmachine.figures.common import (
    PAGE,
    FigureError,
    FigureResult,
    ModelInfo,
    claim,
    dataset_label,
    model_info,
    new_figure,
    require_columns,
    size_note,
    styled,
    substitute_claims,
    table,
)
from tapmachine.tap_paper.likelihood.settings import PL_SITES_DRAWN_FOR

__all__ = ["make", "draw", "from_table", "agreement", "MEASURES", "SETTINGS"]

#: column prefix -> label, colour
MEASURES = {
    "tap_ll": ("TAP (eq. 39)", "C0"),
    "ais_ll": ("AIS", "C3"),
    "pl": ("pseudo-likelihood", "C2"),
}
_SPLIT_STYLE = {"test": "-", "train": "--"}

#: The columns of ``scores.csv`` that say how the epochs were scored (the same on every row):
#: the AIS schedule in words and its number of betas, the pseudo-likelihood's random sites and
#: what each draw of them served (``"every image"``; older runs drew them per block of images).
SETTINGS = ("ais_description", "ais_n_betas", "pl_sites", "pl_sites_drawn_for")

#: Per-epoch columns of ``scores.csv`` shared by the splits (the log partition function).
_SHARED = ("log_z_ais", "log_z_ais_stderr", "log_z_tap")


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return math.nan
    return float(spearmanr(a[ok], b[ok]).statistic)


def agreement(epochs: np.ndarray, curves: dict[str, np.ndarray]) -> dict:
    """Whether the curves rise together: per-measure and pairwise statistics across epochs.

    Returns ``{"increase": {m: last - first}, "spearman_epoch": {m: rho}, "spearman_pair":
    {(m1, m2): rho}, "signs": {m: sign of each step}, "steps_agree": fraction of steps on which
    all signs are equal, "rise_together": bool}``.
    """
    names = list(curves)
    out = {
        "increase": {m: float(curves[m][-1] - curves[m][0]) for m in names},
        "spearman_epoch": {m: _spearman(epochs, curves[m]) for m in names},
        "spearman_pair": {},
        "signs": {m: np.sign(np.diff(curves[m])) for m in names},
    }
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            out["spearman_pair"][(a, b)] = _spearman(curves[a], curves[b])
    signs = np.stack([out["signs"][m] for m in names]) if names else np.zeros((0, 0))
    if signs.shape[1]:
        out["steps_agree"] = float((signs == signs[0]).all(0).mean())
    else:
        out["steps_agree"] = math.nan
    pairs = list(out["spearman_pair"].values())
    out["rise_together"] = bool(
        len(epochs) >= 2
        and all(v > 0 for v in out["increase"].values())
        and pairs
        and all(np.isfinite(pairs))
        and all(p > 0 for p in pairs)
    )
    return out


def make(scores_csv, model_file) -> FigureResult:
    """Fig. 12 from a model's per-epoch ``scores.csv`` and its ``model.pt``."""
    info = model_info(model_file)
    result = draw(info, _read_scores(scores_csv))
    result.params = {"scores_csv": str(scores_csv), **result.params}
    return result


def _read_scores(scores_csv) -> pd.DataFrame:
    """A ``scores.csv`` sorted by epoch, checked to hold epochs, ln Z and a scored split."""
    df = pd.read_csv(scores_csv)
    if df.empty:
        raise FigureError(f"{scores_csv}: no epochs scored")
    need = {"epoch", "log_z_ais", "log_z_ais_stderr"}
    missing = need - set(df.columns)
    if missing:
        raise FigureError(f"{scores_csv}: missing columns {sorted(missing)}")
    if not _splits(df):
        raise FigureError(f"{scores_csv}: neither test nor train images were scored")
    return df.sort_values("epoch").reset_index(drop=True)


def _splits(scores: pd.DataFrame) -> list[str]:
    """The splits (test, train) whose AIS log-likelihood was computed at some epoch."""
    return [
        s
        for s in ("test", "train")
        if f"ais_ll_{s}" in scores and scores[f"ais_ll_{s}"].notna().any()
    ]


def _settings(scores: pd.DataFrame) -> dict:
    """``SETTINGS`` of a scoring, from its first row (a scores.csv without them: "AIS", NaN betas,
    -1 sites, and sites drawn as today's scoring draws them, ``PL_SITES_DRAWN_FOR``)."""
    return {
        "ais_description": (
            str(scores["ais_description"].iloc[0]) if "ais_description" in scores else "AIS"
        ),
        "ais_n_betas": (
            float(scores["ais_n_betas"].iloc[0]) if "ais_n_betas" in scores else math.nan
        ),
        "pl_sites": int(scores["pl_sites"].iloc[0]) if "pl_sites" in scores else -1,
        "pl_sites_drawn_for": (
            str(scores["pl_sites_drawn_for"].iloc[0])
            if "pl_sites_drawn_for" in scores
            else PL_SITES_DRAWN_FOR
        ),
    }


@styled
def draw(info: ModelInfo, scores: pd.DataFrame) -> FigureResult:
    """Fig. 12 of the model ``info`` from its per-epoch scores (the columns of ``scores.csv``,
    sorted by epoch): what ``make`` reads from the run's files, or ``from_table`` from the CSV."""
    splits = _splits(scores)
    if not splits:
        raise FigureError(f"{info.name}: neither test nor train images were scored")
    epochs = scores["epoch"].to_numpy(float)
    settings = _settings(scores)
    description, pl_sites = settings["ais_description"], settings["pl_sites"]
    nv = info.sizes[0] if info.sizes else "?"

    fig = new_figure(PAGE, 3.0)
    ax_abs, ax_gain, ax_gap = fig.subplots(1, 3)
    drawn, claims, key_entries = [], [], []
    for split in splits:
        style = _SPLIT_STYLE[split]
        n_images = int(scores[f"n_{split}_images"].iloc[0]) if f"n_{split}_images" in scores else -1
        curves = {}
        for key, (label, colour) in MEASURES.items():
            col = f"{key}_{split}"
            if col not in scores or scores[col].isna().all():
                continue
            y = scores[col].to_numpy(float)
            curves[key] = y
            kw = {"color": colour, "linestyle": style, "marker": "." if len(y) < 30 else None}
            (line,) = ax_abs.plot(epochs, y, label=f"{label}, {split} ({n_images} images)", **kw)
            key_entries.append((list(MEASURES).index(key), splits.index(split), line))
            ax_gain.plot(epochs, y - y[0], label=f"{label}, {split}", **kw)
            if key == "ais_ll":
                lo = scores[f"ais_ll_{split}_lower"].to_numpy(float)
                hi = scores[f"ais_ll_{split}_upper"].to_numpy(float)
                ax_abs.fill_between(epochs, lo, hi, color=colour, alpha=0.25, linewidth=0)
                ax_gain.fill_between(
                    epochs, lo - y[0], hi - y[0], color=colour, alpha=0.25, linewidth=0
                )
        if "ais_ll" in curves:
            ais = curves["ais_ll"]
            for key in ("tap_ll", "pl"):
                if key in curves:
                    label, colour = MEASURES[key]
                    ax_gap.plot(
                        epochs,
                        curves[key] - ais,
                        color=colour,
                        linestyle=style,
                        marker="." if len(ais) < 30 else None,
                        label=f"{label} - AIS, {split}",
                    )
            band = scores[f"ais_ll_{split}_upper"] - scores[f"ais_ll_{split}_lower"]
            half = 0.5 * band.to_numpy(float)
            ax_gap.fill_between(epochs, -half, half, color=MEASURES["ais_ll"][1], alpha=0.25, lw=0)
        stats = agreement(epochs, curves)
        for i, e in enumerate(epochs):
            row = {
                "model": info.name,
                "dataset": info.dataset,
                "substitute": info.substitute,
                "split": split,
                "epoch": int(e),
                "n_images": n_images,
            }
            for key, y in curves.items():
                row[key] = y[i]
                row[f"sign_{key}"] = stats["signs"][key][i - 1] if i > 0 else math.nan
            row["ais_ll_lower"] = scores[f"ais_ll_{split}_lower"].iloc[i]
            row["ais_ll_upper"] = scores[f"ais_ll_{split}_upper"].iloc[i]
            per_unit = f"tap_ll_per_unit_{split}"
            row["tap_ll_per_unit"] = scores[per_unit].iloc[i] if per_unit in scores else math.nan
            row["log_z_ais"] = scores["log_z_ais"].iloc[i]
            row["log_z_ais_stderr"] = scores["log_z_ais_stderr"].iloc[i]
            row["log_z_tap"] = scores["log_z_tap"].iloc[i] if "log_z_tap" in scores else math.nan
            row["visible_units"] = info.sizes[0] if info.sizes else math.nan
            row.update(settings)
            if i > 0:
                signs = [stats["signs"][k][i - 1] for k in curves]
                row["signs_agree"] = float(len(set(signs)) == 1)
            drawn.append(row)
        claims += _claims(info.name, split, stats)
    first, last = int(epochs[0]), int(epochs[-1])
    claims.append(claim("ais_n_betas", settings["ais_n_betas"], info.name, description))
    claims.append(
        claim(
            "pl_sites",
            float(pl_sites),
            info.name,
            f"pseudo-likelihood over {pl_sites} random sites of {nv}, drawn for "
            f"{settings['pl_sites_drawn_for']}, "
            f"scaled by {nv}/{pl_sites}: nats per image",
        )
    )
    for split in splits:
        n = int(scores[f"n_{split}_images"].iloc[0]) if f"n_{split}_images" in scores else -1
        claims.append(
            claim(
                f"n_images.{split}",
                float(n),
                info.name,
                f"first {n} {split} images scored; App. F scores each epoch 'as in Fig. 3(a)', "
                "i.e. training images; test images are the held-out check",
            )
        )
    claims.append(
        claim(
            "ais_log_z_stderr_max",
            float(scores["log_z_ais_stderr"].max()),
            info.name,
            "largest AIS standard error of ln Z over the epochs (the band is +- 3 of them)",
        )
    )

    ax_abs.set_xlabel("epoch")
    ax_abs.set_ylabel("log-likelihood (nats per image)")
    ax_abs.set_title("(a) value")
    ax_gain.set_xlabel("epoch")
    ax_gain.set_ylabel(f"change since epoch {first} (nats per image)")
    ax_gain.set_title("(b) change since the first scored epoch")
    ax_gap.axhline(0.0, color=MEASURES["ais_ll"][1], linewidth=0.8)
    ax_gap.set_xlabel("epoch")
    ax_gap.set_ylabel("surrogate minus AIS (nats per image)")
    ax_gap.set_title("(c) offset from AIS")
    for ax in (ax_abs, ax_gain, ax_gap):
        ax.grid(alpha=0.3)
    # One key for the three panels, below them: a column per measure (colour), a row per split
    # (line style).
    key = [line for *_, line in sorted(key_entries, key=lambda e: e[:2])]
    columns = len({measure for measure, *_ in key_entries})
    fig.legend(key, [k.get_label() for k in key], loc="outside lower center", ncols=columns)
    claims.append(
        claim(
            "estimators",
            math.nan,
            info.name,
            f"epochs {first}-{last}; AIS: {description}; PL: {pl_sites} of {nv} sites",
        )
    )
    fig.suptitle(
        f"Fig. 12: TAP, AIS and pseudo-likelihood over training, {info.name} on "
        f"{dataset_label(info.dataset, info.substitute)}"
        + (f"\n{note}" if (note := size_note(last)) else ""),
    )
    return FigureResult(
        fig,
        table(drawn, claims + substitute_claims([info])),
        [info],
        params={"ais": description, "pl_sites": pl_sites},
    )


def from_table(figure_table: pd.DataFrame) -> tuple[ModelInfo, pd.DataFrame]:
    """What ``draw`` draws, read back from a Fig. 12 table (its CSV, read by pandas; a run whose
    ``scores.csv`` and ``model.pt`` are gone): the model's ``ModelInfo`` (name, dataset,
    substitute and visible units) and its per-epoch scores in the columns of ``scores.csv``, each
    split's curves from its drawn rows, ln Z and ``SETTINGS`` from any of them."""
    drawn = figure_table[figure_table["kind"] == "drawn"]
    require_columns(
        drawn,
        (
            "model",
            "dataset",
            "substitute",
            "visible_units",
            "split",
            "epoch",
            "n_images",
            "ais_ll",
            "ais_ll_lower",
            "ais_ll_upper",
            "log_z_ais",
            "log_z_ais_stderr",
            *SETTINGS,
        ),
    )
    models = list(dict.fromkeys(drawn["model"]))
    if len(models) != 1:
        raise FigureError(f"a Fig. 12 table draws one model, this one {models}")
    first = drawn.iloc[0]
    substitute, visible = first["substitute"], pd.to_numeric(first["visible_units"])
    info = ModelInfo(
        str(models[0]),
        str(first["dataset"]),
        substitute if isinstance(substitute, str) else "",
        sizes=(int(visible),) if np.isfinite(visible) else (),
    )
    return info, _scores(drawn)


def _scores(drawn: pd.DataFrame) -> pd.DataFrame:
    """The columns of ``scores.csv`` that ``draw`` reads, one row per epoch, from Fig. 12's drawn
    rows (one per split and epoch)."""
    epochs = sorted({int(e) for e in drawn["epoch"]})
    scores = pd.DataFrame({"epoch": epochs})
    by_split = {
        split: rows.assign(epoch=rows["epoch"].astype(int)).set_index("epoch").reindex(epochs)
        for split, rows in drawn.groupby("split", sort=False)
    }
    for split, rows in by_split.items():
        for key in MEASURES:
            if key in rows:
                scores[f"{key}_{split}"] = rows[key].to_numpy(float)
        for bound in ("lower", "upper"):
            scores[f"ais_ll_{split}_{bound}"] = rows[f"ais_ll_{bound}"].to_numpy(float)
        if "tap_ll_per_unit" in rows:
            scores[f"tap_ll_per_unit_{split}"] = rows["tap_ll_per_unit"].to_numpy(float)
        scores[f"n_{split}_images"] = int(rows["n_images"].iloc[0])
    rows = next(iter(by_split.values()))
    for column in _SHARED:
        if column in rows:
            scores[column] = rows[column].to_numpy(float)
    for column in SETTINGS:
        scores[column] = drawn[column].iloc[0]
    return scores


def _claims(model: str, split: str, stats: dict) -> list[dict]:
    out = []
    for key, value in stats["increase"].items():
        out.append(
            claim(f"increase_first_to_last.{key}.{split}", value, model, "rises: > 0 (nats)")
        )
    for key, value in stats["spearman_epoch"].items():
        out.append(
            claim(
                f"spearman_with_epoch.{key}.{split}",
                value,
                model,
                "Spearman rank correlation of the measure with the epoch (1 = monotone rise)",
            )
        )
    for (a, b), value in stats["spearman_pair"].items():
        out.append(
            claim(
                f"spearman.{a}_vs_{b}.{split}",
                value,
                model,
                "Spearman rank correlation of the two measures across epochs",
            )
        )
    out.append(
        claim(
            f"fraction_steps_signs_agree.{split}",
            stats["steps_agree"],
            model,
            "fraction of epoch-to-epoch changes on which all three measures move the same way",
        )
    )
    out.append(
        claim(
            f"rise_together.{split}",
            bool(stats["rise_together"]),
            model,
            "1 = every measure rises from first to last epoch and every pairwise Spearman > 0",
            held=bool(stats["rise_together"]),
        )
    )
    return out
