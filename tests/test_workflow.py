"""The real Snakemake engine on a tiny config: data -> training -> harvest, likelihoods ->
every figure, tracked in MLflow."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tapmachine.tracking import STAGE_RUNS

ROOT = Path(__file__).resolve().parents[1]
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]

pytestmark = pytest.mark.workflow

TINY = {
    "seed": 7,
    "data": {
        "derived": {
            "binary_mnist": {
                "source": "mnist",
                "transforms": [{"name": "threshold", "level": 0.5}],
            },
            "real_faces": {"source": "faces", "labels": [1], "transforms": ["scale"]},
            "fashion_mnist_8bit_spin": {"source": "fashion_mnist", "transforms": ["bits8", "spin"]},
        }
    },
    "models": {
        "tiny": {
            "dataset": "binary_mnist",
            "visible": {"prior": "bernoulli"},
            "hidden": [{"prior": "bernoulli", "units": 8}],
            "n_train": 400,
            "epochs": 2,
            "batch_size": 50,
            "eval": {"n_samples": 100},
        }
    },
    "harvest": {"tiny": {"epochs": [1, 2], "n_init": 60}},
    "figures": {
        "fig3": {"models": ["tiny"]},
        "fig4": {"models": ["tiny"], "n_images": 100},
        "fig5": {"model": "tiny"},
        "fig6": {"model": "tiny", "epochs": [1, 2]},
        "fig7": {"model": "tiny", "epochs": [1, 2], "digits": [3, 6, 7], "n_images": 60},
    },
    "likelihood": {
        "fig12": {
            "model": "tiny",
            "epochs": "all",
            "ais": {"n_runs": 8, "schedule": "linear", "n_betas": 30},
            "pl_sites": 10,
            "n_train": 40,
            "n_test": 40,
            "tap_inits": 20,
        },
        "table": {
            "models": ["tiny"],
            "ais": {"n_runs": 8, "schedule": "linear", "n_betas": 30},
            "pl_sites": 10,
            "n_train": 0,
            "n_test": 40,
            "tap_inits": 20,
        },
    },
}
FIGURES = ["fig3", "fig4", "fig5", "fig6", "fig7", "fig12", "likelihood_table"]


def snakemake(workdir, *args, config="config.yaml", timeout=900):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / config),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    (workdir / "config.yaml").write_text(yaml.safe_dump(TINY))
    result = snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return workdir


def test_data_stage_writes_verified_datasets(finished_run):
    from tapmachine.data import load_dataset

    data = finished_run / "results" / "data"
    mnist = load_dataset(data / "mnist.npz")
    assert mnist.x_train.shape == (60000, 784) and mnist.x_test.shape == (10000, 784)
    assert np.bincount(mnist.y_train, minlength=10).tolist() == MNIST_TRAIN_COUNTS
    assert abs(mnist.x_train.mean() / 255 - 0.1307) < 5e-4
    binary = load_dataset(data / "binary_mnist.npz")
    np.testing.assert_array_equal(binary.x_train, (mnist.x_train / 255.0 > 0.5).astype(np.uint8))
    fashion = load_dataset(data / "fashion_mnist_8bit_spin.npz")
    assert fashion.x_train.shape == (60000, 6272)
    assert set(np.unique(fashion.x_train[:100]).tolist()) <= {-1, 1}
    faces = load_dataset(data / "real_faces.npz")
    assert "substitute" in faces.provenance
    assert not list(data.glob("*.tmp*"))


def test_training_outputs_and_tracking(finished_run):
    import mlflow
    import pandas as pd

    model_dir = finished_run / "results" / "default" / "models" / "tiny"
    metrics = pd.read_csv(model_dir / "metrics.csv")
    assert metrics["epoch"].tolist() == [1, 2]
    assert np.isfinite(metrics["tap_ll"]).all()
    assert sorted(p.name for p in (model_dir / "checkpoints").glob("epoch_*.pt")) == [
        "epoch_1.pt",
        "epoch_2.pt",
    ]
    client = mlflow.MlflowClient(f"sqlite:///{finished_run}/results/mlflow/mlflow.db")
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    data_runs = client.search_runs([experiments["data"]], STAGE_RUNS)
    assert sorted(r.info.run_name for r in data_runs) == sorted(
        ["mnist", "fashion_mnist", "faces", *TINY["data"]["derived"]]
    )
    assert all(r.info.status == "FINISHED" for r in data_runs)
    mnist_run = next(r for r in data_runs if r.info.run_name == "mnist")
    assert "montage" in str([a.path for a in client.list_artifacts(mnist_run.info.run_id)])
    (train_run,) = client.search_runs([experiments["train"]], STAGE_RUNS)
    history = client.get_metric_history(train_run.info.run_id, "tap_ll")
    assert sorted(m.step for m in history) == [1, 2]
    assert (
        len(client.search_runs([experiments["Default"] if "Default" in experiments else "0"])) == 0
    )


def test_harvest_and_every_figure(finished_run):
    import mlflow
    import pandas as pd

    results = finished_run / "results" / "default"
    for epoch in (1, 2):
        with np.load(results / "solutions" / "tiny" / f"epoch_{epoch}.npz") as npz:
            assert npz["converged"].shape == (60,)
    for fig in FIGURES:
        for ext in ("png", "pdf", "csv"):
            assert (results / "figures" / f"{fig}.{ext}").stat().st_size > 0, (fig, ext)
        table = pd.read_csv(results / "figures" / f"{fig}.csv")
        assert (table["kind"] == "claim").any(), fig
    client = mlflow.MlflowClient(f"sqlite:///{finished_run}/results/mlflow/mlflow.db")
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    figure_runs = client.search_runs([experiments["figures"]], STAGE_RUNS)
    assert sorted(r.info.run_name for r in figure_runs) == sorted(FIGURES)
    assert all(r.info.status == "FINISHED" for r in figure_runs)
    assert len(client.search_runs([experiments["harvest"]], STAGE_RUNS)) == 2
    (train_run,) = client.search_runs([experiments["train"]], STAGE_RUNS)
    steps = client.get_metric_history(train_run.info.run_id, "harvest_n_unique")
    assert sorted(m.step for m in steps) == [1, 2]


def test_rerun_is_a_no_op(finished_run):
    result = snakemake(finished_run, "--cores", "2", "-n")
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr


def test_recreating_the_tracking_store_reruns_nothing(finished_run):
    """The store's manifest is an ancient() input made before the DAG: a new store (deleted,
    re-created, or benchmarks/run.py rewriting the manifest) leaves every result up to date."""
    store = finished_run / "results" / "mlflow"
    store.rename(finished_run / "results" / "mlflow.moved")
    try:
        result = snakemake(finished_run, "--cores", "2", "-n")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Nothing to be done" in result.stdout + result.stderr
        assert (store / "experiments.json").exists()  # made afresh, at parse time
    finally:
        shutil.rmtree(store, ignore_errors=True)
        (finished_run / "results" / "mlflow.moved").rename(store)


def test_bad_config_fails_before_any_job(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["models"]["tiny"]["hidden"][0]["units"] = -1
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "1")
    assert result.returncode != 0
    assert "models.tiny.hidden[0].units: -1 is less than the minimum of 1" in result.stderr
    assert not (tmp_path / "results").exists()


def test_lint_is_clean():
    env = dict(os.environ)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--lint",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout + result.stderr, result.stdout + result.stderr
