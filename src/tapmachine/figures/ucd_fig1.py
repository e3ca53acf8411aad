"""Second paper, Fig. 1: steps to an unbiased gradient estimate vs dimension, four couplings.

Drawn from the long-form CSVs of ``tapmachine ucd steps`` (one per method; columns d, method,
rep, tau, T, capped). (a) tau + T (coupling time plus local-search steps) per method against d:
mean, and the 10-90% range over repetitions; a hollow marker flags a point where some chains hit
the cap (its mean is then a lower bound). (b) MH + LMI alone: T and tau separately.

Claims (docs/claims.md; Sec. 5.1): the Gibbs coupling grows exponentially with d (value: slope
of ln mean(tau + T) per unit d, fitted on the points without capped chains, d >= 5); MH + LMI has
tau = 1 for d >= 25 (value: the fraction of chains with tau = 1 over those dimensions); T grows
gradually (value: exponent of a power law fitted to mean T, d >= 5; held when below 1). Rows
``mean_tau_plus_T.d{d}`` give every mean (model = method) and ``tau_one_fraction.d{d}`` the
fraction of tau = 1 per point.
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
    legend_below,
    new_figure,
    styled,
    table,
)

__all__ = ["make", "summarise", "METHOD_STYLE"]

COLUMNS = ["d", "method", "rep", "tau", "T", "capped"]

#: method -> (label, colour, marker)
METHOD_STYLE = {
    "gibbs": ("Gibbs coupling (uniform init)", "C3", "s"),
    "gibbs_lmi": ("Gibbs coupling + local mode", "C1", "D"),
    "mh": ("MH coupling (uniform init)", "C0", "^"),
    "mh_lmi": ("MH coupling + local mode (UCD-LMI)", "C2", "o"),
}


def _read(paths) -> pd.DataFrame:
    frames = []
    for path in paths:
        try:
            df = pd.read_csv(path)
        except FileNotFoundError:
            raise FigureError(f"{path} not found: run `tapmachine ucd steps` first") from None
        missing = set(COLUMNS) - set(df.columns)
        if missing:
            raise FigureError(f"{path}: missing columns {sorted(missing)}")
        if df.empty:
            raise FigureError(f"{path}: no rows")
        unknown = set(df["method"]) - set(METHOD_STYLE)
        if unknown:
            raise FigureError(f"{path}: unknown methods {sorted(unknown)}")
        frames.append(df[COLUMNS])
    df = pd.concat(frames, ignore_index=True)
    if df.duplicated(["d", "method", "rep"]).any():
        raise FigureError("the step files repeat (d, method, rep): give each method once")
    return df.sort_values(["method", "d", "rep"]).reset_index(drop=True)


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Per (method, d): mean, std, 10/90% quantiles of tau + T, means of tau and T, caps."""
    df = df.assign(total=df["tau"] + df["T"])
    g = df.groupby(["method", "d"])
    out = pd.DataFrame(
        {
            "mean": g["total"].mean(),
            "std": g["total"].std(ddof=1),
            "q10": g["total"].quantile(0.1),
            "q90": g["total"].quantile(0.9),
            "tau_mean": g["tau"].mean(),
            "tau_q10": g["tau"].quantile(0.1),
            "tau_q90": g["tau"].quantile(0.9),
            "T_mean": g["T"].mean(),
            "T_q10": g["T"].quantile(0.1),
            "T_q90": g["T"].quantile(0.9),
            "tau_one": g["tau"].apply(lambda t: float((t == 1).mean())),
            "capped": g["capped"].sum(),
            "reps": g["rep"].count(),
        }
    )
    return out.reset_index()


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of y on x and its R^2 (nan with fewer than two distinct x)."""
    if len(x) < 2 or np.ptp(x) == 0:
        return math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    ss = float(((y - y.mean()) ** 2).sum())
    return float(slope), (1.0 - float((resid**2).sum()) / ss) if ss > 0 else math.nan


def exponential_and_linear_sse(d: np.ndarray, mean: np.ndarray) -> tuple[float, float]:
    """Squared errors, on the scale of ``mean``, of ``mean = exp(a + b d)`` (a, b fitted to
    ln mean) and of the least-squares line ``mean = c + e d``: a rise is called exponential only
    where the first describes the points better than the second (both have two parameters).
    NaN with fewer than three distinct d."""
    if len(np.unique(d)) < 3:
        return math.nan, math.nan
    b, a = np.polyfit(d, np.log(mean), 1)
    e, c = np.polyfit(d, mean, 1)
    return float(((np.exp(a + b * d) - mean) ** 2).sum()), float(((c + e * d - mean) ** 2).sum())


def _claims(s: pd.DataFrame) -> list[dict]:
    rows = []
    for _, r in s.iterrows():
        rows.append(
            claim(
                f"mean_tau_plus_T.d{int(r['d'])}",
                float(r["mean"]),
                model=r["method"],
                detail=f"std {r['std']:.3g}, 10-90% [{r['q10']:.3g}, {r['q90']:.3g}], mean tau "
                f"{r['tau_mean']:.3g}, mean T {r['T_mean']:.3g}, {int(r['capped'])} of "
                f"{int(r['reps'])} chains capped"
                + (" (mean is a lower bound)" if r["capped"] else ""),
            )
        )
        rows.append(
            claim(f"tau_one_fraction.d{int(r['d'])}", float(r["tau_one"]), model=r["method"])
        )
    for method in ("gibbs", "gibbs_lmi"):
        sub = s[(s["method"] == method) & (s["capped"] == 0) & (s["d"] >= 5)]
        slope, r2 = _fit(sub["d"].to_numpy(float), np.log(sub["mean"].to_numpy(float)))
        capped = s[(s["method"] == method) & (s["capped"] > 0)]["d"].tolist()
        if s[s["method"] == method].empty:
            continue
        means = s[s["method"] == method].sort_values("d")["mean"].to_numpy(float)
        rising = bool(len(means) > 1 and (np.diff(means) > 0).all())
        detail = (
            f"ln mean(tau + T) = a + b d fitted on d = {sub['d'].tolist()} (no capped chains): "
            f"b = {slope:.4g} per unit d (e-folding every {1 / slope:.3g} dims), R^2 = {r2:.3f}; "
            f"capped chains at d = {capped}; mean rises at every step of d: {rising}"
            if np.isfinite(slope) and slope != 0
            else f"too few uncapped points to fit (d = {sub['d'].tolist()})"
        )
        rows.append(claim("log_growth_per_dim", slope, model=method, detail=detail))
        d, mean = sub["d"].to_numpy(float), sub["mean"].to_numpy(float)
        sse_exp, sse_lin = exponential_and_linear_sse(d, mean)
        held = bool(np.isfinite(slope) and slope > 0 and rising and sse_exp < sse_lin)
        rows.append(
            claim(
                "grows_exponentially",
                held,
                model=method,
                detail=("held" if held else "not held")
                + f": slope {slope:.4g}, rising {rising}; squared error of the exponential fit "
                f"{sse_exp:.4g} against the straight line's {sse_lin:.4g} (held when smaller)",
                held=held,
            )
        )
    lmi = s[s["method"] == "mh_lmi"]
    if not lmi.empty:
        high = lmi[lmi["d"] >= 25]
        if len(high):
            frac = float((high["tau_one"] * high["reps"]).sum() / high["reps"].sum())
            rows.append(
                claim(
                    "tau_one_fraction_d_ge_25",
                    frac,
                    model="mh_lmi",
                    detail=("held" if frac == 1.0 else "not held")
                    + f": tau = 1 in {frac:.4f} of {int(high['reps'].sum())} chains over d = "
                    f"{high['d'].tolist()} (paper: always 1)",
                    held=frac == 1.0,
                )
            )
        sub = lmi[lmi["d"] >= 5]
        exponent, r2 = _fit(np.log(sub["d"].to_numpy(float)), np.log(sub["T_mean"].to_numpy(float)))
        held = bool(np.isfinite(exponent) and exponent < 1)
        rows.append(
            claim(
                "T_growth_exponent",
                exponent,
                model="mh_lmi",
                detail=("held" if held else "not held")
                + f" (gradual = sub-linear): mean T ~ d^{exponent:.3g} over d = "
                f"{sub['d'].tolist()} (R^2 {r2:.3f}); mean T "
                + ", ".join(f"{t:.3g}" for t in sub["T_mean"]),
                held=held,
            )
        )
    return rows


@styled
def make(steps_csvs) -> FigureResult:
    """Fig. 1 from the step files of one or more methods."""
    df = _read(steps_csvs)
    s = summarise(df)
    fig = new_figure(PAGE, 3.0)
    ax_a, ax_b = fig.subplots(1, 2)
    for method, (label, colour, marker) in METHOD_STYLE.items():
        sub = s[s["method"] == method]
        if sub.empty:
            continue
        d = sub["d"].to_numpy(float)
        ax_a.plot(d, sub["mean"], "-", color=colour, label=label)
        ax_a.fill_between(d, sub["q10"], sub["q90"], color=colour, alpha=0.15, lw=0)
        full = sub["capped"].to_numpy() == 0
        ax_a.plot(d[full], sub["mean"][full], marker, color=colour, ls="none")
        ax_a.plot(d[~full], sub["mean"][~full], marker, mfc="white", color=colour, ls="none")
    cap_note = ""
    capped = df[df["capped"] == 1]
    if len(capped):
        cap_note = f" (hollow: chains capped at tau = {int(capped['tau'].max())})"
    ax_a.set(
        xlabel="dimension d (visible = hidden units)",
        ylabel="tau + T",
        yscale="log",
        title="(a) steps to an unbiased estimate" + cap_note,
    )
    legend_below(ax_a, ncols=2)
    lmi = s[s["method"] == "mh_lmi"]
    if not lmi.empty:
        d = lmi["d"].to_numpy(float)
        for key, label, colour in (
            ("T", "T (local search)", "C2"),
            ("tau", "tau (coupling)", "C4"),
        ):
            ax_b.plot(d, lmi[f"{key}_mean"], "o-", color=colour, label=label)
            ax_b.fill_between(d, lmi[f"{key}_q10"], lmi[f"{key}_q90"], color=colour, alpha=0.15)
    ax_b.set(xlabel="dimension d", ylabel="steps", title="(b) MH + LMI: T and tau")
    if not lmi.empty:
        legend_below(ax_b, ncols=2)
    reps = ", ".join(str(r) for r in sorted(set(s["reps"].astype(int))))
    fig.suptitle(
        f"Random d x d RBMs with orthogonal W, {reps} repetitions per point; mean and 10-90% range",
    )
    drawn = df.astype({c: "Int64" for c in ("d", "rep", "tau", "T", "capped")})
    result_table = table(drawn, _claims(s))
    params = {"methods": sorted(set(df["method"])), "dims": sorted(set(df["d"].astype(int)))}
    return FigureResult(fig, result_table, [], params)
