"""Second paper, Figs. 2-3 and Tables 1-2: what DBMs trained by UCD-LMI and the baselines do.

- ``samples`` (Fig. 2): samples by local search from uniform states (Sec. 4.4), one panel per
  (dataset, model); CSV rows per sample: local-search steps T, the fraction of pixels on and the
  Hamming distance to the nearest training image; claims per model (``ucd.diversity``): distinct
  samples of n, mean pairwise Hamming distance against the data's (n test images), distance to
  the nearest training image (0 = a copy); verdicts: UCD-LMI's samples are diverse and no copies
  (Fig. 2b), PCD without pretraining fails (Fig. 2a: collapsed or not diverse).
- ``completion`` (Fig. 3): test images with the lower half masked, completed by local search on
  the clamped model (``ucd.generate.complete``); rows: masked input, completion, truth. CSV: per
  image the per-pixel error of the completed half; claim: mean error per model against the error
  of filling the half with the training mean (a baseline that ignores the visible half); verdict:
  close to, not equal to, the truth (0 < error < the mean fill's).
- ``table1`` / ``table2``: classifier FID (``tapmachine.ucd.fid``; NOT the paper's Inception FID) of
  every DBM, with the TAP log-likelihood of test images (first paper, App. E) beside it in
  Table 1, and whether the two measures rank the methods alike (Kendall's tau per dataset); the
  FID of two halves of the test set as the floor row; the coupling time tau and local-search
  steps T of training (Sec. 5: "from 5 to 30"). Verdicts on the paper's claims: UCD-LMI has the
  lowest FID (Table 1), and removing any one component raises it (Table 2, against the full
  model at the ablation's size: ``full`` when the ablation has one, else ``ucd_lmi``); the titles
  say where the DBMs are below the paper's size.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tapmachine.figures.common import FigureError, FigureResult, ModelInfo, claim, new_figure
from tapmachine.figures.common import table as make_table

__all__ = ["samples", "completion", "table1", "table2"]

FID_LABEL = "classifier FID (small CNN features; not Inception FID)"
PAPER_SIZES = (6272, 6272, 6272)


def _size_note(blob) -> str:
    """'784-200-200, 200 steps\n(reduced; paper size: paper.yaml)' for titles (two lines, so that
    neighbouring panels' titles do not overlap)."""
    from tapmachine.ucd.dbm import size_label

    sizes = blob["sizes"]
    text = size_label(sizes)
    if blob.get("steps"):
        text += f", {blob['steps']} steps"
    if sizes != PAPER_SIZES:
        text += "\n(reduced; paper size: paper.yaml)"
    return text


#: Below this fraction of distinct samples (or completions) a model counts as collapsed.
COLLAPSE_FRACTION = 0.5
#: Diverse (Fig. 2b): at least this fraction distinct, and a mean pairwise Hamming distance at
#: least ``HAMMING_FRACTION`` of the data's.
DIVERSE_FRACTION = 0.9
HAMMING_FRACTION = 0.5

#: The title line naming the panels that collapsed (fewer than ``COLLAPSE_FRACTION`` distinct).
COLLAPSE_NOTE = "collapsed (fewer than half distinct): {models}"


def _title(fig, title: str, collapsed: list) -> None:
    """The figure's title, with ``COLLAPSE_NOTE`` naming the ``collapsed`` models
    (``common.save`` wraps it to the figure's width)."""
    note = "\n" + COLLAPSE_NOTE.format(models=", ".join(collapsed)) if collapsed else ""
    fig.suptitle(title + note, fontsize=9)


#: The title line of a table whose DBMs are below the paper's size.
TABLE_SIZE_NOTE = "REDUCED size ({sizes}; paper: 6272-6272-6272, 100,000 steps)"


def _table_size_note(df: pd.DataFrame) -> str:
    """``TABLE_SIZE_NOTE`` for the score rows' sizes below the paper's ("" at paper size);
    score files written before ``sizes`` was recorded count as of unknown size."""
    from tapmachine.ucd.dbm import size_label

    paper = size_label(PAPER_SIZES)
    sizes = df["sizes"].fillna("unknown") if "sizes" in df else pd.Series(["unknown"] * len(df))
    reduced = sorted(set(sizes) - {paper})
    return "\n" + TABLE_SIZE_NOTE.format(sizes=", ".join(reduced)) if reduced else ""


def _load(path, device="cpu"):
    """A DBM's model.pt (``ModelFile``) as a dict of its provenance and extras, and its machine
    (on ``device``)."""
    from tapmachine.io.modelfile import ModelFile, ModelFileError

    try:
        model = ModelFile.load(path)
    except ModelFileError as err:
        raise FigureError(f"{err} (`tapmachine ucd train-dbm`)") from None
    blob = {
        "name": model.name,
        "dataset": model.dataset,
        "spec": model.spec,
        "substitute": model.substitute,
        "mlflow_run_id": model.mlflow_run_id,
        "machine": model.machine_state,
        "sizes": model.sizes,
        **model.extras,
    }
    return blob, model.machine(device=device)


def image_grid(images, shape, cols: int):
    """(n, H*W) in [0, 1] -> one (rows*H, cols*W) array with 1-pixel gaps."""
    n = images.shape[0]
    h, w = shape
    rows = -(-n // cols)
    tiles = np.ones((rows * cols, h + 1, w + 1))
    tiles[:n, :h, :w] = np.asarray(images, dtype=float).reshape(n, h, w)
    return (
        tiles.reshape(rows, cols, h + 1, w + 1)
        .transpose(0, 2, 1, 3)
        .reshape(rows * (h + 1), cols * (w + 1))
    )


def _grid(images, shape, cols):
    """Images as one grid; 8-bit expansions ((H, 8 W) bits, MSB first) shown as grey levels."""
    images = np.asarray(images)
    h, w = shape
    if w % 8 == 0 and w // 8 == h:  # the bits8 layout of the data stage: 8 bits per pixel
        weights = 2.0 ** np.arange(7, -1, -1) / 255.0
        images = images.reshape(len(images), h * (w // 8), 8) @ weights
        shape = (h, w // 8)
    return image_grid(images, shape, cols)


def _info(blob) -> ModelInfo:
    return ModelInfo(
        name=f"{blob['dataset']}/{blob['name']}",
        dataset=blob["dataset"],
        substitute=str(blob.get("substitute") or ""),
        train_run_id=str(blob.get("mlflow_run_id") or ""),
    )


def samples(
    model_paths, data_paths=None, seed: int = 0, n: int = 36, device: str = "cpu"
) -> FigureResult:
    """Fig. 2: ``n`` samples per model by local search from uniform random states.

    ``data_paths`` (one dataset file per model): the nearest training image of every sample and
    the data's mean pairwise Hamming distance (first ``n`` test images); without them those
    claims are left out.
    """
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io import data
    from tapmachine.ucd import dbm, diversity, generate

    if data_paths is not None and len(data_paths) != len(model_paths):
        raise FigureError("give one dataset file per model")
    fig = new_figure(2.6 * len(model_paths), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(model_paths)))
    drawn, claims, infos = [], [], []
    collapsed = []
    for i_model, (ax, path) in enumerate(zip(axes, model_paths, strict=True)):
        blob, machine = _load(path, device)
        info = _info(blob)
        infos.append(info)
        g = seeded_generator(seed, "ucd_samples", info.name, device=device)
        x, T = generate.sample(machine, n, g)
        images = dbm.to_unit_interval(machine, x).cpu()
        n_distinct = diversity.distinct(images)
        spread = diversity.mean_pairwise_hamming(images)
        if n_distinct / n < COLLAPSE_FRACTION:
            collapsed.append(info.name)
        nearest = torch.full((n,), float("nan"), dtype=torch.float64)
        data_spread = float("nan")
        if data_paths is not None:
            ds = data.load_dataset(data_paths[i_model])
            if ds.name != blob["dataset"]:
                raise FigureError(f"{path} was trained on {blob['dataset']}, not {ds.name}")
            nearest = diversity.nearest_hamming(images, torch.as_tensor(ds.x_train))
            data_spread = diversity.mean_pairwise_hamming(torch.as_tensor(ds.x_test[:n]))
        ax.imshow(_grid(images.numpy(), blob["image_shape"], 6), cmap="gray", vmin=0, vmax=1)
        ax.set_title(
            f"{blob['dataset']}: {blob['name']} ({blob['method']})\n{_size_note(blob)}\n"
            f"{n_distinct} distinct of {n}; Hamming {spread:.0f} (data {data_spread:.0f})",
            fontsize=7,
        )
        ax.axis("off")
        for i in range(n):
            drawn.append(
                {
                    "model": info.name,
                    "method": blob["method"],
                    "sample": i,
                    "T": int(T[i]),
                    "on_fraction": float(images[i].mean()),
                    "nearest_train_hamming": float(nearest[i]),
                }
            )
        claims += _sample_claims(blob, info.name, n, n_distinct, spread, data_spread, nearest)
    _title(fig, "DBM samples by local search from noise (Fig. 2)", collapsed)
    return FigureResult(fig, make_table(drawn, claims), infos, {"n": n, "seed": seed})


def _sample_claims(blob, name, n, n_distinct, spread, data_spread, nearest) -> list:
    """Fig. 2's numbers for one model and, for UCD-LMI and the plain PCD baseline, the verdict."""
    copies = int((nearest == 0).sum())
    rows = [
        claim("distinct_sample_fraction", n_distinct / n, name, f"{n_distinct} distinct of {n}"),
        claim(
            "mean_pairwise_hamming",
            spread,
            name,
            f"samples' mean pairwise Hamming distance; data's (first {n} test images) "
            f"{data_spread:.1f}",
        ),
    ]
    if not _all_nan(nearest):
        rows.append(
            claim(
                "nearest_training_hamming",
                float(nearest.mean()),
                name,
                f"mean over samples; min {float(nearest.min()):.0f}; copies (0): {copies}",
            )
        )
    diverse = n_distinct >= DIVERSE_FRACTION * n and not (spread < HAMMING_FRACTION * data_spread)
    sizes = _size_note(blob).replace("\n", " ")
    if blob["method"] == "ucd_lmi":
        rows.append(
            claim(
                "fig2_ucd_lmi_samples_diverse",
                n_distinct / n,
                name,
                f"{n_distinct}/{n} distinct, Hamming {spread:.0f} vs data {data_spread:.0f}, "
                f"{copies} copies of training images ({sizes})",
                held=diverse and copies == 0,
            )
        )
    elif blob["method"] == "dbm_pcd" and not blob["spec"].get("ucd", {}).get("centering", True):
        failed = n_distinct < COLLAPSE_FRACTION * n or spread < HAMMING_FRACTION * data_spread
        rows.append(
            claim(
                "fig2_pcd_without_pretraining_fails",
                n_distinct / n,
                name,
                f"{n_distinct}/{n} distinct, Hamming {spread:.0f} vs data {data_spread:.0f} "
                f"({sizes})" + ("" if failed else ": PCD does not fail at this size"),
                held=failed,
            )
        )
    return rows


def _all_nan(x) -> bool:
    return bool(np.isnan(np.asarray(x, dtype=float)).all())


def completion(
    model_paths, data_paths, seed: int = 0, n: int = 8, device: str = "cpu"
) -> FigureResult:
    """Fig. 3: lower halves of ``n`` test images completed by local search; truth beside."""
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io import data
    from tapmachine.ucd import dbm, generate

    if len(model_paths) != len(data_paths):
        raise FigureError("give one dataset file per model")
    fig = new_figure(2.4 * len(model_paths), 4.0)
    axes = np.atleast_1d(fig.subplots(1, len(model_paths)))
    drawn, claims, infos = [], [], []
    collapsed = []
    for ax, path, dpath in zip(axes, model_paths, data_paths, strict=True):
        blob, machine = _load(path, device)
        info = _info(blob)
        infos.append(info)
        ds = data.load_dataset(dpath)
        if ds.name != blob["dataset"]:
            raise FigureError(f"{path} was trained on {blob['dataset']}, not {ds.name}")
        h, w = ds.image_shape
        truth = torch.as_tensor(ds.x_test[:n], dtype=machine.dtype)
        mask = generate.lower_half_mask(h, w)
        g = seeded_generator(seed, "ucd_completion", info.name, device=device)
        out, steps = generate.complete(machine, dbm.data_for(machine, truth), mask, g)
        filled = dbm.to_unit_interval(machine, out[0]).cpu()
        masked = truth.clone()
        masked[:, mask] = 0.5
        err = (filled[:, mask] != truth[:, mask]).double().mean(1)
        mean_fill = (torch.as_tensor(ds.x_train).double().mean(0) >= 0.5).to(truth.dtype)
        base = (mean_fill[mask][None, :] != truth[:, mask]).double().mean(1)
        rows = torch.stack([masked, filled, truth], 1).reshape(3 * n, -1)
        ax.imshow(_grid(rows.numpy(), (h, w), 3), cmap="gray", vmin=0, vmax=1)
        halves = filled[:, mask].cpu().numpy()
        n_distinct = len({halves[i].tobytes() for i in range(n)})
        if n_distinct / n < COLLAPSE_FRACTION:
            collapsed.append(info.name)
        ax.set_title(
            f"{info.name}\n{_size_note(blob)}\n{n_distinct} distinct completions of {n}\n"
            "masked | completed | truth",
            fontsize=7,
        )
        ax.axis("off")
        for i in range(n):
            drawn.append(
                {
                    "model": info.name,
                    "image": i,
                    "pixel_error": float(err[i]),
                    "mean_fill_error": float(base[i]),
                    "T": int(steps[i]),
                }
            )
        claims.append(
            claim(
                "completion_beats_mean_fill",
                float(err.mean() < base.mean()),
                info.name,
                f"pixel error {float(err.mean()):.4f} vs thresholded-mean fill "
                f"{float(base.mean()):.4f}",
            )
        )
        exact = int((err == 0).sum())
        claims.append(
            claim(
                "fig3_completion_close_not_equal",
                float(err.mean()),
                info.name,
                f"error of the completed half {float(err.mean()):.4f} (truth: 0; mean fill "
                f"{float(base.mean()):.4f}); {exact} of {n} equal to the truth",
                held=0.0 < float(err.mean()) < float(base.mean()),
            )
        )
        claims.append(
            claim("distinct_completion_fraction", n_distinct / n, info.name, "distinct halves / n")
        )
    _title(fig, "Completion of the lower half by local search (Fig. 3)", collapsed)
    return FigureResult(fig, make_table(drawn, claims), infos, {"n": n, "seed": seed})


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


def _table_figure(df: pd.DataFrame, columns, title):
    """The table as a figure; NaN cells (no value: the floor row's likelihoods) drawn as '-'."""
    fig = new_figure(min(12, 1.6 * len(columns) + 1), 0.25 * (len(df) + 1) + 0.7)
    ax = fig.subplots()
    ax.axis("off")
    cells = [
        [("-" if v != v else f"{v:.4g}") if isinstance(v, float) else str(v) for v in row]
        for row in df[columns].itertuples(index=False)
    ]
    t = ax.table(cellText=cells, colLabels=columns, loc="center", bbox=(0, 0, 1, 1))
    t.auto_set_font_size(False)
    t.set_fontsize(7)
    ax.set_title(title, fontsize=9)
    return fig


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
    rank agreement of each pair of measures (Kendall tau; 1 = the same ranking of the methods)."""
    df = _scores(score_paths).sort_values(["dataset", "classifier_fid"]).reset_index(drop=True)
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
    fig = _table_figure(
        _with_floor(df),
        cols,
        f"DBMs at the config's size: {FID_LABEL}; TAP log-likelihood per unit (App. E);\n"
        "AIS log-likelihood, nats/image: mean-field lower bound on ln sum_h e^-E minus AIS ln Z "
        "(S&H 2009), an estimated lower bound" + _table_size_note(df),
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


#: Sec. 5: "the coupling time of our UCD-LMI falls within the range from 5 to 30".
PAPER_TAU_RANGE = (5.0, 30.0)


def _coupling_claims(sub: pd.DataFrame, ds: str) -> list:
    """tau (coupling time) and T (local-search steps) over training of the UCD-LMI models."""
    rows = []
    lo, hi = PAPER_TAU_RANGE
    for r in sub[sub["method"] == "ucd_lmi"].itertuples():
        tau = getattr(r, "tau_mean_mean", float("nan"))
        if tau != tau:  # a score file without the training's tau
            continue
        name = f"{ds}/{r.model}"
        rows.append(
            claim(
                "coupling_time_tau_5_to_30",
                tau,
                name,
                f"mean tau per step over training {tau:.3g} (range of step means "
                f"{r.tau_mean_min:.3g}-{r.tau_mean_max:.3g}, largest {r.tau_max:.0f})",
                held=lo <= tau <= hi,
            )
        )
        T = getattr(r, "T_mean_mean", float("nan"))
        if T == T:
            rows.append(
                claim(
                    "local_search_steps_T",
                    T,
                    name,
                    f"mean T per step over training {T:.3g} (range of step means "
                    f"{r.T_mean_min:.3g}-{r.T_mean_max:.3g}, largest {r.T_max:.0f})",
                )
            )
    return rows


def table2(score_paths) -> FigureResult:
    """Table 2: the ablation (MNIST), each component removed in turn; classifier FID."""
    df = _scores(score_paths).reset_index(drop=True)
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
    fig = _table_figure(df, cols, f"Ablation (Table 2): {FID_LABEL}" + _table_size_note(df))
    infos = [ModelInfo(name=f"{r.dataset}/{r.model}", dataset=r.dataset) for r in df.itertuples()]
    return FigureResult(fig, make_table(df, claims), infos, {"fid": FID_LABEL})
