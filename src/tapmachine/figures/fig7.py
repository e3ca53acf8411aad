"""Fig. 7: the initialisations and the TAP solutions they converge to, in one 2-D embedding.

An Isomap (or UMAP) is fitted on the initialisation images -- those among the first
``n_images`` training images whose label is in ``digits`` (the paper: digits 3, 6, 7 of the
first 10,000 binary-MNIST images, about 3,100; all faces for CBCL: ``digits`` = None) -- and the
visible magnetisations of the unique solutions reached from them are mapped into the same plane.
One panel per harvested epoch; under each, the solutions reached from the most initialisations.
Several models make one column each (binary MNIST, real MNIST and the faces in the paper), each
with its own embedding, digits and ``n_images`` (``make``'s ``per_model``). The initialisations
and their solutions come from the harvest (its init -> solution map), so ``n_images`` must not
exceed the harvest's ``n_init``.

Claim (docs/claims.md): the solutions act as attractors inside dense regions of the data. Two
verdicts per epoch, each against answers that are not attractors:

- ``solutions_in_dense_regions``: each point is moved to its nearest initialisation image (its
  anchor), and the density there is the mean distance from the anchor to its ``K_DENSITY``
  nearest other initialisations (``anchored_density``). Anchoring compares binary images with
  binary images (grey magnetisations are close to everything: the mean image beats the data on
  raw distances), and it favours dense regions for any query, so the baselines are anchored
  too: the mean initialisation image, and held-out images of the same labels (random images of
  the data, ``N_RANDOM`` test images; none where the dataset holds no test image of them).
  Held when the solutions' anchors are denser than every baseline's, by more than 2 standard
  errors of the difference; an epoch with one solution has no verdict.
- ``basin_label_purity``: the share of initialisations whose label is the majority label of their
  solution's basin, against the same share with the labels shuffled over the basins
  (``N_SHUFFLES`` times; basins of one image each are pure whatever the labels). Held when it
  exceeds the shuffled mean by more than ``PURITY_SIGMAS`` standard deviations; an epoch with one
  basin, or initialisations of one label (the faces), has no verdict.

Context: the distances of the solutions to their nearest and ``K_DENSITY`` nearest
initialisations over the data's own (RMS per pixel), and the same in the embedding.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tapmachine.figures.common import PAGE, FigureError, FigureResult, claim, new_figure, styled
from tapmachine.figures.montage import tile
from tapmachine.figures.solutions import column_title, load_columns, result
from tapmachine.figures.solutions import per_model as per_model_settings
from tapmachine.tap_paper.embed import embed

__all__ = ["make", "select_initialisations", "knn_distance"]

K_DENSITY = 10
N_SHOWN = 6
#: Held-out images of the selected labels that stand for random images of the data.
N_RANDOM = 500
N_SHUFFLES = 200
PURITY_SIGMAS = 3.0


def select_initialisations(sol: dict, n_images: int | None, digits) -> np.ndarray:
    """Rows of the harvest (initialisations) among the first ``n_images`` with a label in
    ``digits`` (all labels if None)."""
    K = sol["inverse"].shape[0]
    n = K if n_images is None else int(n_images)
    if n > K:
        raise FigureError(
            f"{sol['path']}: fig7 n_images {n} exceeds the {K} initialisations harvested "
            "(raise the model's harvest n_init)"
        )
    rows = np.arange(n)
    if digits:
        labels = np.asarray(sol["labels"][:n])
        rows = rows[np.isin(labels, list(digits))]
        if rows.size == 0:
            raise FigureError(
                f"{sol['path']}: no initialisation among the first {n} has a label in "
                f"{list(digits)} (labels present: {sorted(set(labels.tolist()))})"
            )
    return rows


def knn_distance(queries: np.ndarray, data: np.ndarray, k: int, exclude_self: bool = False):
    """Mean Euclidean distance of each query to its k nearest rows of ``data``, (m,)."""
    from sklearn.neighbors import NearestNeighbors

    extra = 1 if exclude_self else 0
    k = min(k, data.shape[0] - extra)
    if k < 1 or queries.shape[0] == 0:
        return np.full(queries.shape[0], np.nan)
    dist, _ = NearestNeighbors(n_neighbors=k + extra).fit(data).kneighbors(queries)
    return dist[:, extra:].mean(1)


def _purity(labels: np.ndarray, basins: np.ndarray) -> float:
    ok = basins >= 0
    labels, basins = labels[ok], basins[ok]
    if labels.size == 0:
        return math.nan
    agree = 0
    for b in np.unique(basins):
        _, counts = np.unique(labels[basins == b], return_counts=True)
        agree += counts.max()
    return agree / labels.size


def shuffled_purity(labels: np.ndarray, basins: np.ndarray, seed: int = 0) -> tuple:
    """Mean and standard deviation of ``_purity`` with the labels shuffled over the initialisations
    (``N_SHUFFLES`` times): what basins of these sizes give labels that ignore them."""
    rng = np.random.default_rng(seed)
    values = [_purity(rng.permutation(labels), basins) for _ in range(N_SHUFFLES)]
    return float(np.mean(values)), float(np.std(values))


def purity_claim(labels: np.ndarray, basins: np.ndarray, model: str, epoch) -> dict:
    """The basin label purity of one epoch, judged against shuffled labels (module docstring)."""
    purity = _purity(labels, basins)
    n_basins = len(np.unique(basins[basins >= 0]))
    mean, sd = shuffled_purity(labels, basins)
    # One label (the faces) is pure in every basin, shuffled or not: nothing to judge.
    several = n_basins > 1 and len(np.unique(labels[basins >= 0])) > 1
    held = purity > mean + PURITY_SIGMAS * sd if several else None
    return claim(
        "basin_label_purity",
        purity,
        model,
        f"share of inits with their basin's majority label, {n_basins} basins; labels shuffled "
        f"over the basins: {mean:.3f} +- {sd:.3f}; held when above it by > {PURITY_SIGMAS:g} sd",
        epoch,
        held=held,
    )


def held_out_images(ds, digits) -> np.ndarray:
    """Up to ``N_RANDOM`` test images with a label in ``digits`` (all labels if None): random
    images of the data that are not initialisations."""
    keep = np.isin(ds.y_test, list(digits)) if digits else np.ones(len(ds.y_test), dtype=bool)
    return ds.x_test[keep][:N_RANDOM].astype(np.float64)


def anchored_density(points: np.ndarray, data: np.ndarray, k: int = K_DENSITY) -> np.ndarray:
    """The data's density at each point's anchor, its nearest row of ``data``: the mean
    distance from the anchor to its ``k`` nearest other rows (RMS per pixel; lower is denser),
    one value per point."""
    from sklearn.neighbors import NearestNeighbors

    if points.shape[0] == 0 or data.shape[0] < 2:
        return np.full(points.shape[0], np.nan)
    anchors = NearestNeighbors(n_neighbors=1).fit(data).kneighbors(points)[1][:, 0]
    spread = knn_distance(data, data, k, exclude_self=True)
    return spread[anchors] / math.sqrt(data.shape[1])


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and standard error (NaN for fewer than two values)."""
    n = values.size
    se = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return float(values.mean()) if n else math.nan, se


def density_claim(solutions, data, baselines: dict, model: str, epoch) -> dict:
    """The solutions' anchored density against each baseline's (``baselines``: name -> points),
    as ratios to the data's own density (module docstring). Held when the solutions' mean is
    below each baseline's by more than 2 standard errors of the difference; no verdict with
    fewer than two solutions (no spread to judge the difference by)."""
    own = float(anchored_density(data, data).mean())
    mean, se = _mean_se(anchored_density(solutions, data))
    below, text = [], []
    for name, points in baselines.items():
        if len(points) == 0:  # no held-out images of these labels: no such baseline
            continue
        other, other_se = _mean_se(anchored_density(points, data))
        gap = other - mean
        below.append(gap > 2 * math.hypot(se, 0.0 if math.isnan(other_se) else other_se))
        text.append(f"{name} {other / own:.3f}")
    return claim(
        "solutions_in_dense_regions",
        mean / own if own > 0 else math.nan,
        model,
        f"density at the solutions' anchors (nearest initialisation) over the data's, mean "
        f"distance to {K_DENSITY} nearest (< 1: denser; +- {se / own:.3f}); baselines anchored "
        f"alike: {', '.join(text)}; held when below every baseline by > 2 se",
        epoch,
        held=(bool(below) and all(below)) if np.isfinite(se) else None,
    )


@styled
def make(
    solution_files: list,
    data_files,
    digits=None,
    n_images: int | None = None,
    method: str = "isomap",
    n_neighbors: int = 10,
    seed: int = 0,
    per_model: dict | None = None,
) -> FigureResult:
    """Fig. 7 from the solutions files of one or more models and their dataset files: one column
    per model, in the order the models first appear.

    ``data_files``: a dataset file or several, each model's found by the dataset name its
    solutions record; ``digits`` and ``n_images`` hold for every column unless ``per_model``
    (model -> {"digits": ..., "n_images": ...}) gives a column its own (the faces: all).
    """
    from tapmachine.io.data import load_dataset

    files = [data_files] if isinstance(data_files, str | Path) else list(data_files)
    datasets = {}
    for f in files:
        ds = load_dataset(f)
        datasets[ds.name] = (ds, f)
    columns = load_columns(solution_files)
    drawn, claims, panels = [], [], []
    for sols, info in columns:
        if info.dataset not in datasets:
            raise FigureError(
                f"no dataset file for {info.name}'s {info.dataset!r} among "
                f"{[str(f) for f in files]}"
            )
        ds, data_file = datasets[info.dataset]
        own = per_model_settings(info.name, {"digits": digits, "n_images": n_images}, per_model)
        d, c, panel = _column(sols, info, ds, data_file, own, method, n_neighbors, seed)
        drawn += d
        claims += c
        panels.append(panel)

    n = len(columns)
    rows = max(len(p["per_epoch"]) for p in panels)
    if n == 1:
        fig = new_figure(PAGE, 3.4)
        subfigs = [fig]
    else:
        fig = new_figure(PAGE, 2.0 * rows + 0.8)
        subfigs = fig.subfigures(1, n, squeeze=False)[0]
    for j, ((sols, info), sub, panel) in enumerate(zip(columns, subfigs, panels, strict=True)):
        if n > 1:
            sub.suptitle(column_title(info, sols, j, n), fontsize="medium")
        _draw_column(sub, panel, datasets[info.dataset][0].image_shape, n == 1, rows)
    used = {info.name: p["einfo"]["method"] for (_, info), p in zip(columns, panels, strict=True)}
    return result(
        fig,
        "Fig. 7: TAP solutions (black) among their initialisations",
        drawn,
        claims,
        columns,
        digits={i.name: p["digits"] for (_, i), p in zip(columns, panels, strict=True)},
        n_images={i.name: p["n_images"] for (_, i), p in zip(columns, panels, strict=True)},
        embedding=method,
        embedding_used=used,
        n_neighbors=n_neighbors,
        data_files={i.name: str(Path(datasets[i.dataset][1])) for _, i in columns},
    )


def _column(sols, info, ds, data_file, own: dict, method, n_neighbors, seed):
    """One model's drawn rows, claim rows and what its column draws: the initialisations
    ``own["digits"]`` of its first ``own["n_images"]`` and the solutions they reach."""
    digits, n_images = own["digits"], own["n_images"]
    rows = select_initialisations(sols[0], n_images, digits)
    for s in sols[1:]:
        if not np.array_equal(
            s["init_index"][: rows.max() + 1], sols[0]["init_index"][: rows.max() + 1]
        ):
            raise FigureError(f"{s['path']}: initialisations differ from {sols[0]['path']}")
    init_index = np.asarray(sols[0]["init_index"])[rows]
    if init_index.max() >= ds.x_train.shape[0] or not np.array_equal(
        ds.y_train[init_index], np.asarray(sols[0]["labels"])[rows]
    ):
        raise FigureError(f"{data_file} is not the dataset the solutions were harvested from")
    X0 = ds.x_train[init_index].astype(np.float64)
    labels = ds.y_train[init_index]
    npix = X0.shape[1]
    if tuple(sols[0]["image_shape"]) != tuple(ds.image_shape):
        raise FigureError(f"{data_file}: image shape differs from the solutions'")

    per_epoch = []
    for s in sols:
        inv = np.asarray(s["inverse"])[rows]
        groups, basin_sizes = np.unique(inv[inv >= 0], return_counts=True)
        reps = np.asarray(s["representatives"])[groups]
        Xs = np.asarray(s["a_visible"])[reps].astype(np.float64)
        per_epoch.append((s["epoch"], inv, groups, basin_sizes, Xs))
    Y0, mapped, einfo = embed(
        X0, [p[4] for p in per_epoch], method=method, n_neighbors=n_neighbors, seed=seed
    )

    scale = 1.0 / math.sqrt(npix)
    data_nn1 = float(knn_distance(X0, X0, 1, exclude_self=True).mean()) * scale
    data_nnk = float(knn_distance(X0, X0, K_DENSITY, exclude_self=True).mean()) * scale
    emb_nn1 = float(knn_distance(Y0, Y0, 1, exclude_self=True).mean())
    # The mean image is grey like the magnetisations, which are closer to binary data than binary
    # images are to each other for that reason alone: on raw distances it beats the data.
    centroid = X0.mean(0, keepdims=True)
    centroid_nnk = float(knn_distance(centroid, X0, K_DENSITY).mean()) * scale
    baselines = {"mean image": centroid, "held-out images": held_out_images(ds, digits)}
    _, label_counts = np.unique(labels, return_counts=True)
    chance = float(label_counts.max() / labels.size)
    drawn = [
        {
            "model": info.name,
            "epoch": None,
            "point": "initialisation",
            "index": int(i),
            "label": int(lab),
            "x": y[0],
            "y": y[1],
            "basin_size": None,
        }
        for i, lab, y in zip(init_index, labels, Y0, strict=True)
    ]
    claims = [
        claim("n_initialisations", rows.size, info.name, f"digits {digits}, first {n_images}"),
        claim("data_nn1_distance", data_nn1, info.name, "init to nearest other init, RMS/pixel"),
        claim(f"data_nn{K_DENSITY}_distance", data_nnk, info.name, f"to {K_DENSITY} nearest inits"),
        claim("label_chance_level", chance, info.name, "largest label share"),
        claim(
            f"nn{K_DENSITY}_ratio_centroid_over_data",
            centroid_nnk / data_nnk if data_nnk > 0 else math.nan,
            info.name,
            "the mean initialisation image on raw distances: < 1, a grey image is near all data",
        ),
        claim(
            "embedding_method",
            math.nan,
            info.name,
            f"{einfo['method']} (asked {method}), n_neighbors {einfo['n_neighbors']}, fitted on "
            f"{einfo['n_fit']} initialisations. {einfo['note']}".strip(),
        ),
    ]
    for (e, inv, groups, sizes, Xs), Ys in zip(per_epoch, mapped, strict=True):
        for g, size, y in zip(groups, sizes, Ys, strict=True):
            drawn.append(
                {
                    "model": info.name,
                    "epoch": e,
                    "point": "solution",
                    "index": int(g),
                    "label": None,
                    "x": y[0],
                    "y": y[1],
                    "basin_size": int(size),
                }
            )
        sol_nn1 = float(knn_distance(Xs, X0, 1).mean()) * scale if len(Xs) else math.nan
        sol_nnk = float(knn_distance(Xs, X0, K_DENSITY).mean()) * scale if len(Xs) else math.nan
        emb_sol = float(knn_distance(Ys, Y0, 1).mean()) if len(Xs) else math.nan
        # Distance from each initialisation to the solution it converged to.
        pos = {int(g): j for j, g in enumerate(groups)}
        ok = inv >= 0
        pull = (
            float(np.linalg.norm(X0[ok] - Xs[[pos[int(g)] for g in inv[ok]]], axis=1).mean())
            * scale
            if ok.any()
            else math.nan
        )
        claims += [
            claim("n_solutions", len(groups), info.name, "reached from the selected inits", e),
            claim("solutions_per_initialisation", len(groups) / rows.size, info.name, "", e),
            claim("n_not_converged", int((~ok).sum()), info.name, "excluded", e),
            claim("solution_nn1_distance", sol_nn1, info.name, "solution to nearest init", e),
            claim(
                "nn1_ratio_solution_over_data",
                sol_nn1 / data_nn1 if data_nn1 > 0 else math.nan,
                info.name,
                "raw distances, which favour grey points (the mean image's: "
                f"nn{K_DENSITY}_ratio_centroid_over_data); solutions_in_dense_regions judges",
                e,
            ),
            density_claim(Xs, X0, baselines, info.name, e),
            claim(
                f"nn{K_DENSITY}_ratio_solution_over_data",
                sol_nnk / data_nnk if data_nnk > 0 else math.nan,
                info.name,
                f"mean distance to {K_DENSITY} nearest inits; < 1: dense regions",
                e,
            ),
            claim(
                "embedding_nn1_ratio_solution_over_data",
                emb_sol / emb_nn1 if emb_nn1 > 0 else math.nan,
                info.name,
                "the same in the 2-D embedding",
                e,
            ),
            claim("init_to_solution_distance", pull, info.name, "RMS/pixel", e),
            purity_claim(labels, inv, info.name, e),
        ]

    panel = {
        "per_epoch": per_epoch,
        "mapped": mapped,
        "labels": labels,
        "Y0": Y0,
        "einfo": einfo,
        "digits": list(digits) if digits else None,
        "n_images": n_images,
    }
    return drawn, claims, panel


def _draw_column(fig, panel: dict, image_shape, across: bool, rows: int) -> None:
    """One model's epochs on ``fig`` (a figure or subfigure): each an embedding panel over a strip
    of the solutions reached from the most initialisations; side by side if ``across``, else one
    under the other in ``rows`` slots (the columns' rows aligned)."""
    import matplotlib

    per_epoch, mapped, labels, Y0 = (panel[k] for k in ("per_epoch", "mapped", "labels", "Y0"))
    n = len(per_epoch)
    if across:
        gs = fig.add_gridspec(2, n, height_ratios=[4.0, 1.0])
    else:
        gs = fig.add_gridspec(2 * rows, 1, height_ratios=[4.0, 1.0] * rows)
    cmap = matplotlib.colormaps["tab10"]
    classes = sorted(set(labels.tolist()))
    colour = {c: cmap(i % 10) for i, c in enumerate(classes)}
    for j, ((e, _inv, groups, sizes, Xs), Ys) in enumerate(zip(per_epoch, mapped, strict=True)):
        ax = fig.add_subplot(gs[0, j] if across else gs[2 * j, 0])
        for c in classes:
            sel = labels == c
            ax.scatter(
                Y0[sel, 0],
                Y0[sel, 1],
                s=5,
                color=colour[c],
                alpha=0.35,
                linewidths=0,
                label=str(c) if len(classes) > 1 else "initialisations",
            )
        if len(Ys):
            ax.scatter(
                Ys[:, 0],
                Ys[:, 1],
                s=10 + 60 * np.sqrt(sizes / sizes.max()),
                color="black",
                marker="o",
                label="TAP solutions",
            )
        ax.set_title(f"epoch {e}: {len(groups)} solution{'' if len(groups) == 1 else 's'}")
        if j == 0:
            from matplotlib.lines import Line2D

            handles = [
                Line2D([], [], ls="", marker="o", ms=4, color=colour[c], label=str(c))
                for c in classes
            ]
            if len(classes) == 1:
                handles[0].set_label("initialisations")
            handles.append(Line2D([], [], ls="", marker="o", ms=6, color="black", label="TAP"))
            # The column's key below it: the embeddings are dense, no corner of them is free.
            fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)))
        strip = fig.add_subplot(gs[1, j] if across else gs[2 * j + 1, 0])
        strip.set_axis_off()
        if len(Xs):
            order = np.argsort(-sizes, kind="stable")[:N_SHOWN]
            strip.imshow(
                tile(Xs[order], image_shape, ncols=N_SHOWN), cmap="gray", interpolation="nearest"
            )
