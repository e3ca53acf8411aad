"""Second paper, Tables 1-2: classifier FID and TAP log-likelihood of every DBM, the ablation,
and the verdicts on the paper's claims (see the package's docstring)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tapmachine.figures.common import FigureError, FigureResult, ModelInfo, claim, styled
from tapmachine.figures.common import table as make_table
from tapmachine.figures.ucd_dbm.images import PAPER_SIZES
from tapmachine.figures.ucd_dbm.table_image import table_figure

__all__ = [
    "AIS_LABEL",
    "FID_LABEL",
    "FLOOR_MODEL",
    "table1",
    "table1_from_scores",
    "table2",
    "table2_from_scores",
]

FID_LABEL = "classifier FID (small CNN features; not Inception FID)"


#: The title line of a table whose DBMs are below the paper's size, with what the paper's size
#: costs: 0.196 s a step on one H100 (``benchmarks/gpu_check.sh``; docs/ucd.md, GPU).
TABLE_SIZE_NOTE = (
    "REDUCED SIZE ({sizes}; paper: 6272-6272-6272, 100,000 steps, about 5.4 h on one H100)"
)


def _table_size_note(df: pd.DataFrame) -> str:
    """``TABLE_SIZE_NOTE`` for the score rows' sizes below the paper's ("" at paper size);
    score files written before ``sizes`` was recorded count as of unknown size."""
    from tapmachine.ucd.dbm import size_label

    paper = size_label(PAPER_SIZES)
    sizes = df["sizes"].fillna("unknown") if "sizes" in df else pd.Series(["unknown"] * len(df))
    reduced = sorted(set(sizes) - {paper})
    return "\n" + TABLE_SIZE_NOTE.format(sizes=", ".join(reduced)) if reduced else ""


def _scores(paths) -> pd.DataFrame:
    rows = []
    for p in paths:
        try:
            with open(p) as fh:
                rows.append(json.load(fh))
        except FileNotFoundError:
            raise FigureError(f"{p} not found: run `tapmachine ucd score` first") from None
    if not rows:
        raise FigureError("no score files")
    return pd.DataFrame(rows)


def _kendall(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    n = len(a)
    s, pairs = 0.0, 0
    for i in range(n):
        for j in range(i + 1, n):
            s += np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
            pairs += 1
    return s / pairs if pairs else float("nan")


#: The AIS column's label: the data term is a variational bound, so the value is a lower bound.
AIS_LABEL = "ais_ll_lower_bound"


def _rank_agreement(sub: pd.DataFrame, a: str, b: str, a_lower_better: bool) -> float:
    """Kendall tau between the rankings of columns a and b (1 = same ranking of the models).

    Higher log-likelihood is better; lower FID is better (sign flipped when ``a_lower_better``).
    """
    ok = sub[a].notna() & sub[b].notna()
    if ok.sum() < 2:
        return float("nan")
    x = sub.loc[ok, a] if a_lower_better else -sub.loc[ok, a]
    return _kendall(x, -sub.loc[ok, b])


def table1(score_paths) -> FigureResult:
    """Table 1 + beyond the paper: classifier FID, TAP log-likelihood and AIS log-likelihood
    (mean-field lower bound on the data term minus AIS ln Z, nats per image) per DBM, with the
    rank agreement of each pair of measures (Kendall tau; 1 = the same ranking of the methods).

    ``score_paths``: the score JSONs of ``tapmachine ucd score``, one per DBM."""
    return table1_from_scores(_scores(score_paths))


@styled
def table1_from_scores(scores: pd.DataFrame) -> FigureResult:
    """``table1`` from its score rows (one per DBM, the fields of its score JSON), e.g. those
    read back from a drawn table (``figures.redraw``)."""
    df = scores.sort_values(["dataset", "classifier_fid"]).reset_index(drop=True)
    if "sizes" not in df:
        df["sizes"] = "unknown"
    if "ais_ll" not in df:
        df["ais_ll"] = np.nan
    df[AIS_LABEL] = df["ais_ll"]
    claims = []
    for ds, sub in df.groupby("dataset"):
        for name, a, b, lower in (
            ("rank_agreement_kendall_fid_vs_tap_ll", "classifier_fid", "tap_ll", True),
            ("rank_agreement_kendall_fid_vs_ais_ll", "classifier_fid", "ais_ll", True),
            ("rank_agreement_kendall_tap_ll_vs_ais_ll", "tap_ll", "ais_ll", False),
        ):
            k = _rank_agreement(sub, a, b, lower)
            claims.append(claim(name, k, ds, "1 = same ranking, -1 = reversed"))
        best = sub.iloc[0]
        claims.append(
            claim(
                "ucd_lmi_best_fid",
                float(best["method"] == "ucd_lmi"),
                ds,
                f"lowest classifier FID: {best['model']} ({best['classifier_fid']:.3g})",
                held=best["method"] == "ucd_lmi",
            )
        )
        claims += _pcd_fails_claims(sub, ds)
        if sub["ais_ll"].notna().any():
            top = sub.loc[sub["ais_ll"].idxmax()]
            claims.append(
                claim(
                    "ucd_lmi_best_ais_ll",
                    float(top["method"] == "ucd_lmi"),
                    ds,
                    f"highest AIS log-likelihood bound: {top['model']} ({top['ais_ll']:.4g})",
                )
            )
        claims += _floor_claims(sub, ds) + _coupling_claims(sub, ds)
        if sub["classifier_accuracy"].notna().any():
            claims.append(
                claim(
                    "fid_classifier_test_accuracy",
                    float(sub["classifier_accuracy"].dropna().iloc[0]),
                    ds,
                    "the FID feature network's accuracy on the test set the samples are "
                    "compared with (goal: >= 0.99 on MNIST, >= 0.90 on Fashion-MNIST)",
                )
            )
    cols = [
        "dataset",
        "model",
        "method",
        "classifier_fid",
        "classifier_accuracy",
        "tap_ll",
        AIS_LABEL,
    ]
    cols.insert(3, "sizes")
    fig = table_figure(
        _with_floor(df),
        cols,
        "Table 1 (second paper): classifier FID (not Inception FID) and log-likelihoods of "
        "every DBM" + _table_size_note(df),
    )
    infos = [ModelInfo(name=f"{r.dataset}/{r.model}", dataset=r.dataset) for r in df.itertuples()]
    return FigureResult(fig, make_table(_with_floor(df), claims), infos, {"fid": FID_LABEL})


#: The floor row's model name in Table 1: the test set's two halves against each other.
FLOOR_MODEL = "floor: test halves"


def _with_floor(df: pd.DataFrame) -> pd.DataFrame:
    """Table 1's rows and, per dataset, the FID of two halves of the test set (score files'
    ``fid_floor``) as a row of its own: the value a perfect model would come near."""
    if "fid_floor" not in df:
        return df
    floors = (
        df.dropna(subset=["fid_floor"])
        .groupby("dataset", as_index=False)
        .agg(
            classifier_fid=("fid_floor", "first"),
            classifier_accuracy=("classifier_accuracy", "first"),
        )
    )
    floors["model"], floors["method"], floors["sizes"] = FLOOR_MODEL, "-", "-"
    return pd.concat([df, floors], ignore_index=True).sort_values(
        ["dataset", "classifier_fid"], kind="stable"
    )


def _floor_claims(sub: pd.DataFrame, ds: str) -> list:
    if "fid_floor" not in sub or sub["fid_floor"].isna().all():
        return []
    floor = float(sub["fid_floor"].dropna().iloc[0])
    best = float(sub["classifier_fid"].min())
    return [
        claim(
            "fid_floor_test_halves",
            floor,
            ds,
            f"FID of two halves of the test set; best model {best:.3g} ({best / floor:.3g}x)",
        )
    ]


def _pcd_fails_claims(sub: pd.DataFrame, ds: str) -> list:
    """Fig. 2: "the DBM trained with the vanilla PCD completely fails to learn data structure
    and generates meaningless samples": held when PCD without pretraining (``dbm_pcd``) has the
    highest classifier FID of the dataset's DBMs, its samples the furthest from the test
    images. Fig. 2's sample grid judges collapse (``fig2_pcd_without_pretraining_fails``); a
    PCD DBM can draw distinct samples that are still no digits, which this row catches."""
    pcd = sub[sub["method"] == "dbm_pcd"]
    if pcd.empty or len(pcd) == len(sub) or sub["classifier_fid"].isna().any():
        return []
    fid = float(pcd["classifier_fid"].min())
    others = sub[sub["method"] != "dbm_pcd"]
    runner = others.loc[others["classifier_fid"].idxmax()]
    return [
        claim(
            "pcd_worst_fid",
            fid,
            ds,
            f"classifier FID of PCD without pretraining {fid:.4g}; the other methods at most "
            f"{runner['classifier_fid']:.4g} ({runner['model']})",
            held=fid > runner["classifier_fid"],
        )
    ]


#: Sec. 5: "the coupling time of our UCD-LMI falls within the range from 5 to 30".
PAPER_TAU_RANGE = (5.0, 30.0)


def _coupling_claims(sub: pd.DataFrame, ds: str) -> list:
    """tau (coupling time) and T (local-search steps) over training of the UCD-LMI models.

    tau = 1 almost always is what Alg. 3 gives (``tapmachine.ucd.unbiased``): its proposal is
    uniform over the whole state, so from a local mode it is rejected at once; the tau row says so
    and gives T beside it, the count that does lie near the paper's "5 to 30".
    """
    rows = []
    lo, hi = PAPER_TAU_RANGE
    for r in sub[sub["method"] == "ucd_lmi"].itertuples():
        tau = getattr(r, "tau_mean_mean", float("nan"))
        if tau != tau:  # a score file without the training's tau
            continue
        name = f"{ds}/{r.model}"
        T = getattr(r, "T_mean_mean", float("nan"))
        t_text = (
            f"; local-search steps T per step: mean {T:.3g} (step means "
            f"{r.T_mean_min:.3g}-{r.T_mean_max:.3g}, largest {r.T_max:.0f})"
            if T == T
            else ""
        )
        rows.append(
            claim(
                "coupling_time_tau_5_to_30",
                tau,
                name,
                f"mean tau per step over training {tau:.3g} (range of step means "
                f"{r.tau_mean_min:.3g}-{r.tau_mean_max:.3g}, largest {r.tau_max:.0f}); "
                "tau = 1 almost always since the MH proposal is uniform over the whole state "
                "and is rejected from a local mode (ucd.unbiased)" + t_text,
                held=lo <= tau <= hi,
            )
        )
        if T == T:
            rows.append(
                claim(
                    "local_search_steps_T",
                    T,
                    name,
                    f"mean T per step over training {T:.3g} (range of step means "
                    f"{r.T_mean_min:.3g}-{r.T_mean_max:.3g}, largest {r.T_max:.0f}); "
                    f"in [{lo:g}, {hi:g}]: {'yes' if lo <= T <= hi else 'no'}",
                )
            )
    return rows


def _matters_most_claims(df: pd.DataFrame, reference: str, full) -> list:
    """Sec. 5 on Table 2: "without the unbiased gradient estimator, the generative performance
    drastically drops ... other techniques are also effective, while the improvement ... is not so
    great": the removal that raises the FID most is the unbiased gradient's.

    The models without it are those trained by another method than the reference (PCD in place
    of UCD-LMI); no verdict when the ablation has none of them or only them.
    """
    removed = df[df["model"] != reference]
    no_unbiased = removed["method"] != full["method"]
    if not no_unbiased.any() or no_unbiased.all():
        return []
    worst = removed.loc[removed["classifier_fid"].idxmax()]
    others = removed[~no_unbiased]
    runner = others.loc[others["classifier_fid"].idxmax()]
    ref = float(full["classifier_fid"])
    rise = removed.loc[no_unbiased, "classifier_fid"].max() - ref
    held = bool(worst["method"] != full["method"]) and rise > 0
    return [
        claim(
            "unbiased_gradient_matters_most",
            rise,
            ", ".join(removed.loc[no_unbiased, "model"]),
            f"FID rise without the unbiased gradient {rise:.4g}; largest of the other removals: "
            f"{runner['model']} {float(runner['classifier_fid']) - ref:.4g} "
            "(paper: 101.8 against 19.9)",
            held=held,
        )
    ]


def table2(score_paths) -> FigureResult:
    """Table 2: the ablation (MNIST), each component removed in turn; classifier FID. Verdicts:
    the unbiased gradient's removal raises the FID most (the paper's claim,
    ``unbiased_gradient_matters_most``), and each removal raises it (``removal_worsens_fid``).

    ``score_paths``: the score JSONs of ``tapmachine ucd score``, one per DBM, in table order."""
    return table2_from_scores(_scores(score_paths))


@styled
def table2_from_scores(scores: pd.DataFrame) -> FigureResult:
    """``table2`` from its score rows (one per DBM, in table order), e.g. those read back from a
    drawn table (``figures.redraw``)."""
    df = scores.reset_index(drop=True)
    if "sizes" not in df:
        df["sizes"] = "unknown"
    claims = []
    reference = "full" if (df["model"] == "full").any() else "ucd_lmi"
    full = df[df["model"] == reference]
    if len(full):
        ref = float(full["classifier_fid"].iloc[0])
        claims.append(
            claim(
                "ablation_at_one_size",
                float(df["sizes"].nunique() == 1),
                "",
                f"sizes {', '.join(sorted(df['sizes'].astype(str).unique()))}; "
                f"reference: {reference}",
                held=df["sizes"].nunique() == 1,
            )
        )
        claims += _matters_most_claims(df, reference, full.iloc[0])
        for r in df.itertuples():
            if r.model != reference:
                claims.append(
                    claim(
                        "removal_worsens_fid",
                        float(r.classifier_fid > ref),
                        r.model,
                        f"{r.classifier_fid:.4g} vs full UCD-LMI {ref:.4g}",
                        held=r.classifier_fid > ref,
                    )
                )
    if "ais_ll" not in df:
        df["ais_ll"] = np.nan
    df[AIS_LABEL] = df["ais_ll"]
    # The model's name says which component is removed; its full spec stays in the CSV (a JSON
    # cell would overflow the drawn table).
    cols = ["dataset", "model", "method", "sizes", "classifier_fid", "tap_ll", AIS_LABEL]
    fig = table_figure(
        df, cols, "Table 2 (second paper): ablation, classifier FID" + _table_size_note(df)
    )
    infos = [ModelInfo(name=f"{r.dataset}/{r.model}", dataset=r.dataset) for r in df.itertuples()]
    return FigureResult(fig, make_table(df, claims), infos, {"fid": FID_LABEL})
