# Over 500 lines, one concept: Fig. 3 drawn, read back from its CSV and judged, curve by curve.
"""Fig. 3: normalised TAP log-likelihood (eq. 39 / (Nv + Nh)) per epoch, one panel per dataset.

Drawn from each model's ``metrics.csv`` (``tap_ll`` and its standard error ``tap_ll_stderr``
over the evaluated training images). Claim (docs/claims.md): the log-likelihood rises fast, then
grows at a near-constant slope after about epoch 20. The table gives, per model, least-squares
slopes before and after a breakpoint -- epoch 20 when the run has at least 40 epochs, scaled
by its epochs over the paper's when it is longer than the paper's run (the faces substitute's
15,000 epochs for CBCL's 500: epoch 600), else the midpoint epoch (the ``detail`` column says
which) -- their ratio, and the R^2 of a straight line
over the late segment (near 1: constant slope). An epoch whose evaluation found no TAP solution
(``tap_ll`` NaN) is a gap in the curve, counted in the table, and left out of the fits. "Then at
a near-constant slope" is judged as the curve still rising after the breakpoint (late slope > 0);
the epoch of the curve's peak is given beside it. A model trained with ``eval.every`` > 1 has a
curve point only at its evaluated epochs; its CSV keeps every epoch (``evaluated`` 0 or 1), and
the training steps' rows count them all.

Where ``metrics.csv`` has them (``DIAGNOSTICS``), the CSV carries per epoch: the TAP-validity
diagnostic of the evaluation's solutions (``tap_validity``, the largest over the unique
solutions of max_i c_i sum_j W_ij^2 c_j, ``tap.onsager_strength``, and its median; and
``tap_validity_rho``, the spectral radius of c_i W_ij^2 c_j that it bounds,
``tap.onsager_spectral_radius``), the number of converged-training steps with no converged row
that used all rows as they stood (``train_unconverged_steps``), and the curve without the fixed
points only the evaluation's second pass (``retry_damping``) reached (``tap_ll_first_pass``,
``n_unique_retry_only``). The figure draws that curve dashed where it differs and the diagnostic
in a lower panel; the table's rows say from which epoch a model's spectral radius reaches 1 or its
training had such steps: the epochs where the curve is outside what second-order TAP and
converged training describe. The legend sits below the panels, clear of the curves.

With ``exact_files`` (``tapmachine exact-curve``: models whose hidden layer can be enumerated,
after chosen epochs), each such model's exact log-likelihood of the same rows is drawn as
crosses in its colour and carried in the CSV (``exact_ll``, ``exact_ll_stderr``). Its rows judge
"the log-likelihood rises" on the exact values as well, and give the epoch of the exact peak and
how far TAP's estimate lies above the exact value.

One module for the figure and its verdicts: the slopes, breakpoint, diagnostics and exact-curve
rows are computed from the same per-epoch table the panels draw, and ``rejudge`` recomputes them
from that table as the CSV stores it (a run whose ``metrics.csv`` files are gone).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from tapmachine.figures.common import (
    COLUMN,
    PAGE,
    PAPER_EPOCHS,
    FigureError,
    FigureResult,
    ModelInfo,
    claim,
    dataset_label,
    model_colours,
    model_info,
    new_figure,
    require_columns,
    styled,
    substitute_claims,
    table,
)
from tapmachine.figures.solutions import PAPER_SIZES
from tapmachine.train.tap_gradient import CONVERGED_STEP_SHARE

__all__ = [
    "make",
    "draw",
    "from_table",
    "rejudge",
    "breakpoint_epoch",
    "segment_fit",
    "size_line",
    "DIAGNOSTICS",
]

#: Per-epoch columns of metrics.csv carried into the CSV when present (NaN otherwise).
DIAGNOSTICS = (
    "tap_validity",
    "tap_validity_median",
    "tap_validity_rho",
    "tap_validity_rho_median",
    "train_unconverged_steps",
    "train_converged_step_share",
    "tap_ll_first_pass",
    "n_unique_retry_only",
)


#: Fig. 3's per-epoch column that says whether training evaluated the epoch (1) or skipped its
#: evaluation (0, ``eval.every``): the curve and its claims take the evaluated epochs, the
#: training steps' claims every epoch.
EVALUATED = "evaluated"


def breakpoint_epoch(last_epoch: int, paper_epochs: int = PAPER_EPOCHS) -> tuple[int, str]:
    """The epoch separating the fast rise from the constant-slope phase, and the rule used.

    The paper's epoch 20 in a run of at least 40 epochs; in a run longer than the paper's
    ``paper_epochs`` (the faces substitute trains CBCL's number of updates in 30 times its 500
    epochs) the paper's epoch 20 scaled by ``last_epoch / paper_epochs``, so that the break sits
    at the same share of training; in a run of fewer than 40 epochs its midpoint.
    """
    if last_epoch > paper_epochs:
        b = max(1, round(20 * last_epoch / paper_epochs))
        return (
            b,
            f"epoch {b}: the paper's epoch 20 of {paper_epochs}, scaled to {last_epoch} epochs",
        )
    if last_epoch >= 40:
        return 20, "epoch 20 (paper)"
    return max(1, last_epoch // 2), f"midpoint epoch {max(1, last_epoch // 2)} of a short run"


def _paper_epochs(dataset: str) -> int:
    """The paper's epochs for ``dataset`` (Table 1: 100, the faces 500)."""
    return PAPER_SIZES.get(dataset, (PAPER_EPOCHS, None))[0]


def segment_fit(epochs: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(slope, R^2) of a least-squares line; NaN with fewer than 2 points."""
    if len(epochs) < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(epochs, values, 1)
    residual = values - (slope * epochs + intercept)
    total = ((values - values.mean()) ** 2).sum()
    r2 = 1.0 - (residual**2).sum() / total if total > 0 else 1.0
    return float(slope), float(r2)


def size_line(runs: list[tuple[str, int]]) -> str:
    """The title's second line for models that ran ``runs`` ((dataset, epochs) each): the range
    of epochs run below the paper's (``solutions.PAPER_SIZES``: 100, the faces 500), a range per
    paper size, those of another size than 100 named by dataset, or "" at paper size.

    Each model's own count is in the CSV (its curve's last epoch); a range says that the runs
    differ, where the shortest alone would read as the figure's one length.
    """
    short: dict[int, list[tuple[str, int]]] = {}
    for dataset, epochs in runs:
        paper = _paper_epochs(dataset)
        if epochs < paper:
            short.setdefault(paper, []).append((dataset, epochs))
    parts = []
    for paper, group in sorted(short.items()):
        lo, hi = min(e for _, e in group), max(e for _, e in group)
        span = f"{lo} of {paper}" if lo == hi else f"{lo} to {hi} of {paper}"
        if paper == PAPER_EPOCHS:
            parts.insert(0, f"{span} epochs")
        else:
            parts.append(f"{', '.join(dict.fromkeys(d for d, _ in group))}: {span}")
    return f"REDUCED SIZE ({'; '.join(parts)})" if parts else ""


def _title_note(infos, curves) -> str:
    note = size_line(
        [(i.dataset, int(df["epoch"].max())) for i, df in zip(infos, curves, strict=True)]
    )
    return f"\n{note}" if note else ""


def make(metrics_files: list, model_files: list, exact_files=(), palette=()) -> FigureResult:
    """Fig. 3 for the models whose ``metrics.csv`` and ``model.pt`` are given (same order), with
    the exact curves of ``exact_files`` (CSVs of ``likelihood.exact_curve``, any of the models);
    each model in its own colour, ``model_colours`` of ``palette`` (model names; Fig. 4 is given
    the same) followed by the models not in it."""
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
    exact = _read_exact(exact_files, [i.name for i in infos])
    result = draw(infos, curves, exact, palette)
    result.params = {"metrics_files": [str(Path(f)) for f in metrics_files]}
    return result


@styled
def draw(infos: list, curves: list, exact: dict, palette=()) -> FigureResult:
    """Fig. 3 from each model's ``ModelInfo`` and per-epoch curve (same order; ``epoch``,
    ``tap_ll``, ``tap_ll_stderr`` and any of ``DIAGNOSTICS``, sorted by epoch), with the exact
    curves of ``exact`` (model name -> ``epoch``, ``exact_ll``, ``exact_ll_stderr`` and, with AIS,
    ``ais_z``): what ``make`` reads from the run's files, or ``from_table`` from the CSV."""
    colours = model_colours([*palette, *(i.name for i in infos)])

    datasets = list(dict.fromkeys(i.dataset for i in infos))
    fig = new_figure(min(PAGE, COLUMN * len(datasets)), 3.8)
    grid = fig.subplots(2, len(datasets), squeeze=False, height_ratios=[2.2, 1.0], sharex="col")
    drawn, claims = [], []
    for ax, low, dataset in zip(grid[0], grid[1], datasets, strict=True):
        substitute = ""
        for info, df in zip(infos, curves, strict=True):
            if info.dataset != dataset:
                continue
            substitute = substitute or info.substitute
            ev = _evaluated(df)
            e_all, extra_all = df["epoch"].to_numpy(float), _diagnostics(df)
            e = e_all[ev]
            m = df["tap_ll"].to_numpy(float)[ev]
            s = df["tap_ll_stderr"].to_numpy(float)[ev]
            nh = info.sizes[1] if len(info.sizes) > 1 else "?"
            (line,) = ax.plot(
                e, m, color=colours[info.name], marker="." if len(e) < 30 else None, label=info.name
            )
            ax.fill_between(e, m - s, m + s, color=line.get_color(), alpha=0.25, linewidth=0)
            extra = {c: v[ev] for c, v in extra_all.items()}
            first = extra["tap_ll_first_pass"]
            if np.isfinite(first).any() and not np.allclose(first, m, equal_nan=True):
                ax.plot(e, first, color=line.get_color(), ls="--", lw=0.9)
            if np.isfinite(extra["tap_validity_rho"]).any():
                low.plot(e, extra["tap_validity_rho"], color=line.get_color(), label=info.name)
            if np.isfinite(extra["tap_validity"]).any():
                low.plot(e, extra["tap_validity"], color=line.get_color(), ls=":", lw=0.8)
            ex = exact.get(info.name)
            ex_ll, ex_se = _exact_at(ex, e_all)
            ais_z = _exact_column(ex, e_all, "ais_z")
            if ex is not None:
                ax.errorbar(
                    ex["epoch"],
                    ex["exact_ll"],
                    yerr=ex["exact_ll_stderr"],
                    color=line.get_color(),
                    marker="x",
                    ls="none",
                    label=f"{info.name} exact",
                )
            ll_all, se_all = (df[c].to_numpy(float) for c in ("tap_ll", "tap_ll_stderr"))
            for i, ei in enumerate(e_all):
                drawn.append(
                    {
                        "model": info.name,
                        "dataset": dataset,
                        "substitute": info.substitute,
                        "hidden_units": nh,
                        "epoch": int(ei),
                        "tap_ll": ll_all[i],
                        "tap_ll_stderr": se_all[i],
                        EVALUATED: float(ev[i]),
                        **{c: extra_all[c][i] for c in DIAGNOSTICS},
                        "exact_ll": ex_ll[i],
                        "exact_ll_stderr": ex_se[i],
                        "ais_z": ais_z[i],
                    }
                )
            claims += _model_claims(info.name, df, ex, _paper_epochs(info.dataset))
        ax.set_title(dataset_label(dataset, substitute))
        ax.grid(alpha=0.3)
        low.axhline(1.0, color="0.4", lw=0.8, ls=":")
        low.set_xlabel("epoch")
        low.set_yscale("symlog", linthresh=1.0)
        low.grid(alpha=0.3)
    grid[0][0].set_ylabel("TAP log-likelihood per unit")
    grid[1][0].set_ylabel("TAP validity")
    fig.align_ylabels(grid[:, 0])
    _legend(fig, grid[0])
    fig.suptitle("Fig. 3: normalised TAP log-likelihood over training" + _title_note(infos, curves))
    return FigureResult(fig, table(drawn, claims + substitute_claims(infos)), infos)


def from_table(figure_table) -> tuple[list, list, dict]:
    """What ``draw`` draws, read back from a Fig. 3 table (its CSV, read by pandas; a run whose
    ``metrics.csv`` files are gone): each model's ``ModelInfo`` (name, dataset, substitute and
    hidden units, from its drawn rows), its curve (the drawn rows' epochs, estimates and
    diagnostics) and, where its rows carry them, its exact values at their epochs."""
    drawn = figure_table[figure_table["kind"] == "drawn"]
    require_columns(drawn, ("model", "dataset", "epoch", "tap_ll", "tap_ll_stderr"))
    infos, curves, exact = [], [], {}
    for model, rows in drawn.groupby("model", sort=False):
        rows = rows.sort_values("epoch").reset_index(drop=True)
        first = rows.iloc[0]
        substitute = first.get("substitute")
        hidden = pd.to_numeric(first.get("hidden_units"), errors="coerce")
        infos.append(
            ModelInfo(
                str(model),
                str(first["dataset"]),
                substitute if isinstance(substitute, str) else "",
                sizes=(None, int(hidden)) if np.isfinite(hidden) else (),
            )
        )
        carried = (EVALUATED, *DIAGNOSTICS)
        columns = ["epoch", "tap_ll", "tap_ll_stderr", *(c for c in carried if c in rows)]
        curves.append(rows[columns].astype({"epoch": int}))
        if "exact_ll" in rows and rows["exact_ll"].notna().any():
            known = rows[rows["exact_ll"].notna()]
            columns = [
                "epoch",
                "exact_ll",
                "exact_ll_stderr",
                *(["ais_z"] if "ais_z" in rows else []),
            ]
            exact[str(model)] = known[columns].astype({"epoch": int}).reset_index(drop=True)
    return infos, curves, exact


def _read_exact(files, models: list[str]) -> dict[str, pd.DataFrame]:
    """Model name -> its exact curve (epoch, exact_ll, exact_ll_stderr), sorted by epoch."""
    out = {}
    for path in files:
        df = pd.read_csv(path)
        missing = {"model", "epoch", "exact_ll", "exact_ll_stderr"} - set(df.columns)
        if missing:
            raise FigureError(f"{path}: missing columns {sorted(missing)}")
        for model, curve in df.groupby("model", sort=False):
            if model not in models:
                raise FigureError(f"{path}: exact curve of {model!r}, which fig3 does not draw")
            out[str(model)] = curve.sort_values("epoch").reset_index(drop=True)
    return out


def _exact_at(curve: pd.DataFrame | None, epochs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact values at ``epochs`` (NaN where none was computed)."""
    ll, se = np.full(len(epochs), np.nan), np.full(len(epochs), np.nan)
    if curve is not None:
        where = {int(e): i for i, e in enumerate(curve["epoch"])}
        for i, e in enumerate(epochs):
            if int(e) in where:
                ll[i] = curve["exact_ll"].iloc[where[int(e)]]
                se[i] = curve["exact_ll_stderr"].iloc[where[int(e)]]
    return ll, se


def _exact_column(curve: pd.DataFrame | None, epochs: np.ndarray, column: str) -> np.ndarray:
    """An exact curve's ``column`` at ``epochs`` (NaN where the curve has no such epoch or no
    such column: an exact curve computed without AIS)."""
    out = np.full(len(epochs), np.nan)
    if curve is not None and column in curve:
        at = dict(zip(curve["epoch"].astype(int), curve[column].astype(float), strict=True))
        out[:] = [at.get(int(e), np.nan) for e in epochs]
    return out


def _ais_claim(model: str, curve: pd.DataFrame) -> list[dict]:
    """AIS checked against the enumeration at the exact curve's epochs: the largest
    |ln Z_AIS - ln Z| in AIS standard errors, held at 3 or less (no row without AIS)."""
    if "ais_z" not in curve or not curve["ais_z"].notna().any():
        return []
    known = curve[curve["ais_z"].notna()]
    z = known["ais_z"].to_numpy(float)
    worst = int(np.argmax(np.abs(z)))
    return [
        claim(
            "ais_vs_exact",
            float(np.abs(z).max()),
            model,
            "largest |ln Z by AIS - ln Z by enumeration| in AIS standard errors over "
            f"{len(z)} epochs (signed: {', '.join(f'{v:+.2f}' for v in z)}); held at <= 3",
            int(known["epoch"].iloc[worst]),
            held=bool(np.abs(z).max() <= 3.0),
        )
    ]


def _exact_gap(epochs: np.ndarray, tap_ll: np.ndarray, curve: pd.DataFrame):
    """(largest TAP - exact over the exact epochs that have a TAP value, its epoch)."""
    tap_at = dict(zip(epochs.astype(int), tap_ll, strict=True))
    gaps = [
        (tap_at[int(e)] - x, int(e))
        for e, x in zip(curve["epoch"], curve["exact_ll"], strict=True)
        if np.isfinite(tap_at.get(int(e), np.nan))
    ]
    return max(gaps) if gaps else (math.nan, None)


def _exact_claims(model: str, epochs: np.ndarray, tap_ll: np.ndarray, curve) -> list[dict]:
    """Rows of a model with an exact curve: the paper's "rises" judged on the exact values, the
    epoch of their peak and TAP's largest excess over them."""
    e, x = curve["epoch"].to_numpy(int), curve["exact_ll"].to_numpy(float)
    gap, at = _exact_gap(epochs, tap_ll, curve)
    rows = [
        claim(
            "exact_peak_epoch",
            int(e[int(np.argmax(x))]),
            model,
            f"epoch of the highest exact log-likelihood, {float(x.max()):.4g}, of the epochs "
            f"computed ({', '.join(map(str, e))})",
        ),
        claim(
            "tap_minus_exact_largest",
            gap,
            model,
            "largest excess of TAP's estimate over the exact log-likelihood per unit",
            at,
        ),
    ]
    if len(e) > 1:
        rows.insert(
            0,
            claim(
                "exact_ll_increase_first_to_last",
                float(x[-1] - x[0]),
                model,
                f"the log-likelihood rises, judged on its exact value: > 0 (epochs {e[0]} to "
                f"{e[-1]})",
                held=bool(x[-1] > x[0]),
            ),
        )
    return rows + _ais_claim(model, curve)


def _legend(fig, axes) -> None:
    """One legend of every panel's curves, below the panels, where it covers none of them."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(entries.values(), entries.keys(), loc="outside lower center", ncols=3)


def _converged_steps_claim(model: str, epochs: np.ndarray, share: np.ndarray) -> list[dict]:
    """Alg. 2 trains on TAP solutions: the share of converged training steps (at least
    ``CONVERGED_STEP_SHARE`` of their rows converged), over all epochs (each epoch has the same
    number of steps), held at 0.99 or more. No row for fixed-iteration training or metrics
    written before the column existed."""
    if not np.isfinite(share).any():
        return []
    worst = int(epochs[np.nanargmin(share)])
    return [
        claim(
            "training_steps_converged",
            float(np.nanmean(share)),
            model,
            f"share of training steps with >= {CONVERGED_STEP_SHARE:.0%} of rows converged, "
            f"over {int(np.isfinite(share).sum())} epochs; lowest {float(np.nanmin(share)):.4f} "
            f"at epoch {worst}; goal >= 0.99",
            held=bool(np.nanmean(share) >= 0.99),
        )
    ]


def _evaluated(curve: pd.DataFrame) -> np.ndarray:
    """Which epochs of a curve (a model's metrics.csv, or its drawn rows) were evaluated:
    those with ``n_unique`` (every evaluation records it) or ``EVALUATED`` set; all epochs of a
    curve with neither column (evaluated every epoch)."""
    if EVALUATED in curve:
        return curve[EVALUATED].to_numpy(float) > 0
    if "n_unique" in curve:
        return curve["n_unique"].notna().to_numpy()
    return np.ones(len(curve), dtype=bool)


def _diagnostics(curve: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each of ``DIAGNOSTICS`` per epoch of ``curve``, NaN where it has none."""
    return {
        c: curve[c].to_numpy(float) if c in curve else np.full(len(curve), np.nan)
        for c in DIAGNOSTICS
    }


def _model_claims(
    model: str, curve: pd.DataFrame, exact: pd.DataFrame | None, paper_epochs: int = PAPER_EPOCHS
) -> list[dict]:
    """A model's claim rows from its curve (every epoch; those training evaluated carry the
    TAP log-likelihood and its diagnostics, ``_evaluated``) and its exact values, if any: the
    curve's claims over the evaluated epochs (breakpoint on the scale of the paper's
    ``paper_epochs``), the training steps' over all."""
    ev = _evaluated(curve)
    e_all, extra_all = curve["epoch"].to_numpy(float), _diagnostics(curve)
    e, m = e_all[ev], curve["tap_ll"].to_numpy(float)[ev]
    extra = {c: v[ev] for c, v in extra_all.items()}
    rows = _claims(model, e, m, paper_epochs) + _diagnostic_claims(
        model, e, m, extra, (e_all, extra_all)
    )
    if exact is not None:
        rows += _exact_claims(model, e, m, exact)
    return rows


def _diagnostic_claims(
    model: str, epochs: np.ndarray, ll: np.ndarray, extra: dict, trained: tuple
) -> list[dict]:
    """Context rows from the per-epoch diagnostics a metrics.csv has (none for older ones):
    those of the evaluation over the evaluated ``epochs`` (``ll``, ``extra``), those of the
    training steps over every epoch (``trained``: epochs and diagnostics)."""
    rows = []
    for key, what in (
        (
            "tap_validity",
            "largest max_i c_i sum_j W_ij^2 c_j over epochs and solutions (>= 1: second-order "
            "TAP may be outside its range of validity)",
        ),
        (
            "tap_validity_rho",
            "largest spectral radius of c_i W_ij^2 c_j over epochs and solutions (>= 1: "
            "outside Plefka's condition for the second-order expansion)",
        ),
    ):
        values = extra[key]
        if not np.isfinite(values).any():
            continue
        over = epochs[values >= 1.0]
        rows += [
            claim(
                f"max_{key}",
                float(np.nanmax(values)),
                model,
                what,
                int(epochs[np.nanargmax(values)]),
            ),
            claim(
                f"epochs_{key}_at_least_1",
                int(over.size),
                model,
                f"of {len(epochs)}" + (f", from epoch {int(over.min())}" if over.size else ""),
            ),
        ]
    every_epoch, every_extra = trained
    steps = every_extra["train_unconverged_steps"]
    if np.isfinite(steps).any():
        hit = every_epoch[steps > 0]
        rows.append(
            claim(
                "epochs_with_unconverged_training_steps",
                int(hit.size),
                model,
                f"of {len(every_epoch)}; {int(np.nansum(steps))} steps in all used every row as "
                "it stood at train_max_iter"
                + (f", from epoch {int(hit.min())}" if hit.size else ""),
            )
        )
    share = every_extra["train_converged_step_share"]
    rows += _converged_steps_claim(model, every_epoch, share)
    first = extra["tap_ll_first_pass"]
    retry = extra["n_unique_retry_only"]
    if np.isfinite(retry).any():
        differ = epochs[retry > 0]
        rows.append(
            claim(
                "epochs_with_second_pass_fixed_points",
                int(differ.size),
                model,
                "epochs whose evaluation has fixed points only the second pass reached; largest "
                "change of the curve without them "
                + (
                    f"{float(np.nanmax(np.abs(first - ll))):.4g}"
                    if np.isfinite(first).any()
                    else "n/a"
                ),
            )
        )
    return rows


def _claims(
    model: str, epochs: np.ndarray, ll: np.ndarray, paper_epochs: int = PAPER_EPOCHS
) -> list[dict]:
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
    b, rule = breakpoint_epoch(last, paper_epochs)
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
        claim(
            "slope_after_breakpoint",
            s_late,
            model,
            f"per epoch, epochs >= {b}; {rule}; still rising at a near-constant slope: > 0",
            held=bool(s_late > 0) if np.isfinite(s_late) else None,
        ),
        claim(
            "peak_epoch",
            int(epochs[int(np.argmax(ll))]),
            model,
            f"epoch of the highest value, {float(ll.max()):.4g}; the last epoch is {last}",
        ),
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


def rejudge(figure_table):
    """A Fig. 3 table (its CSV, read by pandas) with its claim rows computed again by this
    module from its own drawn rows (each model's curve and, where present, its diagnostics),
    for a run whose metrics are not at hand; the drawing is not redone."""
    t = figure_table
    drawn = t[t["kind"] == "drawn"]
    claims = []
    for model, curve in drawn.groupby("model", sort=False):
        curve = curve.sort_values("epoch")
        known = None
        if "exact_ll" in curve and curve["exact_ll"].notna().any():
            known = curve[curve["exact_ll"].notna()].reset_index(drop=True)
        claims += _model_claims(model, curve, known, _paper_epochs(str(curve["dataset"].iloc[0])))
    infos = [
        ModelInfo(str(model), str(c["dataset"].iloc[0]), str(c["substitute"].iloc[0]))
        for model, c in drawn.groupby("model", sort=False)
        if "substitute" in c and isinstance(c["substitute"].iloc[0], str)
    ]
    return table(drawn.drop(columns="kind"), claims + substitute_claims(infos))
