"""``benchmarks/gpu_fig10.sh`` on the CPU (``GPU_FIG10_DEVICE=cpu``): two tiny adaTAP trainings
one after the other, the first finished, the second stopped at its deadline and closed at its
last whole epoch; both with a pseudo-likelihood curve, packed in a run's layout without their
checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tapmachine.io.data import Dataset, save_dataset
from tapmachine.pipeline.configuration import SCHEMA, load_config, validate

ROOT = Path(__file__).resolve().parents[1]


def _spec(epochs: int) -> dict:
    """The default config's adaTAP-3 model of Fig. 10, as the train rule passes it, made tiny."""
    config = load_config([])
    validate(config, SCHEMA)
    base = {k: v for k, v in config["models"]["bmnist_fig10_adatap3"].items() if k != "threads"}
    small = {"epochs": epochs, "n_train": 60, "batch_size": 20, "n_solutions": 20}
    small["hidden"] = [{**base["hidden"][0], "units": 6}]
    small["eval"] = {**base["eval"], "n_samples": 40}
    return base | small


@pytest.mark.slow
def test_the_fig10_gpu_script_trains_closes_and_packs(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    rng = np.random.default_rng(0)
    x = (rng.random((100, 16)) < 0.3).astype(np.float32)
    y = rng.integers(0, 10, 100)
    ds = Dataset(x[:80], y[:80], x[80:], y[80:], (4, 4), {}, "binary_mnist")
    save_dataset(ds, specs / "binary_mnist.npz")
    (specs / "quick.json").write_text(json.dumps(_spec(2)))
    (specs / "long.json").write_text(json.dumps(_spec(100_000)))
    env = {**os.environ, "PYTHON": sys.executable, "GPU_FIG10_DEVICE": "cpu"}
    env |= {"GPU_FIG10_BENCH": "0", "GPU_FIG10_COMPARE": "0", "GPU_FIG10_END": "400"}
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_fig10.sh"), str(out), str(specs)]
        + ["quick:60", "long:50"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = (out / "jobs.tsv").read_text().splitlines()
    assert jobs[0].startswith("quick\ttrain_exit 0")
    assert jobs[1].startswith("long\ttrain_exit 124")
    last = int(jobs[2].split("\t")[1].removeprefix("closed_at_epoch "))
    assert jobs[2].startswith("long\tclosed_at_epoch") and jobs[2].endswith("exit 0") and last >= 1
    with tarfile.open(out / "fig10_gpu.tar.gz") as tar:  # a run's layout, for results/{run}/
        names = set(tar.getnames())
        for model, epochs in (("quick", 2), ("long", last)):
            for f in ("model.pt", "model.run.json", "metrics.csv"):
                assert f"./models/{model}/{f}" in names
            for f in ("curve.csv", "last_epoch.npz"):
                assert f"./deep/{model}/{f}" in names
            curve = tar.extractfile(f"./deep/{model}/curve.csv").read().decode().splitlines()
            assert len(curve) == 1 + epochs
            assert tar.getmember(f"./deep/{model}/curve.csv").mtime >= (
                tar.getmember(f"./models/{model}/model.pt").mtime
            )
        assert "./logs/long.train.log" in names
        assert not any("checkpoints" in n for n in names)
