"""Fig. 5: TAP free energies of the unique solutions over training, and their distribution.

Top: for each harvested epoch, the free energy of every unique TAP solution (blue dots), their
uniform average -- the Helmholtz free energy estimate (red line) -- and the number of unique
solutions (green, right axis). Bottom: histograms of the unique solutions' free energies at
selected epochs with a Gaussian kernel density estimate (Scott's bandwidth) on top.

Claims (docs/claims.md): the count starts at 1 and grows (``growth_claim``: monotone within
``GROWTH_TOL``); unique solutions stay under 10% of the initialisations (Nh = 100); two free-energy
bands on binary-MNIST. Bands are counted by a gap criterion on the sorted unique free energies: a
new band starts at every gap wider than ``BAND_GAP`` (10%) of the range of free energies at that
epoch, and bands holding fewer than ``BAND_MIN_SHARE`` (5%) of the unique solutions are not counted.
The paper's own words are "at all training epochs, there exist two significant modes in the free
energy distribution" (Sec. VII.3), which a distribution can show without a gap: modes are counted on
the histogram's kernel density estimate (``count_modes``) twice, once with each unique solution
counted once (the paper's histogram) and once with each weighted by its basin size, the number of
data initialisations that reached it (``multiplicity``): near copies of one fixed point, split by
the stopping tolerance, can make a mode of the unweighted count that few initialisations reach. Each
claim holds only when every epoch with at least ``MODES_MIN_SOLUTIONS`` unique solutions has two or
more (``verdict_claims``): "at all training epochs" means all of them, for bands as for modes.

The paper also describes the Helmholtz estimate's course ("a marked increase" early, "then
gradually declines"); its rows, and the split of the estimate into the parts of eq. (36), are
``free_energy_course``'s.

The count depends on the stopping tolerance as well as on the model: rows stopped short of a
fixed point can land more than ``dedup_tol`` from one another and count twice. Each epoch's
``near_copy_fraction`` row (``harvest.separation_stats``) gives the share of unique solutions
within ``harvest.NEAR_COPY_DISTANCE`` of another, and a row (``counts_inflated_by_tolerance``)
says so when it passes ``INFLATED_SHARE`` at some epoch.

Drawn: the solutions' free energies, their mean and their number (top); the Helmholtz estimate's
course in both conventions its verdicts judge, eq. (36)'s F and the usual RBM free energy, each as
its change since the first epoch (middle); histograms at the chosen epochs (bottom). Several models
make one column each (binary MNIST, real MNIST and the faces in the paper), every row judged per
model (the ``model`` column): the two-modes verdicts only for binary units (``binary_units``), the
10% verdict only up to Nh = 100 (``hidden_units``), as the paper claims them.

One module for the figure and its count verdicts: ``rejudge`` reads back the drawn table that
``make`` writes, so the two change together; the distribution's shape and the estimate's course,
which stand on their own, are ``free_energy_shape`` and ``free_energy_course``.
"""

from __future__ import annotations

import math

import numpy as np

from tapmachine.figures.common import PAGE, FigureError, FigureResult, claim, new_figure, styled
from tapmachine.figures.free_energy_course import PARTS as _PARTS
from tapmachine.figures.free_energy_course import (
    energy_claims,
    energy_trend,
    part_claims,
    trend_claims,
)
from tapmachine.figures.free_energy_shape import (
    BAND_GAP,
    BAND_MIN_SHARE,
    MODE_MAX_DIP,
    MODE_MIN_HEIGHT,
    MODES_MIN_SOLUTIONS,
    epoch_shape,
    gaussian_kde,
    shape_claims,
)
from tapmachine.figures.solutions import column_title, load_columns, result
from tapmachine.figures.solutions import per_model as per_model_settings

__all__ = ["make", "verdict_claims", "growth_claim", "trend_claims", "rejudge", "default_slices"]

#: "Grows": no epoch's count falls more than this share below the largest count of the epochs
#: up to it. Counts move with the stopping tolerance and the harvest's sampling by a few per
#: cent; the paper-size harvest's fall from 1,295 to 790 (39%) is a fall, not noise.
GROWTH_TOL = 0.1

#: Share of near copies (``harvest.separation_stats``) above which a row says the counts are
#: inflated (``counts_inflated_by_tolerance``).
INFLATED_SHARE = 0.5


def _or_na(value: float) -> str:
    return f"{value:.3g}" if np.isfinite(value) else "n/a (fewer than two solutions)"


def _copies_note(fractions: list[float], near_copies: list[float]) -> str:
    """The near-copy share at the epoch of the largest unique fraction, for its claim row."""
    share = near_copies[int(np.argmax(fractions))]
    if not np.isfinite(share):
        return ""
    return f"; {share:.0%} of that epoch's unique solutions are near copies (near_copy_fraction)"


def _inflation_claims(model: str, near_copies: list[float], tol, distance: float) -> list[dict]:
    """A row when most unique solutions of some epoch are near copies of another: the count then
    measures the stopping tolerance as much as the model."""
    worst = np.nanmax(near_copies) if np.isfinite(near_copies).any() else math.nan
    if not worst > INFLATED_SHARE:
        return []
    return [
        claim(
            "counts_inflated_by_tolerance",
            worst,
            model,
            f"up to this share of an epoch's unique solutions lie within {distance:g} of another: "
            f"the counts measure the stopping tolerance (tol {tol:g}) as much as the model "
            "(README, tol)",
        )
    ]


def default_slices(epochs: list[int], n: int = 4) -> list[int]:
    """Up to ``n`` epochs spread over the harvested ones, first and last included."""
    if len(epochs) <= n:
        return list(epochs)
    picks = np.unique(np.round(np.linspace(0, len(epochs) - 1, n)).astype(int))
    return [epochs[i] for i in picks]


def verdict_claims(
    model: str,
    epochs: list[int],
    counts: list[int],
    fractions: list[float],
    shapes: list[dict],
    near_copies: list[float],
    binary: bool = True,
    hidden: int | None = None,
) -> list[dict]:
    """The rows that test the paper's claims over all harvested epochs of one model.

    "Two significant modes at all training epochs" is tested as written: held only when every
    epoch with at least ``MODES_MIN_SOLUTIONS`` unique solutions has two or more (bands, modes
    and basin-weighted modes alike); an epoch with fewer has no distribution to count, and with
    no such epoch there is no verdict. The paper claims it for binary MNIST only (real MNIST
    "do[es] not exhibit such tight banding"): for a model whose units are not ``binary`` the
    rows are context, without a verdict. Likewise "under 10% unique" is claimed at Nh = 100: a
    model of more than 100 ``hidden`` units (the faces' 256) gets the number without a verdict.
    """
    from scipy.stats import spearmanr

    growth = (
        float(spearmanr(epochs, counts).statistic)
        if len(epochs) > 2 and len(set(counts)) > 1
        else math.nan
    )
    eligible = [s for s in shapes if s["modes"] is not None]
    small = hidden is None or hidden <= 100
    of = f"of {len(eligible)} epochs with >= {MODES_MIN_SOLUTIONS} unique solutions"

    def all_epochs(name: str, what: str, key, detail: str) -> dict:
        n = int(sum(key(s) >= 2 for s in eligible))
        return claim(
            name,
            n,
            model,
            f"{of}; paper: two significant modes at all training epochs (binary-MNIST): {what}"
            + detail
            + ("" if binary else "; not judged: the units are not binary"),
            held=(n == len(eligible)) if eligible and binary else None,
        )

    return [
        claim("n_unique_first_epoch", counts[0], model, "paper: 1", epochs[0], counts[0] == 1),
        claim("n_unique_last_epoch", counts[-1], model, "", epochs[-1]),
        growth_claim(model, epochs, counts),
        claim("spearman_epoch_vs_n_unique", growth, model, "rank correlation of count and epoch"),
        claim(
            "max_unique_fraction",
            max(fractions),
            model,
            "paper: < 0.1 at every epoch (Nh = 100)"
            + _copies_note(fractions, near_copies)
            + (f"; not judged at Nh = {hidden}" if not small else ""),
            held=max(fractions) < 0.1 if small else None,
        ),
        all_epochs(
            "epochs_with_two_or_more_bands",
            "bands by the gap criterion",
            lambda s: s["n_bands"],
            "",
        ),
        all_epochs(
            "epochs_with_two_or_more_modes",
            "KDE modes, each unique solution once",
            lambda s: len(s["modes"]),
            "",
        ),
        all_epochs(
            "epochs_with_two_or_more_modes_weighted",
            "KDE modes, unique solutions weighted by basin size",
            lambda s: len(s["modes_weighted"]),
            "",
        ),
    ]


def growth_claim(model: str, epochs: list[int], counts: list[int]) -> dict:
    """The verdict on "the number of unique solutions grows", as written: the count ends above
    where it started and never falls more than ``GROWTH_TOL`` below the largest count of the
    epochs before (monotone within the tolerance). The value is the smallest ratio of a count to
    that running maximum; a rank correlation would hold a count that falls at the end."""
    peak = np.maximum.accumulate(np.asarray(counts, dtype=np.float64))
    ratios = np.asarray(counts, dtype=np.float64) / np.where(peak > 0, peak, 1.0)
    worst = int(np.argmin(ratios))
    held = counts[-1] > counts[0] and ratios[worst] >= 1 - GROWTH_TOL
    return claim(
        "n_unique_grows",
        float(ratios[worst]),
        model,
        f"smallest count over the largest before it: {counts[worst]} at epoch {epochs[worst]} "
        f"against {int(peak[worst])}; paper: grows: held when the last count ({counts[-1]}) is "
        f"above the first ({counts[0]}) and no count falls more than {GROWTH_TOL:.0%} below an "
        "earlier one",
        held=held,
    )


@styled
def make(solution_files: list, slices=None, per_model: dict | None = None) -> FigureResult:
    """Fig. 5 from the solutions files of one or more models (any order): one column per model,
    in the order the models first appear.

    ``slices``: the epochs with a histogram in every column (None: up to 4 spread over each
    model's harvest); ``per_model``: model -> {"slices": [...]}, a column's own.
    """
    from matplotlib.ticker import MaxNLocator

    columns = load_columns(solution_files)
    drawn, claims, panels = [], [], []
    for sols, info in columns:
        own = per_model_settings(info.name, {"slices": slices}, per_model)["slices"]
        d, c, panel = _column(sols, info, own)
        drawn += d
        claims += c
        panels.append(panel)

    n = len(columns)
    rows = max(len(p["slices"]) for p in panels)
    across = rows if n == 1 else 2
    rows = math.ceil(rows / across)
    fig = new_figure(PAGE, 6.0 if n == 1 else 4.2 + 1.3 * rows)
    subfigs = fig.subfigures(1, n, squeeze=False)[0]
    keyed = []  # panels whose entries go into the key below the figure
    for j, ((sols, info), sub, panel) in enumerate(zip(columns, subfigs, panels, strict=True)):
        if n > 1:
            sub.suptitle(column_title(info, sols, j, n), fontsize="medium")
        gs = sub.add_gridspec(2 + rows, across, height_ratios=[1.4, 0.8] + [1.0 / rows] * rows)
        top = sub.add_subplot(gs[0, :])
        _draw_solutions(top, sols, panel["epochs"], panel["helm"], panel["counts"], n == 1)
        course = sub.add_subplot(gs[1, :])
        _draw_course(course, panel["epochs"], panel["helm"], panel["energy"])
        keyed.append(course)
        by_epoch = {s["epoch"]: s for s in sols}
        for k, e in enumerate(panel["slices"]):
            ax = sub.add_subplot(gs[2 + k // across, k % across])
            if _draw_histogram(ax, by_epoch[e]):
                keyed.append(ax)
            count = len(by_epoch[e]["unique_free_energy"])
            copies = panel["near_copies"][panel["epochs"].index(e)]
            if n == 1:
                share = f"\n{copies:.0%} near copies" if np.isfinite(copies) else ""
                ax.set_title(f"epoch {e}: {count} unique{share}")
            else:  # narrow panels: the count alone (the caption says what it counts)
                ax.set_title(f"epoch {e}: {count}")
                ax.xaxis.set_major_locator(MaxNLocator(3, steps=[1, 2, 5, 10]))
    _key(fig, subfigs[0].axes[0], keyed, top=n > 1)
    return result(
        fig,
        "Fig. 5: TAP free energies of the unique solutions over training",
        drawn,
        claims,
        columns,
        slices={info.name: p["slices"] for (_, info), p in zip(columns, panels, strict=True)},
        band_gap=BAND_GAP,
        band_min_share=BAND_MIN_SHARE,
        mode_min_height=MODE_MIN_HEIGHT,
        mode_max_dip=MODE_MAX_DIP,
    )


def binary_visible(sols: list[dict]) -> bool:
    """Whether the harvested machine's units are binary: the usual binary-RBM free energy is
    defined (``energy_normaliser`` finite) only then, as for binary MNIST."""
    return all(np.isfinite(s.get("energy_normaliser", math.nan)) for s in sols)


def _column(sols: list[dict], info, slices) -> tuple[list, list, dict]:
    """One model's drawn rows, claim rows and what its column draws."""
    from tapmachine.tap_paper.harvest import NEAR_COPY_DISTANCE, separation_stats

    epochs = [s["epoch"] for s in sols]
    slices = default_slices(epochs) if not slices else sorted(slices)
    unknown = sorted(set(slices) - set(epochs))
    if unknown:
        raise FigureError(
            f"fig5 slices {unknown} of {info.name} were not harvested (harvested: {epochs})"
        )

    drawn, claims = [], []
    helm, counts, fractions, shapes, near_copies = [], [], [], [], []
    with_parts = all(f"unique_{name}" in s for s in sols for name in _PARTS)
    helm_energy: list[float] = []
    parts = {name: [] for name in _PARTS} if with_parts else None
    for s in sols:
        Fu = np.asarray(s["unique_free_energy"], dtype=np.float64)
        mult = np.asarray(s["multiplicity"])
        K = int(s["converged"].shape[0])
        shape = epoch_shape(Fu, mult)
        helm.append(float(Fu.mean()) if Fu.size else math.nan)
        counts.append(int(Fu.size))
        fractions.append(Fu.size / K)
        shapes.append(shape)
        for g, (F, m) in enumerate(zip(Fu, mult, strict=True)):
            drawn.append(
                {
                    "model": info.name,
                    "epoch": s["epoch"],
                    "solution": g,
                    "free_energy": F,
                    "multiplicity": int(m),
                }
            )
        e = s["epoch"]
        n_nc = int(K - s["converged"].sum())
        sep = separation_stats(s)
        near_copies.append(sep["near_copy_fraction"])
        claims += [
            claim("n_unique", Fu.size, info.name, f"of {K} initialisations", e),
            claim("unique_fraction", Fu.size / K, info.name, "paper: < 0.1 at Nh=100", e),
            claim("helmholtz_estimate", helm[-1], info.name, "mean F of unique solutions", e),
            *energy_claims(info.name, e, helm[-1], s.get("energy_normaliser"), helm_energy),
            claim("free_energy_std", float(Fu.std()) if Fu.size else math.nan, info.name, "", e),
            *part_claims(info.name, e, s, parts),
            *shape_claims(info.name, e, shape),
            claim("n_not_converged", n_nc, info.name, "excluded", e),
            claim(
                "min_separation",
                sep["min_separation"],
                info.name,
                f"closest pair of unique solutions (max-abs); dedup_tol {s.get('dedup_tol')}",
                e,
            ),
            claim(
                "near_copy_fraction",
                sep["near_copy_fraction"],
                info.name,
                f"unique solutions within {NEAR_COPY_DISTANCE:g} (max-abs) of another; median "
                f"distance to the nearest {_or_na(sep['median_nearest_separation'])}: copies of "
                f"one fixed point split by the stopping tolerance (tol {s.get('tol')}); "
                "distinct fixed points lie O(1) apart",
                e,
            ),
        ]
    hidden = int(sum(info.sizes[1:]))
    binary = binary_visible(sols)
    claims += [
        claim("hidden_units", hidden, info.name, "the paper's < 0.1 is for Nh = 100"),
        claim(
            "binary_units",
            float(binary),
            info.name,
            "1: binary units (the paper's two modes at all epochs are binary MNIST's)",
        ),
    ]
    claims += verdict_claims(
        info.name, epochs, counts, fractions, shapes, near_copies, binary=binary, hidden=hidden
    )
    claims += trend_claims(info.name, epochs, helm, parts)
    claims += energy_trend(info.name, epochs, helm_energy)
    claims += _inflation_claims(info.name, near_copies, sols[0].get("tol"), NEAR_COPY_DISTANCE)
    panel = {
        "epochs": epochs,
        "slices": slices,
        "helm": helm,
        "energy": helm_energy,
        "counts": counts,
        "near_copies": near_copies,
    }
    return drawn, claims, panel


def _key(fig, top_ax, panels, top: bool) -> None:
    """One key below the figure, so that no legend covers data: the entries of ``panels`` (each
    label once), a triangle for the peaks and, if ``top``, the entries of the top panel and its
    twin first (else they sit above that panel)."""
    from matplotlib.lines import Line2D

    handles, labels = _top_legend(top_ax)
    entries = dict(zip(labels, handles, strict=True))
    for ax in panels:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    entries["peak of the course"] = Line2D([], [], ls="", marker="^", ms=5, color="0.3")
    if not top:
        entries = {k: v for k, v in entries.items() if k not in labels}
    fig.legend(entries.values(), entries.keys(), loc="outside lower center", ncols=4)


def _top_legend(ax) -> tuple[list, list]:
    """The handles and labels of a column's top panel and of its twin (the count)."""
    twins = [a for a in ax.figure.axes if a is not ax and a.bbox.bounds == ax.bbox.bounds]
    handles, labels = ax.get_legend_handles_labels()
    for twin in twins:
        h, lab = twin.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    return handles, labels


def _draw_solutions(ax, sols, epochs, helm, counts, legend: bool = True) -> None:
    """Every unique solution's F per epoch, their mean and (right axis) their number; their
    legend above the panel if ``legend``."""
    from matplotlib.ticker import MaxNLocator

    xs = np.concatenate([[s["epoch"]] * len(s["unique_free_energy"]) for s in sols])
    ys = np.concatenate([s["unique_free_energy"] for s in sols])
    ax.scatter(xs, ys, s=6, color="tab:blue", alpha=0.45, linewidths=0, label="unique solutions")
    ax.plot(epochs, helm, color="tab:red", marker="o", label="Helmholtz estimate (mean F)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("TAP free energy F (eq. 36)")
    ax.grid(alpha=0.3)
    right = ax.twinx()
    right.plot(epochs, counts, color="tab:green", marker="s", label="number of unique solutions")
    right.set_ylabel("unique solutions", color="tab:green")
    right.set_ylim(bottom=0, top=max(counts) * 1.08 + 0.5)
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    if legend:
        (h1, l1), (h2, l2) = ax.get_legend_handles_labels(), right.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=3)


def _draw_course(ax, epochs, helm, helm_energy) -> None:
    """The Helmholtz estimate in both conventions its verdicts use (``trend_claims``), each as
    its change since the first epoch: eq. (36)'s F (labelled as the top panel's estimate, in
    the same colour) and the binary RBM's usual free energy (F minus the units' ln Z_B), which
    the paper may plot; each one's peak is marked (the figure's key, ``_key``, names them)."""
    courses = [(helm, "Helmholtz estimate (mean F)", "tab:red")]
    if helm_energy and np.isfinite(helm_energy).all():
        courses.append((helm_energy, "mean usual RBM free energy (F - ln Z_B)", "tab:purple"))
    for values, label, colour in courses:
        values = np.asarray(values, dtype=np.float64)
        found = np.isfinite(values)
        if not found.any():  # no epoch with a solution: nothing to draw
            continue
        change = values - values[found][0]
        ax.plot(epochs, change, color=colour, marker="o", label=label)
        peak = int(np.nanargmax(change))
        ax.plot(epochs[peak], change[peak], color=colour, marker="^", ms=6, ls="none")
    ax.axhline(0.0, color="0.5", lw=0.6)
    ax.set_xlabel("epoch")
    ax.set_ylabel("change of mean F")
    ax.grid(alpha=0.3)


def _draw_histogram(ax, sol: dict) -> bool:
    """One epoch's unique free energies: histogram, KDE and KDE weighted by basin size; whether
    the KDEs were drawn."""
    Fu = np.asarray(sol["unique_free_energy"], dtype=np.float64)
    ax.set_xlabel("F")
    if not Fu.size:
        return False
    lo, hi = Fu.min(), Fu.max()
    pad = 0.05 * (hi - lo) if hi > lo else max(1e-3, 0.05 * abs(lo))
    bins = min(40, max(5, Fu.size // 2))
    ax.hist(Fu, bins=bins, range=(lo - pad, hi + pad), density=True, color="tab:blue", alpha=0.5)
    grid = np.linspace(lo - pad, hi + pad, 300)
    kde = gaussian_kde(Fu, grid)
    if kde is None:
        return False
    ax.plot(grid, kde, color="0.2", label="KDE")
    weights = np.asarray(sol["multiplicity"], dtype=np.float64)
    ax.plot(grid, gaussian_kde(Fu, grid, weights), color="0.2", ls="--", label="KDE by basin size")
    return True


#: Per-epoch claim rows that ``rejudge`` computes again from the drawn free energies.
_SHAPE_ROWS = ("n_bands", "n_modes", "n_modes_weighted")


def rejudge(figure_table):
    """A Fig. 5 table (its CSV, read by pandas) with its band and mode rows and its verdicts
    computed again by this module from its own drawn rows (each unique solution's free energy
    and multiplicity), for a run whose solutions files were not kept. The other per-epoch rows
    (counts, fractions, separations) are kept as they are; the drawing is not redone."""
    import pandas as pd

    t = figure_table
    drawn = t[t["kind"] == "drawn"]
    rows = t[t["kind"] == "claim"]
    per_epoch = rows[rows["epoch"].notna() & rows["claim"].isin(["n_unique"])]
    models = list(dict.fromkeys(per_epoch["model"]))
    if not models:
        raise FigureError("fig5 table: no n_unique rows to judge")
    new_rows = []
    for model in models:
        new_rows += _rejudge_model(
            drawn[drawn["model"] == model], rows[rows["model"] == model], model
        )
    claims = pd.DataFrame(new_rows)
    claims["kind"] = "claim"
    return pd.concat([drawn, claims], ignore_index=True, sort=False)[list(t.columns)]


def _rejudge_model(drawn, rows, model: str) -> list[dict]:
    """``rejudge``'s claim rows of one model of a Fig. 5 table (its drawn and claim rows). A
    table without ``hidden_units`` and ``binary_units`` rows (drawn before they were written, for
    binary MNIST at Nh = 100) is judged as binary units and Nh = 100."""
    per_epoch = rows[rows["epoch"].notna() & rows["claim"].isin(["n_unique"])]
    epochs = sorted(int(e) for e in per_epoch["epoch"])

    def value(name, e):
        hit = rows[(rows["claim"] == name) & (rows["epoch"] == e)]["value"]
        return float(hit.iloc[0]) if len(hit) else math.nan

    kept = rows[rows["epoch"].notna() & ~rows["claim"].isin(_SHAPE_ROWS)]
    kept = kept[~kept["claim"].isin(["n_unique_first_epoch", "n_unique_last_epoch"])]
    new_rows, shapes, counts, fractions, near = [], [], [], [], []
    for e in epochs:
        mine = drawn[drawn["epoch"] == e]
        shape = epoch_shape(mine["free_energy"].to_numpy(float), mine["multiplicity"].to_numpy())
        shapes.append(shape)
        counts.append(int(value("n_unique", e)))
        fractions.append(value("unique_fraction", e))
        near.append(value("near_copy_fraction", e))
        old = kept[kept["epoch"] == e].to_dict("records")
        at = next((i for i, r in enumerate(old) if r["claim"] == "n_not_converged"), len(old))
        new_rows += old[:at] + shape_claims(model, e, shape) + old[at:]
    units = rows[rows["claim"].isin(["hidden_units", "binary_units"])]
    new_rows += units.to_dict("records")
    given = dict(zip(units["claim"], units["value"].astype(float), strict=True))
    hidden = int(given.get("hidden_units", 100))
    binary = bool(given.get("binary_units", 1.0))
    energy = [value("helmholtz_estimate_energy", e) for e in epochs]
    new_rows += verdict_claims(
        model, epochs, counts, fractions, shapes, near, binary=binary, hidden=hidden
    )
    helm = [value("helmholtz_estimate", e) for e in epochs]
    parts = {n: [value(f"helmholtz_part_{n}", e) for e in epochs] for n in _PARTS}
    with_parts = all(np.isfinite(v).all() for v in parts.values())
    new_rows += trend_claims(model, epochs, helm, parts if with_parts else None)
    new_rows += energy_trend(model, epochs, energy)
    return new_rows
