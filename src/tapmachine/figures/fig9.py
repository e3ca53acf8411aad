"""Fig. 9: one test digit through the binary symmetric channel at several p, and its denoised
posterior means (not rounded; white = 0, black = 1 as in the paper) by the OPE, 1-NN and TAP on
each RBM. Every method sees the same noise realisation at a given p (checked: the noisy digits
stored by every denoising job must be equal).

Drawn from the same ``.npz`` files as Fig. 8. The table gives, per method and p, the MCC of the
rounded estimate of this digit and the mean of its posterior means; one claim row says whether the
noise realisations were the same for every method.

The paper's claim, "as p increases, for Nh = {25, 50, 100}, the TAP inference ... provides
estimates which still possess digit structure. In the case Nh = 500, the TAP inference gets
caught in spurious and undesirable minima", is judged over every denoised test digit by an MNIST
classifier (the second paper's FID network, ``ucd classifier``): per method and p in (0, 0.5),
the share of rounded estimates it classifies as the digit's true label (``true_label_share``).
Verdicts:

- ``digit_structure_kept`` (each plain TAP model, claimed for Nh <= 100): at no p in (0, 0.5) is
  the share below the OPE's (the estimate without a prior on digits) by more than 2 paired
  standard errors, and at the largest p below 0.5 it is above chance (the largest label share)
  by more than 2 standard errors: an estimate left at the OPE's, the mean image or noise is not
  a digit there.
- ``nh500_caught_in_spurious_minima``: the largest plain model's share, averaged over p >=
  ``LARGE_P``, is below the best smaller model's by more than 2 standard errors.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tapmachine.figures.common import (
    COLUMN,
    PAGE,
    FigureError,
    FigureResult,
    claim,
    model_info,
    new_figure,
    styled,
    table,
)
from tapmachine.figures.fig8 import load_curves, paired

__all__ = ["make", "true_label_hits", "kept_claim", "spurious_claim", "LARGE_P"]

#: Nh = 500 "caught as p increases": its share is compared over p >= LARGE_P (Fig. 8's).
LARGE_P = 0.3
#: The paper claims digit structure for the models up to this Nh.
KEPT_MAX_NH = 100


def _mcc(est: np.ndarray, truth: np.ndarray) -> float:
    """``denoise.mcc`` of one image."""
    import torch

    from tapmachine.tap_paper.denoise import mcc

    row = [torch.as_tensor(np.asarray(v, np.float64)).reshape(1, -1) for v in (est, truth)]
    return float(mcc(*row)[0])


def load_classifier(path):
    """The MNIST classifier written by ``ucd classifier`` (``ucd.fid.Classifier``), in eval
    mode."""
    import torch

    from tapmachine.ucd.fid import Classifier

    blob = torch.load(path, map_location="cpu", weights_only=True)
    net = Classifier(**blob["config"])
    net.load_state_dict(blob["state"])
    return net.eval()


def predicted_labels(net, images: np.ndarray, batch: int = 2000) -> np.ndarray:
    """The classifier's label of each row of ``images`` (H*W pixels)."""
    import torch

    with torch.no_grad():
        out = [
            net.logits(torch.as_tensor(images[i : i + batch], dtype=torch.float32)).argmax(1)
            for i in range(0, len(images), batch)
        ]
    return torch.cat(out).numpy()


def true_label_hits(packed: np.ndarray, labels, classify, n_visible: int) -> np.ndarray:
    """(p, image) booleans: whether ``classify`` (rows of pixels -> labels) gives each rounded
    estimate its digit's true label. ``packed``: the estimates' bits, rows p-major (the
    ``estimates`` of ``denoise bsc`` / ``estimates_<method>`` of ``denoise baselines``)."""
    labels = np.asarray(labels)
    images = np.unpackbits(packed, axis=-1, count=n_visible).astype(np.float32)
    return classify(images).reshape(-1, labels.size) == labels[None, :]


def _share(hits: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of booleans."""
    n = hits.size
    return float(hits.mean()), float(hits.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0


def kept_claim(ps, label: str, nh: int, hits: np.ndarray, ope: np.ndarray, chance: float):
    """``digit_structure_kept`` for one TAP model (module docstring); a verdict for
    Nh <= ``KEPT_MAX_NH``, context otherwise."""
    interior = [j for j, p in enumerate(ps) if 0 < p < 0.5]
    if not interior:
        return claim("digit_structure_kept", math.nan, label, "no p in (0, 0.5)")
    lost = [float(ps[j]) for j in interior if _below(hits[j], ope[j])]
    j = interior[-1]
    share, se = _share(hits[j])
    above = share - chance > 2 * se
    return claim(
        "digit_structure_kept",
        share,
        label,
        f"Nh={nh}: share classified as the true label at p = {ps[j]:g}: {share:.3f} +- {se:.3f} "
        f"(chance {chance:.3f}: {'above' if above else 'not above'} by 2 se); below the OPE's by "
        f"> 2 paired se at p = {lost}; held when nowhere below and above chance"
        + ("" if nh <= KEPT_MAX_NH else " (not claimed for this Nh)"),
        held=(not lost and above) if nh <= KEPT_MAX_NH else None,
    )


def spurious_claim(ps, plain: dict, hits: dict):
    """``nh500_caught_in_spurious_minima`` (module docstring) for the plain models ``plain``
    (Nh -> method), or None with fewer than two of them or no p >= ``LARGE_P``."""
    large = [j for j, p in enumerate(ps) if LARGE_P <= p < 0.5]
    if len(plain) < 2 or not large:
        return None
    big = max(plain)
    smaller = [plain[nh] for nh in plain if nh < big]
    best = max(smaller, key=lambda m: float(np.mean([hits[m][j].mean() for j in large])))
    diffs = [paired(hits[plain[big]][j], hits[best][j]) for j in large]
    diff = float(np.mean([d for d, _ in diffs]))
    se = float(math.sqrt(sum(s * s for _, s in diffs)) / len(diffs))
    return claim(
        "nh500_caught_in_spurious_minima",
        diff,
        plain[big],
        f"Nh={big} minus the best smaller model ({best}): share classified as the true label, "
        f"averaged over p in [{LARGE_P}, 0.5): {diff:+.3f} +- {se:.3f}; held when below by "
        "> 2 se",
        held=bool(diff < -2 * se),
    )


def _below(a: np.ndarray, b: np.ndarray) -> bool:
    d, se = paired(a, b)
    return d < -2 * se


def classifier_claims(ps, hits: dict, info: dict, chance: float, n: int) -> list[dict]:
    """The rows of the classifier's judgement: every method's share per p, and the verdicts."""
    rows = [
        claim(
            "true_label_share",
            float(v[j].mean()),
            method,
            f"p = {p:g}: share of {n} denoised test digits the classifier labels as their digit",
        )
        for method, v in hits.items()
        for j, p in enumerate(ps)
    ]
    rows.append(claim("label_chance_level", chance, "", "largest label share of the digits"))
    for label, i in info.items():
        if not i["noiseaug"]:
            rows.append(kept_claim(ps, label, i["nh"], hits[label], hits["ope"], chance))
    plain = {i["nh"]: label for label, i in info.items() if not i["noiseaug"]}
    spurious = spurious_claim(ps, plain, hits)
    return rows + ([spurious] if spurious is not None else [])


def _judged(tap_files, labels, baselines_file, classifier, data_file) -> list[dict]:
    """The classifier's rows for the digits the denoising files hold (``classifier_claims``);
    one context row when the files predate the stored estimates."""
    from tapmachine.io.data import load_dataset

    ps, mcc, info = load_curves(tap_files, labels, baselines_file)
    packed = {}
    with np.load(baselines_file, allow_pickle=False) as npz:
        for method in npz["methods"]:
            if f"estimates_{method}" in npz:
                packed[str(method)] = npz[f"estimates_{method}"]
    for f, label in zip(tap_files, labels, strict=True):
        with np.load(f, allow_pickle=False) as npz:
            if "estimates" in npz:
                packed[label] = npz["estimates"]
    if set(packed) != set(mcc):
        return [
            claim(
                "true_label_share",
                math.nan,
                "",
                "the denoising files predate the stored estimates: run `denoise bsc` and "
                f"`denoise baselines` again (estimates of {sorted(packed)} only)",
            )
        ]
    n = mcc["ope"].shape[1]
    ds = load_dataset(data_file)
    truth = np.asarray(ds.y_test[:n])
    net = load_classifier(classifier)
    nv = int(np.prod(ds.image_shape))
    # The verdicts read p in (0, 0.5) only: at p = 0 TAP and the OPE return the digit itself, at
    # p = 0.5 nothing of it is left; classifying them would double the work for no row.
    judged = [j for j, p in enumerate(ps) if 0 < p < 0.5]
    hits = {
        m: true_label_hits(
            v.reshape(len(ps), n, -1)[judged].reshape(len(judged) * n, -1),
            truth,
            lambda x: predicted_labels(net, x),
            nv,
        )
        for m, v in packed.items()
    }
    chance = float(np.bincount(truth).max() / n)
    return classifier_claims(ps[judged], hits, info, chance, n)


@styled
def make(
    tap_files: list,
    baselines_file,
    model_files: list,
    ps_shown=None,
    labels=None,
    classifier=None,
    data_file=None,
):
    """Fig. 9 from the denoising results (``ps_shown``: a subset of the p grid, default all);
    with the MNIST ``classifier`` and the ``data_file`` the digits came from, the classifier's
    verdicts over every denoised digit."""
    if labels is None:
        labels = [f"tap_{Path(f).parent.name}" for f in tap_files]
    if len(labels) != len(tap_files):
        raise FigureError(f"{len(tap_files)} TAP result files but {len(labels)} labels")
    with np.load(baselines_file, allow_pickle=False) as npz:
        ps = npz["ps"]
        shape = tuple(int(v) for v in npz["image_shape"])
        clean = npz["fig9_clean"]
        noisy = npz["fig9_noisy"]
        rows = {"ope": npz["fig9_ope"], "1nn": npz["fig9_knn"]}
    same = True
    for f, label in zip(tap_files, labels, strict=True):
        with np.load(f, allow_pickle=False) as npz:
            if not np.array_equal(npz["ps"], ps):
                raise FigureError(f"{f}: p grid differs from the baselines'")
            same &= bool(np.array_equal(npz["fig9_noisy"], noisy))
            same &= bool(np.array_equal(npz["fig9_clean"], clean))
            rows[label] = npz["fig9_means"]
    if ps_shown:
        cols = []
        for p in ps_shown:
            hit = np.flatnonzero(np.isclose(ps, p))
            if hit.size == 0:
                raise FigureError(f"fig9 p = {p} is not in the denoising grid {list(ps)}")
            cols.append(int(hit[0]))
    else:
        cols = list(range(len(ps)))
    panels = {"noisy": noisy, **rows}
    fig = new_figure(max(COLUMN, min(PAGE, 0.6 * (len(cols) + 1))), 0.65 * len(panels) + 0.5)
    axes = fig.subplots(len(panels), len(cols) + 1, squeeze=False)
    drawn = []
    for r, (method, images) in enumerate(panels.items()):
        first = axes[r][0]
        first.imshow(
            clean.reshape(shape) if r == 0 else np.zeros(shape), cmap="gray_r", vmin=0, vmax=1
        )
        # across, beside its row: a method's name (tap_nh500_noiseaug) is longer than a row is high
        first.set_ylabel(method, rotation=0, ha="right", va="center")
        if r == 0:
            first.set_title("clean")
        for c, j in enumerate(cols):
            ax = axes[r][c + 1]
            ax.imshow(images[j].reshape(shape), cmap="gray_r", vmin=0, vmax=1)
            if r == 0:
                ax.set_title(f"p = {ps[j]:g}")
            drawn.append(
                {
                    "method": method,
                    "p": float(ps[j]),
                    "mcc": _mcc(np.round(images[j]), clean),
                    "mean_value": float(images[j].mean()),
                }
            )
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.spines[:].set_visible(False)
    fig.suptitle("Fig. 9: one test digit denoised\nposterior means, white 0, black 1")
    claims = [claim("same_noise_every_method", float(same), "", "1 = one realisation per p")]
    if classifier is not None and data_file is not None:
        claims += _judged(tap_files, labels, baselines_file, classifier, data_file)
    models = [model_info(f) for f in model_files]
    params = {"ps": [float(ps[j]) for j in cols], "methods": list(panels)}
    return FigureResult(fig, table(drawn, claims), models, params)
