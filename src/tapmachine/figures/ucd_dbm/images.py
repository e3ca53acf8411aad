"""Second paper, Figs. 2-3: samples by local search from noise, and completions of the lower
half, of DBMs trained by UCD-LMI and the baselines (see the package's docstring)."""

from __future__ import annotations

import numpy as np

from tapmachine.figures.common import (
    COLUMN,
    PAGE,
    FigureError,
    FigureResult,
    ModelInfo,
    claim,
    new_figure,
    styled,
)
from tapmachine.figures.common import table as make_table

__all__ = [
    "PAPER_SIZES",
    "completion",
    "epoch_image",
    "image_grid",
    "sample_claims",
    "samples",
]

PAPER_SIZES = (6272, 6272, 6272)


def _size_note(blob) -> str:
    """'784-200-200, 200 steps (reduced; paper size: paper.yaml)' for the table's rows."""
    from tapmachine.ucd.dbm import size_label

    sizes = blob["sizes"]
    text = size_label(sizes)
    if blob.get("steps"):
        text += f", {blob['steps']} steps"
    if sizes != PAPER_SIZES:
        text += " (reduced; paper size: paper.yaml)"
    return text


#: Below this fraction of distinct samples (or completions) a model counts as collapsed.
COLLAPSE_FRACTION = 0.5
#: Diverse (Fig. 2b): at least this fraction distinct, and a mean pairwise Hamming distance at
#: least ``HAMMING_FRACTION`` of the data's.
DIVERSE_FRACTION = 0.9
HAMMING_FRACTION = 0.5


def _title(fig, title: str, blobs: list) -> None:
    """The figure's title, with a second line when some DBM is below the paper's size (each
    one's size and steps are in the table's rows)."""
    from tapmachine.ucd.dbm import size_label

    small = sorted({size_label(b["sizes"]) for b in blobs if b["sizes"] != PAPER_SIZES})
    note = f"\nREDUCED SIZE ({', '.join(small)}; paper: {size_label(PAPER_SIZES)})" if small else ""
    fig.suptitle(title + note)


def _distinct_title(name: str, n_distinct: int, n: int) -> str:
    """A panel's two-line title: the model, and how many of its images are distinct (marked
    collapsed below ``COLLAPSE_FRACTION``), short enough for a completion panel's three columns."""
    collapsed = " (collapsed)" if n_distinct < COLLAPSE_FRACTION * n else ""
    return f"{name}\n{n_distinct} of {n} distinct{collapsed}"


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


def epoch_image(machine, x01, shape, generator, path) -> None:
    """One PNG of a DBM during training: 32 samples (local modes from uniform states,
    ``ucd.generate.sample``) beside the first 16 rows of ``x01`` ({0, 1}) and their
    reconstructions (``ucd.generate.reconstruct``)."""
    import torch

    from tapmachine.io.files import atomic_write
    from tapmachine.ucd import dbm, generate

    drawn, _ = generate.sample(machine, 32, generator)
    recon = generate.reconstruct(machine, dbm.data_for(machine, x01[:16]), generator)
    fig = new_figure(8, 3.2)
    axes = fig.subplots(1, 2)
    for ax, imgs, title in (
        (axes[0], dbm.to_unit_interval(machine, drawn), "samples (local modes)"),
        (
            axes[1],
            torch.cat([x01[:16], dbm.to_unit_interval(machine, recon).cpu()]),
            "data | recon.",
        ),
    ):
        ax.imshow(image_grid(imgs.cpu().numpy(), shape, 8), cmap="gray", vmin=0, vmax=1)
        ax.set_title(title, fontsize=8)
        ax.axis("off")
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=80))


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


@styled
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
    fig = new_figure(max(COLUMN, min(PAGE, 1.75 * len(model_paths))), 2.4)
    axes = np.atleast_1d(fig.subplots(1, len(model_paths)))
    drawn, claims, infos = [], [], []
    blobs = []
    for i_model, (ax, path) in enumerate(zip(axes, model_paths, strict=True)):
        blob, machine = _load(path, device)
        info = _info(blob)
        infos.append(info)
        g = seeded_generator(seed, "ucd_samples", info.name, device=device)
        x, T = generate.sample(machine, n, g)
        images = dbm.to_unit_interval(machine, x).cpu()
        n_distinct = diversity.distinct(images)
        spread = diversity.mean_pairwise_hamming(images)
        nearest = torch.full((n,), float("nan"), dtype=torch.float64)
        data_spread = float("nan")
        if data_paths is not None:
            ds = data.load_dataset(data_paths[i_model])
            if ds.name != blob["dataset"]:
                raise FigureError(f"{path} was trained on {blob['dataset']}, not {ds.name}")
            nearest = diversity.nearest_hamming(images, torch.as_tensor(ds.x_train))
            data_spread = diversity.mean_pairwise_hamming(torch.as_tensor(ds.x_test[:n]))
        ax.imshow(_grid(images.numpy(), blob["image_shape"], 6), cmap="gray", vmin=0, vmax=1)
        ax.set_title(_distinct_title(info.name, n_distinct, n))
        blobs.append(blob)
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
        claims += sample_claims(blob, info.name, n, n_distinct, spread, data_spread, nearest)
    _title(fig, "Fig. 2 (2nd paper): samples by local search", blobs)
    return FigureResult(fig, make_table(drawn, claims), infos, {"n": n, "seed": seed})


def sample_claims(blob, name, n, n_distinct, spread, data_spread, nearest) -> list:
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


#: Fig. 3's columns: the test image with its lower half hidden (grey), its completion, the image.
COMPLETION_COLUMNS = ("input", "filled", "truth")


def _label_columns(ax, width: int, labels) -> None:
    """An image grid's axes without frame or y ticks, ``labels`` under its equal-width columns."""
    step = width / len(labels)
    ax.set_xticks([(j + 0.5) * step - 0.5 for j in range(len(labels))], labels)
    ax.set_yticks([])
    ax.tick_params(length=0, labelsize="small")
    for spine in ax.spines.values():
        spine.set_visible(False)


@styled
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
    fig = new_figure(max(COLUMN, min(PAGE, 1.75 * len(model_paths))), 3.0)
    axes = np.atleast_1d(fig.subplots(1, len(model_paths)))
    drawn, claims, infos = [], [], []
    blobs = []
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
        grid = _grid(rows.numpy(), (h, w), 3)
        ax.imshow(grid, cmap="gray", vmin=0, vmax=1)
        halves = filled[:, mask].cpu().numpy()
        n_distinct = len({halves[i].tobytes() for i in range(n)})
        ax.set_title(_distinct_title(info.name, n_distinct, n))
        blobs.append(blob)
        _label_columns(ax, grid.shape[1], COMPLETION_COLUMNS)
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
    _title(fig, "Fig. 3 (2nd paper): lower halves completed", blobs)
    return FigureResult(fig, make_table(drawn, claims), infos, {"n": n, "seed": seed})
