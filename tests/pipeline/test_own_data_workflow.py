"""docs/own_data.md's example at tiny size, through the real Snakemake engine with the default
config and the documented overlay only: a CSV of binary digits written by the example's script
is read, checksummed, trained on and its TAP solutions harvested, tracked in MLflow with the
file's sha256; a value outside the visible units' support stops the training job with the file,
row and column named and no model written."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from tapmachine.io import data

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "docs" / "examples" / "own_digits.yaml"

pytestmark = pytest.mark.workflow


def _stage_runs(experiment: str, name: str) -> list:
    stage = f"attributes.run_name = '{name}' and tags.`tapmachine.kind` = 'stage'"
    return mlflow.search_runs(
        experiment_names=[experiment], filter_string=stage, output_format="list"
    )


def _snakemake(workdir: Path, *targets: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    cmd = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(workdir), "--cores", "2", "--configfile", str(workdir / "own.yaml")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture
def workdir(tmp_path):
    """The checkout's default config, the example's overlay at tiny size, 300 digits."""
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    overlay = yaml.safe_load(OVERLAY.read_text())
    overlay["models"]["digits_h32"].update(epochs=3, eval={"n_samples": 50})
    overlay["harvest"]["digits_h32"].update(epochs=[1, 3], n_init=50)
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(overlay))
    script = ROOT / "docs" / "examples" / "digits_csv.py"
    write = [sys.executable, str(script), "data/digits.csv", "--rows", "300"]
    out = subprocess.run(write, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return tmp_path


def test_the_example_harvests_tap_solutions_of_a_users_csv(workdir):
    targets = [f"results/digits/solutions/digits_h32/epoch_{e}.npz" for e in (1, 3)]
    result = _snakemake(workdir, *targets)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    csv = workdir / "data" / "digits.csv"
    sha256 = hashlib.sha256(csv.read_bytes()).hexdigest()
    ds = data.load_dataset(workdir / "results" / "data" / "digits.npz")
    assert ds.provenance["sha256"] == sha256 and ds.provenance["source"] == "file"
    assert (len(ds.x_train), len(ds.x_test)) == (240, 60) and ds.image_shape == (8, 8)
    table = pd.read_csv(csv)
    assert sorted(np.unique(ds.y_train)) == sorted(np.unique(table["digit"]))
    for e in (1, 3):
        solutions = pd.read_csv(workdir / f"results/digits/solutions/digits_h32/epoch_{e}.csv")
        assert len(solutions) >= 1 and solutions["multiplicity"].sum() >= 1
    mlflow.set_tracking_uri(f"sqlite:///{workdir}/results/mlflow/mlflow.db")
    (data_run,) = _stage_runs("data", "digits")
    assert data_run.data.params["provenance.sha256"] == sha256
    (train_run,) = _stage_runs("train", "digits_h32")
    (ds_input,) = train_run.inputs.dataset_inputs
    tags = {t.key: t.value for t in ds_input.tags}
    assert tags["sha256"] == sha256 and tags["file"] == str(csv.resolve())


def test_a_value_outside_the_support_stops_training_naming_file_row_and_column(workdir):
    csv = workdir / "data" / "digits.csv"
    table = pd.read_csv(csv)
    table.loc[7, "p5"] = 2
    table.to_csv(csv, index=False)
    result = _snakemake(workdir, "results/digits/models/digits_h32/model.pt")
    assert result.returncode != 0
    log = (workdir / "logs/digits/train/digits_h32.log").read_text()
    where = f"{csv.resolve()}: row 7, column 5 (dataset results/data/digits.npz)"
    assert f"{where}: 2 is outside {{0, 1}}" in log
    assert "Traceback" not in log
    assert not (workdir / "results/digits/models/digits_h32").exists()
