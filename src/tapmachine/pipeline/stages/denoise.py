# Over 500 lines: its three jobs (BSC, its baselines, the real-valued channel) share the loading,
# noise and recording helpers below; apart, each would import the others' private helpers.
"""Denoising stage (first paper, Sec. VII.4; Figs. 8-9; a real-valued channel beyond the paper).

Commands (``tapmachine denoise ...``), each reading a model and/or a dataset, calling
``tapmachine.tap_paper.denoise`` and writing a summary CSV and an ``.npz`` of arrays atomically:

- ``denoise bsc``: a binary machine as the prior of the binary symmetric channel, all test images
  at all p in one batched TAP solve;
- ``denoise baselines``: the OPE (eq. 46) and k-NN on the same noisy images;
- ``denoise real``: the Gaussian channel on real-valued images, TAP with the tilted truncated
  Gauss-Bernoulli prior against the pointwise posterior mean and 1-NN;

and the figures ``tapmachine figure fig8 | fig9 | fig_denoise_real``. The noisy images come from a
generator seeded by (config seed, "denoise", channel), so every job sees the same realisation.
MLflow: one run per denoised model (and one for the baselines) in experiment ``denoise``, the MCC
(or MSE) per noise level as a metric series (step = index of the level), the levels and settings
as params (the run's record kept beside the outputs, ``<stem>.run.json``).
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from tapmachine.pipeline.configuration import schema_default
from tapmachine.pipeline.stages.common import add_numeric_args, set_threads

__all__ = ["register", "bsc_settings", "real_settings", "run_bsc", "run_baselines", "run_real"]

#: Settings a job is given as JSON (config denoise.fig8 with fig9.image, and denoise.real),
#: defaults from the schema.
BSC_DEFAULTS = {
    **{
        key: schema_default("denoise", "fig8", key)
        for key in ("ps", "n_images", "n_reference", "k", "tol", "max_iter", "damping")
    },
    "fig9_image": schema_default("denoise", "fig9", "image"),
}
REAL_DEFAULTS = {
    key: schema_default("denoise", "real", key)
    for key in ("sigmas", "n_images", "n_reference", "k", "tol", "max_iter", "damping", "fig_image")
}


def _settings(text: str, defaults: dict, what: str) -> dict:
    from tapmachine.tap_paper.denoise import DenoiseError

    try:
        given = json.loads(text) if isinstance(text, str) else dict(text)
    except json.JSONDecodeError as err:
        raise DenoiseError(f"--spec is not JSON: {err}") from err
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise DenoiseError(f"{what}: unknown settings {unknown}; known: {sorted(defaults)}")
    out = {**defaults, **given}
    for key in ("n_images", "k", "max_iter"):
        if not isinstance(out[key], int) or out[key] < 1:
            raise DenoiseError(f"{what}.{key} = {out[key]!r} must be an integer >= 1")
    if out["n_reference"] is not None and (
        not isinstance(out["n_reference"], int) or out["n_reference"] < 1
    ):
        raise DenoiseError(f"{what}.n_reference = {out['n_reference']!r} must be >= 1 or null")
    if not 0.0 <= float(out["damping"]) < 1.0:
        raise DenoiseError(f"{what}.damping = {out['damping']} must be in [0, 1)")
    if not float(out["tol"]) > 0:
        raise DenoiseError(f"{what}.tol = {out['tol']} must be > 0")
    return out


def bsc_settings(text) -> dict:
    """The ``denoise.fig8`` settings (JSON), defaults filled and checked."""
    from tapmachine.tap_paper.denoise import DenoiseError

    s = _settings(text, BSC_DEFAULTS, "denoise.fig8")
    ps = [float(p) for p in s["ps"]]
    if not ps or any(not 0.0 <= p <= 0.5 for p in ps) or len(set(ps)) != len(ps):
        raise DenoiseError(f"denoise.fig8.ps = {s['ps']} must be distinct values in [0, 0.5]")
    s["ps"] = ps
    if not 0 <= s["fig9_image"] < s["n_images"]:
        raise DenoiseError(
            f"denoise.fig9.image = {s['fig9_image']} must be below n_images = {s['n_images']}"
        )
    return s


def real_settings(text) -> dict:
    """The ``denoise.real`` settings (JSON), defaults filled and checked."""
    from tapmachine.tap_paper.denoise import DenoiseError

    s = _settings(text, REAL_DEFAULTS, "denoise.real")
    sigmas = [float(v) for v in s["sigmas"]]
    if not sigmas or any(not v > 0 for v in sigmas) or len(set(sigmas)) != len(sigmas):
        raise DenoiseError(f"denoise.real.sigmas = {s['sigmas']} must be distinct values > 0")
    s["sigmas"] = sigmas
    if not 0 <= s["fig_image"] < s["n_images"]:
        raise DenoiseError(
            f"denoise.real.fig_image = {s['fig_image']} must be below n_images = {s['n_images']}"
        )
    return s


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _load_images(data_path, settings: dict, binary: bool, dtype):
    """(test images, reference training images, dataset) as tensors; shape checks first."""
    import torch

    from tapmachine.io import data
    from tapmachine.tap_paper.denoise import DenoiseError

    ds = data.load_dataset(data_path)
    n, n_test = settings["n_images"], ds.x_test.shape[0]
    if n > n_test:
        raise DenoiseError(f"n_images = {n} but {data_path} has {n_test} test images")
    x = torch.as_tensor(ds.x_test[:n], dtype=dtype)
    ref_n = settings["n_reference"] or ds.x_train.shape[0]
    ref = torch.as_tensor(ds.x_train[:ref_n], dtype=dtype)
    if binary and not bool(((x == 0) | (x == 1)).all()):
        raise DenoiseError(f"{data_path}: the binary symmetric channel needs {{0, 1}} images")
    return x, ref, ds


def _load_machine(model_file, n_visible: int, dtype, device):
    """(machine on ``device``, ModelFile) of ``model_file``, read through
    ``tapmachine.io.modelfile``."""
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.tap_paper.denoise import DenoiseError

    path = Path(model_file)
    if not path.is_file():
        raise DenoiseError(f"model file not found: {path}")
    record = ModelFile.load(path)
    machine = record.machine(dtype=dtype)
    if machine.sizes[0] != n_visible:
        raise DenoiseError(
            f"{path}: the machine has {machine.sizes[0]} visible units, the images {n_visible}"
        )
    return machine.to(device=device), record


def _noise_generator(seed: int, channel: str):
    from tapmachine.core.seeding import seeded_generator

    return seeded_generator(seed, "denoise", channel)


def _write_npz(path, arrays: dict) -> None:
    from tapmachine.io.files import atomic_write

    def write(fh):
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        fh.write(buf.getvalue())

    atomic_write(path, write)


def _summary_rows(method: str, levels, values: np.ndarray, key: str, extra=None) -> list[dict]:
    """One row per noise level: mean and standard error of ``values`` (levels x images)."""
    rows = []
    n = values.shape[1]
    for i, level in enumerate(levels):
        v = values[i]
        row = {
            "method": method,
            key: float(level),
            "value": float(v.mean()),
            "se": float(v.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
            "n_images": n,
        }
        if extra is not None:
            row.update({k: float(a[i]) for k, a in extra.items()})
        rows.append(row)
    return rows


def _record(run_name, params, tags, series: dict, files, model_file=None):
    """The record of a run in experiment ``denoise``: metric series (step = level index), the
    files, linked to the training run of ``model_file`` (if any)."""
    from tapmachine.pipeline.tracking.records import RunRecord, source_run

    train_run = source_run(model_file) if model_file is not None else None
    links = {"model_run_id": train_run} if train_run else {}
    record = RunRecord("denoise", run_name, params, tags, links=links, artifacts=list(files))
    for step in range(len(next(iter(series.values())))):
        record.add_metrics({k: float(v[step]) for k, v in series.items()}, step=step)
    return record


# ---------------------------------------------------------------------------------------------
# Binary symmetric channel
# ---------------------------------------------------------------------------------------------


def _packed(means) -> np.ndarray:
    """Rounded estimates (rows of posterior means, p-major) as bits, 8 pixels a byte: what Fig. 9's
    classifier reads (``figures.fig9``; ``np.unpackbits(..., count=n_visible)``)."""
    return np.packbits(means.round().cpu().numpy().astype(np.uint8), axis=-1)


def run_bsc(
    model_file,
    data_path,
    settings: dict,
    out_csv,
    out_npz,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    manifest=None,
) -> dict:
    """TAP denoising of the first n_images test images at every p with one machine (Fig. 8)."""
    import torch

    from tapmachine.core.priors import Bernoulli
    from tapmachine.tap_paper import denoise

    tdtype = getattr(torch, dtype)
    x, ref, ds = _load_images(data_path, settings, binary=True, dtype=tdtype)
    machine, record = _load_machine(model_file, x.shape[1], tdtype, device)
    if not isinstance(machine.visible, Bernoulli):
        raise denoise.DenoiseError(
            f"{model_file}: the binary symmetric channel needs Bernoulli visible units, "
            f"got {type(machine.visible).__name__}"
        )
    ps = settings["ps"]
    y, p_rows, clean = denoise.stack_noise(x, ps, _noise_generator(seed, "bsc"))
    m = denoise.magnetisations(ref)
    state, seconds = _solve_timed(denoise.tap_denoise, machine, y, p_rows, m, settings)
    means = state.a[0].cpu()
    n = x.shape[0]
    mcc = denoise.mcc(means.round(), clean).reshape(len(ps), n).numpy()
    iters = state.iterations.cpu().reshape(len(ps), n).double()
    conv = state.converged.cpu().reshape(len(ps), n).double()
    name = record.name or Path(model_file).parent.name
    rows = _summary_rows(
        "tap",
        ps,
        mcc,
        "p",
        {"converged": conv.mean(1).numpy(), "mean_iterations": iters.mean(1).numpy()},
    )
    for r in rows:
        r["model"] = name
    idx = settings["fig9_image"] + n * np.arange(len(ps))
    arrays = {
        "ps": np.asarray(ps),
        "mcc": mcc,
        "converged": conv.numpy().astype(bool),
        "iterations": iters.numpy().astype(np.int64),
        "fig9_means": means[idx].numpy(),
        "fig9_noisy": y[idx].numpy(),
        "fig9_clean": x[settings["fig9_image"]].numpy(),
        "estimates": _packed(means),
        "image_shape": np.asarray(ds.image_shape),
        "model": np.asarray(name),
        "train_noise": np.asarray(json.dumps((record.spec or {}).get("train_noise"))),
        "sizes": np.asarray(machine.sizes),
        "seconds": np.asarray(seconds),
    }
    print(
        f"{name}: {len(ps)} p x {n} images, {seconds:.1f} s, "
        f"{int(conv.sum())}/{conv.numel()} rows converged",
        file=sys.stderr,
    )
    params = {"model": name, "ps": ps, **{k: v for k, v in settings.items() if k != "ps"}}
    tags = {"model": name, "channel": "bsc"}
    series = {"mcc": mcc.mean(1), "mcc_se": [r["se"] for r in rows]}
    run = _record(f"{name}-bsc", params, tags, series, [out_csv], model_file)
    _publish(rows, arrays, out_csv, out_npz, manifest, run)
    return arrays


def _publish(rows, arrays, out_csv, out_npz, manifest, record) -> None:
    """Write the CSV summary and the npz (the CSV is removed if the npz fails), then log the
    run's record and keep it beside them (``pipeline.tracking.recorder.publish``)."""
    from tapmachine.io.files import write_csv
    from tapmachine.pipeline.tracking.recorder import publish

    write_csv(rows, out_csv)
    try:
        _write_npz(out_npz, arrays)
    except BaseException:
        Path(out_csv).unlink(missing_ok=True)
        Path(out_npz).unlink(missing_ok=True)
        raise
    publish(manifest, record, out_npz)


def _solve_timed(denoiser, machine, y, levels, init, settings: dict):
    """(state, seconds) of ``denoiser(machine, y, levels, init, ...)`` on the machine's device
    with the settings' damping, tol and max_iter."""
    t0 = time.perf_counter()
    state = denoiser(
        machine,
        y.to(machine.device),
        levels,
        init.to(machine.device),
        damping=settings["damping"],
        tol=settings["tol"],
        max_iter=settings["max_iter"],
    )
    return state, time.perf_counter() - t0


def run_baselines(
    data_path,
    settings: dict,
    out_csv,
    out_npz,
    seed: int = 0,
    dtype: str = "float32",
    manifest=None,
) -> dict:
    """The OPE (eq. 46) and k-NN (Hamming) on the noisy images of ``run_bsc``."""
    import torch

    from tapmachine.tap_paper import denoise

    tdtype = getattr(torch, dtype)
    x, ref, ds = _load_images(data_path, settings, binary=True, dtype=tdtype)
    ps = settings["ps"]
    y, p_rows, clean = denoise.stack_noise(x, ps, _noise_generator(seed, "bsc"))
    m = denoise.magnetisations(ref)
    n = x.shape[0]
    ope = denoise.ope(y, p_rows, m)
    t0 = time.perf_counter()
    knn = denoise.nearest_neighbours(y, ref, k=settings["k"])
    knn_seconds = time.perf_counter() - t0
    label = f"{settings['k']}nn"
    mccs = {
        "ope": denoise.mcc(ope.round(), clean).reshape(len(ps), n).numpy(),
        label: denoise.mcc(knn.round(), clean).reshape(len(ps), n).numpy(),
    }
    rows = [r for method, v in mccs.items() for r in _summary_rows(method, ps, v, "p")]
    idx = settings["fig9_image"] + n * np.arange(len(ps))
    arrays = {
        "ps": np.asarray(ps),
        "methods": np.asarray(list(mccs)),
        **{f"mcc_{k}": v for k, v in mccs.items()},
        "fig9_ope": ope[idx].numpy(),
        "fig9_knn": knn[idx].numpy(),
        "estimates_ope": _packed(ope),
        f"estimates_{label}": _packed(knn),
        "fig9_noisy": y[idx].numpy(),
        "fig9_clean": x[settings["fig9_image"]].numpy(),
        "image_shape": np.asarray(ds.image_shape),
        "n_reference": np.asarray(ref.shape[0]),
        "knn_seconds": np.asarray(knn_seconds),
    }
    params = {"ps": ps, **{k: v for k, v in settings.items() if k != "ps"}}
    series = {f"mcc.{k}": v.mean(1) for k, v in mccs.items()}
    run = _record("baselines-bsc", params, {"channel": "bsc"}, series, [out_csv])
    _publish(rows, arrays, out_csv, out_npz, manifest, run)
    return arrays


# ---------------------------------------------------------------------------------------------
# Gaussian channel
# ---------------------------------------------------------------------------------------------


def run_real(
    model_file,
    data_path,
    settings: dict,
    out_csv,
    out_npz,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    manifest=None,
) -> dict:
    """Gaussian-channel denoising of real-valued images: TAP (tilted visible prior) against the
    pointwise posterior mean under the per-site empirical prior and k-NN (Euclidean)."""
    import torch

    from tapmachine.tap_paper import denoise

    tdtype = getattr(torch, dtype)
    x, ref, ds = _load_images(data_path, settings, binary=False, dtype=tdtype)
    machine, record = _load_machine(model_file, x.shape[1], tdtype, device)
    sigmas = settings["sigmas"]
    n = x.shape[0]
    s_rows = torch.tensor(sigmas, dtype=torch.float64).repeat_interleave(n)
    clean = x.repeat(len(sigmas), 1)
    y = denoise.gaussian_channel(clean, s_rows, _noise_generator(seed, "gaussian"))
    values, counts = denoise.site_histograms(ref)
    pointwise = denoise.pointwise_gaussian(y, s_rows, values, counts)
    knn = denoise.nearest_neighbours(y, ref, k=settings["k"], metric="euclidean")
    state, seconds = _solve_timed(
        denoise.tap_denoise_gaussian, machine, y, s_rows, pointwise, settings
    )
    tap_means = state.a[0].cpu()
    estimates = {"pointwise": pointwise, f"{settings['k']}nn": knn, "tap": tap_means, "noisy": y}
    mses = {k: denoise.mse(v, clean).reshape(len(sigmas), n).numpy() for k, v in estimates.items()}
    name = record.name or Path(model_file).parent.name
    rows = []
    for method, v in mses.items():
        for r in _summary_rows(method, sigmas, v, "sigma"):
            r["psnr"] = denoise.psnr(r["value"])
            rows.append(r)
    conv = state.converged.cpu().reshape(len(sigmas), n).double()
    idx = settings["fig_image"] + n * np.arange(len(sigmas))
    arrays = {
        "sigmas": np.asarray(sigmas),
        "methods": np.asarray(list(mses)),
        **{f"mse_{k}": v for k, v in mses.items()},
        **{f"fig_{k}": v[idx].numpy() for k, v in estimates.items()},
        "fig_clean": x[settings["fig_image"]].numpy(),
        "converged": conv.numpy().astype(bool),
        "image_shape": np.asarray(ds.image_shape),
        "model": np.asarray(name),
        "seconds": np.asarray(seconds),
    }
    print(
        f"{name}: {len(sigmas)} sigma x {n} images, TAP {seconds:.1f} s, "
        f"{int(conv.sum())}/{conv.numel()} rows converged",
        file=sys.stderr,
    )
    params = {
        "model": name,
        "sigmas": sigmas,
        **{k: v for k, v in settings.items() if k != "sigmas"},
    }
    tags = {"model": name, "channel": "gauss"}
    series = {f"mse.{k}": v.mean(1) for k, v in mses.items()}
    series.update(
        {f"psnr.{k}": [denoise.psnr(float(e)) for e in v.mean(1)] for k, v in mses.items()}
    )
    run = _record(f"{name}-gaussian", params, tags, series, [out_csv], model_file)
    _publish(rows, arrays, out_csv, out_npz, manifest, run)
    return arrays


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def _cmd_run(args) -> None:
    """``denoise bsc|baselines|real``: parse the settings, run the stage, say what was written."""
    run, parse_settings = {
        "bsc": (run_bsc, bsc_settings),
        "baselines": (run_baselines, bsc_settings),
        "real": (run_real, real_settings),
    }[args.denoise_command]
    set_threads(args.threads)
    # The two TAP denoisers take a model and a device; the baselines neither.
    model = {} if run is run_baselines else {"model_file": args.model_file, "device": args.device}
    run(
        data_path=args.data,
        settings=parse_settings(args.spec),
        out_csv=args.out_csv,
        out_npz=args.out_npz,
        seed=args.seed,
        dtype=args.dtype,
        manifest=args.tracking,
        **model,
    )
    print(f"wrote {args.out_csv}, {args.out_npz}")


def register(subparsers) -> None:
    """Add ``denoise {bsc,baselines,real}`` (fig8, fig9 and fig_denoise_real are in
    ``stages.figures``)."""
    s = subparsers.add_parser("denoise", help="denoising with a trained machine (Sec. VII.4)")
    sub = s.add_subparsers(dest="denoise_command", required=True)
    spec_help = "the config's denoise.fig8 / denoise.real section as JSON"
    b = sub.add_parser("bsc", help="TAP denoising of the binary symmetric channel (Fig. 8)")
    b.add_argument("--model-file", required=True, help="model.pt with Bernoulli visible units")
    r = sub.add_parser("real", help="TAP denoising of the Gaussian channel (real-valued)")
    r.add_argument("--model-file", required=True, help="model.pt (e.g. Gauss-Bernoulli visible)")
    base = sub.add_parser("baselines", help="OPE (eq. 46) and k-NN on the BSC")
    for p in (b, r, base):
        p.add_argument("--data", required=True, help="dataset .npz (test images denoised)")
        p.add_argument("--spec", default="{}", help=spec_help)
        p.add_argument("--out-csv", required=True)
        p.add_argument("--out-npz", required=True)
        add_numeric_args(p)
        p.add_argument(
            "--tracking", default=None, help="manifest of tracking-init (omit: no MLflow)"
        )
        p.set_defaults(func=_cmd_run)
