"""Alg. 2 with a fixed number of TAP iterations vs Alg. 1 to convergence, on bmnist_h100.

`python benchmarks/train_modes.py --n-train 60000 --epochs 10` trains the same RBM (784 x 100,
binary MNIST, Table 1's optimiser) once per mode from the same initial weights and minibatch
order, and prints one JSON line per mode: the per-epoch TAP log-likelihood (Fig. 3's curve, on
the first --n-eval training images, unique converged solutions), unique solutions and seconds per
epoch, and the final AIS test log-likelihood (App. F; Salakhutdinov schedule thinned to
--n-betas, --ais-runs chains, on the first --n-test test images; --ais-runs 0 skips it). With
--denoise-images N it also denoises the first N test images through the binary symmetric channel
at each --ps as Fig. 8 does (TAP from the OPE, damping 0.5, to 1e-8 or 1,000 iterations) and
prints, per p, TAP's mean MCC and its paired differences from the OPE and from 1-NN (the
reference is the training rows used). docs/departures.md quotes its output.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tapmachine.core import estimators  # noqa: E402
from tapmachine.core.seeding import seeded_generator  # noqa: E402
from tapmachine.figures.fig8 import paired  # noqa: E402
from tapmachine.io.data import load_dataset  # noqa: E402
from tapmachine.tap_paper import denoise, likelihood  # noqa: E402
from tapmachine.train import TrainSettings, build_machine, train  # noqa: E402

SPEC = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 100}]}


def channel(x, x_test, args) -> dict:
    """The noisy test images at every p (one seeded realisation) and the OPE and 1-NN MCCs."""
    clean = x_test[: args.denoise_images]
    ps = [float(p) for p in args.ps.split(",")]
    y, p_rows, truth = denoise.stack_noise(clean, ps, seeded_generator(args.seed, "denoise", "bsc"))
    m = denoise.magnetisations(x)
    baselines = {
        "ope": denoise.ope(y, p_rows, m),
        "1nn": denoise.nearest_neighbours(y, x, k=1),
    }
    mcc = {k: denoise.mcc(v.round(), truth).reshape(len(ps), -1) for k, v in baselines.items()}
    return {"ps": ps, "y": y, "p_rows": p_rows, "truth": truth, "m": m, "mcc": mcc}


def denoise_scores(machine, bsc: dict) -> dict:
    """Fig. 8's numbers for one machine: per p, TAP's mean MCC and TAP - OPE, TAP - 1-NN."""
    state = denoise.tap_denoise(machine, bsc["y"], bsc["p_rows"], bsc["m"])
    tap = denoise.mcc(state.a[0].round(), bsc["truth"]).reshape(len(bsc["ps"]), -1)
    out = {"p": bsc["ps"], "mcc": [float(r.mean()) for r in tap]}
    for name, ref in bsc["mcc"].items():
        pairs = [paired(tap[i].numpy(), ref[i].numpy()) for i in range(len(bsc["ps"]))]
        out[f"minus_{name}"] = [d for d, _ in pairs]
        out[f"minus_{name}_se"] = [s for _, s in pairs]
    out["converged"] = float(state.converged.double().mean())
    return out


def run_mode(mode, x, x_test, args, bsc=None) -> dict:
    settings = TrainSettings(
        epochs=args.epochs,
        batch_size=100,
        learning_rate=0.005,
        momentum=0.5,
        l2=0.001,
        weight_init_std=0.001,
        train_iterations=mode,
        train_tol=args.train_tol,
        train_max_iter=args.train_max_iter,
        eval_samples=args.n_eval,
    )
    g = seeded_generator(args.seed, "bmnist_h100", "train")
    machine = build_machine(SPEC, x, settings.weight_init_std, g)
    t0 = time.perf_counter()
    machine, history = train(machine, x, settings, g, progress=False)
    wall = time.perf_counter() - t0
    scores = {}
    if args.ais_runs:
        ais = estimators.ais_log_partition(
            machine,
            data=x,
            n_runs=args.ais_runs,
            betas=likelihood.ais_schedule("salakhutdinov", args.n_betas),
            generator=seeded_generator(args.seed, "bmnist_h100", "ais"),
        )
        test_ll = estimators.test_log_likelihood(machine, x_test, ais)
        scores = {
            "ais_log_z": float(ais.log_z),
            "ais_log_z_stderr": float(ais.stderr),
            "ais_test_ll": float(test_ll.mean()),
        }
    if bsc is not None:
        scores["denoise"] = denoise_scores(machine, bsc)
    keys = (
        "tap_ll",
        "n_unique",
        "train_seconds",
        "epoch_seconds",
        "train_mean_iterations",
        "train_converged_fraction",
        "train_mean_solutions",
    )
    return {
        "mode": mode,
        "settings": {
            k: v for k, v in dataclasses.asdict(settings).items() if k.startswith("train")
        },
        "per_epoch": {k: [h.get(k) for h in history] for k in keys},
        "unique_last_epoch": history[-1]["n_unique"],
        "seconds_per_epoch_train": sum(h["train_seconds"] for h in history) / len(history),
        "seconds_per_epoch_total": wall / len(history),
        **scores,
        "w_std": history[-1]["w_std"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-train", type=int, default=60000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--n-eval", type=int, default=1000)
    p.add_argument("--n-test", type=int, default=10000)
    p.add_argument("--n-betas", type=int, default=1451)
    p.add_argument("--ais-runs", type=int, default=100)
    p.add_argument("--train-tol", type=float, default=1e-8)
    p.add_argument("--train-max-iter", type=int, default=100)
    p.add_argument("--modes", default="3,converge")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--denoise-images", type=int, default=0)
    p.add_argument("--ps", default="0.05,0.1,0.2,0.3,0.35,0.4,0.45")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset(ROOT / "results" / "data" / "binary_mnist.npz")
    x = torch.as_tensor(ds.x_train[: args.n_train], dtype=torch.float32)
    x_test = torch.as_tensor(ds.x_test[: args.n_test], dtype=torch.float32)
    bsc = channel(x, x_test, args) if args.denoise_images else None
    for mode in args.modes.split(","):
        mode = int(mode) if mode.isdigit() else mode
        print(
            json.dumps(
                {
                    "n_train": args.n_train,
                    "epochs": args.epochs,
                    **run_mode(mode, x, x_test, args, bsc),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
