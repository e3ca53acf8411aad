"""A tiny workflow directory for the operations tests (SLURM, tracking servers, UI): a synthetic
"mnist" dataset already in results/data (no download), one small model, Fig. 3 and one harvest.
Also a command line: ``python tests/tiny_ops.py WORKDIR [RUN_NAME]`` prepares WORKDIR."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def config(run_name: str = "ops", epochs: int = 3) -> dict:
    return {
        "seed": 11,
        "run": {"name": run_name},
        "data": {
            "derived": {
                "binary_mnist": {
                    "source": "mnist",
                    "transforms": [{"name": "threshold", "level": 0.5}],
                }
            }
        },
        "models": {
            "tiny": {
                "dataset": "binary_mnist",
                "visible": {"prior": "bernoulli"},
                "hidden": [{"prior": "bernoulli", "units": 6}],
                "n_train": 200,
                "epochs": epochs,
                "batch_size": 50,
                "eval": {"n_samples": 50},
            }
        },
        "harvest": {"tiny": {"epochs": [epochs], "n_init": 30}},
        "figures": {"fig3": {"models": ["tiny"]}},
    }


def targets(run_name: str = "ops", epochs: int = 3) -> list[str]:
    res = f"results/{run_name}"
    return [f"{res}/figures/fig3.png", f"{res}/solutions/tiny/epoch_{epochs}.npz"]


def prepare(workdir: Path, run_name: str = "ops", epochs: int = 3, store: bool = True) -> Path:
    """Write WORKDIR/config.yaml, a synthetic 28x28 "mnist" (300 train, 100 test images) and,
    with ``store``, the MLflow store (seconds; what a Snakemake run over this tree needs)."""
    from tapmachine.io import data
    from tapmachine.pipeline.tracking import store as tracking

    workdir = Path(workdir)
    (workdir / "results" / "data").mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config(run_name, epochs)))
    rng = np.random.default_rng(0)
    protos = rng.integers(0, 256, (10, 784)).astype(np.uint8)
    labels = rng.integers(0, 10, 400)
    noise = rng.integers(-40, 41, (400, 784))
    x = np.clip(protos[labels].astype(int) + noise, 0, 255).astype(np.uint8)
    ds = data.Dataset(
        x[:300], labels[:300], x[300:], labels[300:], (28, 28), {"source": "synthetic"}, "mnist"
    )
    data.save_dataset(ds, workdir / "results" / "data" / "mnist.npz")
    # A tree whose datasets exist has its tracking store, as a run leaves it: without one, a run
    # would make it and stop before any job (workflow/rules/tracking.smk).
    if store:
        folder = workdir / "results" / "mlflow"
        tracking.init_store(folder, folder / "experiments.json", best_effort=True)
    return workdir


if __name__ == "__main__":
    prepare(Path(sys.argv[1]), *(sys.argv[2:3] or []))
    print(" ".join(targets(*(sys.argv[2:3] or []))))
