"""A real single-node SLURM (Debian's slurm-wlm + munge on localhost) runs a tiny DAG through
workflow/profiles/slurm; the MLflow runs made inside the SLURM jobs land in their experiments,
tagged and nested under the invocation's parent runs (environment passed through sbatch)."""

import sys
from pathlib import Path

import pytest
from services import require_root_and, run_bounded

from tapmachine.pipeline.tracking.store import EXPERIMENTS, STAGE_RUNS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.workflow


def test_tiny_dag_through_slurm(tmp_path):
    require_root_and("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged")
    pytest.importorskip("snakemake_executor_plugin_slurm")
    result = run_bounded(
        ["bash", str(ROOT / "tests" / "slurm_cluster.sh"), str(tmp_path)],
        timeout=480,
        env={**__import__("os").environ, "PYTHON": sys.executable},
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-6000:]
    assert "OK: tiny DAG finished through SLURM" in result.stdout
    # derive, train, harvest, fig3: each one a SLURM batch job that completed
    assert int((tmp_path / "slurm_jobs_done").read_text()) == 4
    log = (tmp_path / "snakemake.log").read_text()
    assert log.count("has been submitted with SLURM jobid") == 4

    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/results/mlflow/mlflow.db")
    exps = {e.name: e.experiment_id for e in client.search_experiments()}
    counts = {n: len(client.search_runs([exps[n]], STAGE_RUNS)) for n in exps if n != "Default"}
    # every experiment tracking_init makes, and the stage runs of the tiny DAG in its own
    assert counts == {
        **{name: 0 for name in EXPERIMENTS},
        "data": 1,
        "train": 1,
        "harvest": 1,
        "figures": 1,
    }, counts
    (train,) = client.search_runs([exps["train"]], STAGE_RUNS)
    assert train.info.status == "FINISHED"
    assert train.data.tags["tapmachine.run_name"] == "slurm"
    parent = client.get_run(train.data.tags["mlflow.parentRunId"])
    assert parent.data.tags["tapmachine.kind"] == "invocation"
    assert parent.info.status == "FINISHED"
    history = client.get_metric_history(train.info.run_id, "tap_ll")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert (tmp_path / "results" / "slurm" / "figures" / "fig3.png").stat().st_size > 1000
