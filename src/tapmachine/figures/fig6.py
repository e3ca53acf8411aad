"""Fig. 6: 2-D embedding of the unique TAP solutions over training, coloured by free energy.

The embedding (Isomap, as the paper, or UMAP) of the solutions' visible and hidden
magnetisations (a_v, a_h) is fitted on the last listed epoch; earlier epochs are mapped into the
same plane with ``transform``. Colours span each epoch's own free-energy range, as in the paper.
Several models make one column each (binary MNIST, real MNIST and the faces in the paper), each
embedded on its own, its epochs one under the other.
Small or degenerate sets fall back to principal components (``tap_paper.embed``), and the table
says so.

Claims (docs/claims.md): solutions start correlated, then spread (per epoch: the mean pairwise
RMS distance and mean pairwise Pearson correlation of the solutions in configuration space); the
free energy follows position (per epoch: the Pearson correlation between each solution's free
energy and the mean free energy of its ``K_NEIGHBOURS`` nearest neighbours, in the embedding and
in configuration space; near 1 = smooth in position, near 0 = random assignment).
"""

from __future__ import annotations

import math

import numpy as np

from tapmachine.figures.common import PAGE, FigureError, FigureResult, claim, new_figure, styled
from tapmachine.figures.solutions import column_title, load_columns, result
from tapmachine.tap_paper.embed import embed

__all__ = ["EMBEDDING_NAMES", "embedding_words", "make", "neighbour_correlation", "pairwise_stats"]

K_NEIGHBOURS = 5
#: Sec. VII.B: "the assignment of high and low free energy to TAP solutions does not appear random
#: ... but seems to be inherent to ... their location". A free energy independent of the location
#: gives a neighbour correlation of 0 in expectation; the paper-size run gives 0.88-0.97.
FOLLOWS_MIN = 0.5
PAIRWISE_LIMIT = 3000


def neighbour_correlation(X: np.ndarray, F: np.ndarray, k: int = K_NEIGHBOURS) -> float:
    """corr(F_i, mean of F over the k nearest neighbours of i in X); NaN if undefined."""
    n = X.shape[0]
    if n < 4 or not np.std(F) > 0:
        return math.nan
    from sklearn.neighbors import NearestNeighbors

    k = min(k, n - 1)
    _, idx = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)
    smooth = F[idx[:, 1:]].mean(1)
    if not np.std(smooth) > 0:
        return math.nan
    return float(np.corrcoef(F, smooth)[0, 1])


def follows_position_claim(points, follows, model: str) -> dict:
    """The verdict on "the free energy follows the position in the embedding": the correlation
    between a solution's free energy and its ``K_NEIGHBOURS`` nearest neighbours' in the 2-D
    embedding is at least ``FOLLOWS_MIN`` at every shown epoch that has more than
    ``2 K_NEIGHBOURS + 1`` solutions (with fewer, every solution's neighbours are nearly all the
    others, and the correlation tends to -1 whatever the landscape)."""
    judged = [
        (e, r)
        for (e, X, *_), r in zip(points, follows, strict=True)
        if X.shape[0] > 2 * K_NEIGHBOURS + 1
    ]
    low = [e for e, r in judged if not r >= FOLLOWS_MIN]
    held = bool(judged) and not low
    shown = ", ".join(f"epoch {e:g}: {r:.3f}" for e, r in judged) or "no epoch"
    return claim(
        "free_energy_follows_position",
        min((r for _, r in judged), default=math.nan),
        model,
        f"smallest k-NN free-energy correlation in the embedding over the epochs with more than "
        f"{2 * K_NEIGHBOURS + 1} solutions ({shown}); held when >= {FOLLOWS_MIN} at each"
        + (f"; below at epochs {low}" if low else ""),
        held=held if judged else None,
    )


def pairwise_stats(X: np.ndarray) -> tuple[float, float]:
    """(mean pairwise RMS distance, mean pairwise Pearson correlation) of the rows of X.

    At most ``PAIRWISE_LIMIT`` rows (the first ones) are used. A single row gives (0, 1) by
    convention (one solution: nothing spread, all correlated); correlations skip constant rows.
    """
    X = X[:PAIRWISE_LIMIT]
    n = X.shape[0]
    if n == 0:
        return math.nan, math.nan
    if n == 1:
        return 0.0, 1.0  # a single solution: no spread, fully correlated (convention)
    from scipy.spatial.distance import pdist

    dist = float(pdist(X).mean() / math.sqrt(X.shape[1]))
    varying = X[X.std(1) > 0]
    if varying.shape[0] < 2:
        return dist, math.nan
    C = np.corrcoef(varying)
    iu = np.triu_indices(C.shape[0], 1)
    return dist, float(C[iu].mean())


def _linear_r2(Y: np.ndarray, F: np.ndarray) -> float:
    if Y.shape[0] < 4 or not np.std(F) > 0:
        return math.nan
    A = np.column_stack([Y, np.ones(Y.shape[0])])
    coef, *_ = np.linalg.lstsq(A, F, rcond=None)
    resid = F - A @ coef
    return float(1.0 - (resid**2).sum() / ((F - F.mean()) ** 2).sum())


@styled
def make(
    solution_files: list,
    method: str = "isomap",
    n_neighbors: int = 10,
    seed: int = 0,
) -> FigureResult:
    """Fig. 6 from the solutions files of one or more models: one column per model (in the order
    the models first appear), each embedded on its own, fitted on its latest epoch."""
    columns = load_columns(solution_files)
    drawn, claims, panels = [], [], []
    for sols, info in columns:
        d, c, panel = _column(sols, info, method, n_neighbors, seed)
        drawn += d
        claims += c
        panels.append(panel)

    n = len(columns)
    if n == 1:
        shown = len(panels[0]["points"])
        across = min(2, shown)
        rows = math.ceil(shown / across)
        fig = new_figure(PAGE, 2.6 * rows + 0.4)
        subfigs = [fig]
    else:
        across, rows = 1, max(len(p["points"]) for p in panels)
        fig = new_figure(PAGE, 2.0 * rows + 0.8)
        subfigs = fig.subfigures(1, n, squeeze=False)[0]
    for j, ((sols, info), sub, panel) in enumerate(zip(columns, subfigs, panels, strict=True)):
        if n > 1:
            sub.suptitle(column_title(info, sols, j, n), fontsize="medium")
        axes = sub.subplots(rows, across, squeeze=False).ravel()
        _draw_column(sub, axes, panel["points"], panel["coords"])
    used = {info.name: p["einfo"]["method"] for (_, info), p in zip(columns, panels, strict=True)}
    words = embedding_words(list(used.values()))
    return result(
        fig,
        f"Fig. 6: TAP solutions (a_v, a_h) embedded in 2-D by {words}",
        drawn,
        claims,
        columns,
        embedding=method,
        embedding_used=used,
        n_neighbors=n_neighbors,
    )


#: How a title names each embedding ``tap_paper.embed`` may use.
EMBEDDING_NAMES = {"isomap": "Isomap", "umap": "UMAP", "pca": "PCA"}


def embedding_words(methods: list[str]) -> str:
    """The embedding of each column, in words: "Isomap" where every column used one, else each
    one with its columns' letters ("Isomap in (a, b), PCA in (c)": ``tap_paper.embed`` falls
    back to principal components on too few distinct solutions)."""
    names = [EMBEDDING_NAMES.get(m, m) for m in methods]
    if len(set(names)) <= 1:
        return names[0] if names else ""
    letters = {name: [] for name in names}
    for j, name in enumerate(names):
        letters[name].append("abcdefghij"[j])
    return ", ".join(f"{name} in ({', '.join(cols)})" for name, cols in letters.items())


def _column(sols, info, method: str, n_neighbors: int, seed: int) -> tuple[list, list, dict]:
    """One model's drawn rows, claim rows and embedded points (fitted on its latest epoch)."""
    points = []
    for s in sols:
        reps = np.asarray(s["representatives"])
        X = np.concatenate([s["a_visible"][reps], s["a_hidden"][reps]], axis=1)
        points.append(
            (s["epoch"], X.astype(np.float64), s["unique_free_energy"], s["multiplicity"])
        )
    if points[-1][1].shape[0] == 0:
        raise FigureError(
            f"{sols[-1]['path']}: no converged solution at epoch {points[-1][0]} to fit on"
        )
    fitted, mapped, einfo = embed(
        points[-1][1],
        [p[1] for p in points[:-1]],
        method=method,
        n_neighbors=n_neighbors,
        seed=seed,
    )
    coords = [*mapped, fitted]

    drawn, claims, correlations, follows = [], [], [], []
    for (e, X, F, mult), Y in zip(points, coords, strict=True):
        F = np.asarray(F, dtype=np.float64)
        for g in range(X.shape[0]):
            drawn.append(
                {
                    "model": info.name,
                    "epoch": e,
                    "solution": g,
                    "x": Y[g, 0],
                    "y": Y[g, 1],
                    "free_energy": F[g],
                    "multiplicity": int(mult[g]),
                    "fitted": e == points[-1][0],
                }
            )
        dist, corr = pairwise_stats(X)
        correlations.append(corr)
        follows.append(neighbour_correlation(Y, F))
        claims += [
            claim("n_unique", X.shape[0], info.name, "", e),
            claim(
                "mean_pairwise_rms_distance", dist, info.name, "spread: grows (1 solution: 0)", e
            ),
            claim(
                "mean_pairwise_correlation",
                corr,
                info.name,
                "starts high, then falls (1 solution: 1)",
                e,
            ),
            claim(
                "knn_free_energy_corr_embedding",
                follows[-1],
                info.name,
                f"{K_NEIGHBOURS} nearest neighbours in the 2-D embedding; F follows position: "
                "near 1",
                e,
            ),
            claim(
                "knn_free_energy_corr_configuration",
                neighbour_correlation(X, F),
                info.name,
                f"{K_NEIGHBOURS} nearest neighbours in (a_v, a_h) space",
                e,
            ),
            claim("linear_r2_free_energy_on_embedding", _linear_r2(Y, F), info.name, "", e),
        ]
    claims.append(
        claim(
            "correlation_falls_first_to_last",
            correlations[-1] - correlations[0],
            info.name,
            "mean pairwise correlation, last minus first shown epoch; paper: solutions start "
            "correlated, then spread (< 0)",
            held=correlations[-1] < correlations[0],
        )
    )
    claims.append(follows_position_claim(points, follows, info.name))
    claims.append(
        claim(
            "embedding_method",
            math.nan,
            info.name,
            f"{einfo['method']} (asked {method}), n_neighbors {einfo['n_neighbors']}, fitted on "
            f"{einfo['n_fit']} solutions of epoch {points[-1][0]}. {einfo['note']}".strip(),
        )
    )

    return drawn, claims, {"points": points, "coords": coords, "einfo": einfo}


def _draw_column(fig, axes, points, coords) -> None:
    """One model's epochs, a panel each (``axes``, spare ones hidden), in one plane and each
    coloured over its own free-energy range; colour bars on ``fig`` (a figure or subfigure)."""
    every = np.concatenate([c for c in coords if c.size] or [np.zeros((1, 2))])
    lo, hi = every.min(0), every.max(0)
    pad = 0.05 * np.where(hi > lo, hi - lo, 1.0)
    for ax, (e, X, F, mult), Y in zip(axes, points, coords, strict=False):
        F = np.asarray(F, dtype=np.float64)
        if X.shape[0]:
            size = 8 + 40 * np.sqrt(mult / max(1, mult.max()))
            lo_f, hi_f = float(F.min()), float(F.max())
            if not hi_f > lo_f:
                half = max(1e-6, 1e-3 * abs(lo_f))
                lo_f, hi_f = lo_f - half, hi_f + half
            sc = ax.scatter(
                Y[:, 0], Y[:, 1], c=F, s=size, cmap="viridis", alpha=0.85, vmin=lo_f, vmax=hi_f
            )
            cb = fig.colorbar(sc, ax=ax, shrink=0.8)
            cb.formatter.set_useOffset(False)
            cb.update_ticks()
            cb.set_label("F")
        ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
        ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
        fitted = " (fitted)" if e == points[-1][0] else ""
        ax.set_title(f"epoch {e}{fitted}: {X.shape[0]} unique")
    for ax in axes[len(points) :]:
        ax.set_axis_off()
