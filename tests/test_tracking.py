"""The MLflow store: created once, runs land in their experiments, failures never lose results."""

import json
import multiprocessing as mp

import pytest

from tapmachine import tracking


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    manifest = tmp_path / "mlflow" / "experiments.json"
    info = tracking.init_store(tmp_path / "mlflow", manifest)
    return manifest, info


def _runs(info, name):
    import mlflow

    client = mlflow.MlflowClient(info["tracking_uri"])
    return client.search_runs([info["experiments"][name]])


def test_init_creates_sqlite_store_and_every_experiment(store, tmp_path):
    manifest, info = store
    assert info["tracking_uri"].startswith("sqlite:///")
    assert (tmp_path / "mlflow" / "mlflow.db").exists()
    assert set(json.loads(manifest.read_text())["experiments"]) == set(tracking.EXPERIMENTS)
    again = tracking.init_store(tmp_path / "mlflow", manifest)
    assert again["experiments"] == info["experiments"]


def test_run_logs_params_metrics_artifacts(store, tmp_path):
    manifest, info = store
    artifact = tmp_path / "numbers.csv"
    artifact.write_text("a,b\n1,2\n")
    with tracking.start_run(
        manifest, "train", "m1", params={"lr": 0.1, "tap": {"tol": 1e-8}}
    ) as run:
        for step in range(1, 4):
            run.log_metrics({"tap_ll": -0.1 * step, "nan_is_dropped": float("nan")}, step=step)
        run.log_artifact(artifact)
    (found,) = _runs(info, "train")
    assert found.info.status == "FINISHED"
    assert found.data.params["tap.tol"] == "1e-08"
    assert found.data.metrics["tap_ll"] == pytest.approx(-0.3)
    assert "nan_is_dropped" not in found.data.metrics
    import mlflow

    history = mlflow.MlflowClient(info["tracking_uri"]).get_metric_history(
        found.info.run_id, "tap_ll"
    )
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert (tmp_path / "mlflow" / "artifacts" / "train").exists()


def test_failure_marks_run_failed(store):
    manifest, info = store
    with pytest.raises(RuntimeError), tracking.start_run(manifest, "train", "bad"):
        raise RuntimeError("diverged")
    (found,) = _runs(info, "train")
    assert found.info.status == "FAILED"


def test_tracking_failure_does_not_stop_the_work(tmp_path, capsys):
    manifest = tmp_path / "experiments.json"
    manifest.write_text(
        json.dumps(
            {"tracking_uri": "sqlite:////nonexistent/dir/x.db", "experiments": {"train": "1"}}
        )
    )
    done = []
    with tracking.start_run(manifest, "train", "m") as run:
        run.log_metrics({"x": 1.0}, step=1)
        done.append(True)
    assert done == [True]
    assert "tapmachine.tracking" in capsys.readouterr().err


def test_no_manifest_means_no_tracking():
    with tracking.start_run(None, "train", "m") as run:
        assert not run.active
        run.log_metrics({"x": 1.0})


def _log_runs(manifest, worker):
    for i in range(3):
        with tracking.start_run(manifest, "harvest", f"w{worker}-{i}") as run:
            run.log_metrics({"v": float(i)}, step=i)


def test_parallel_writers_lose_nothing(store):
    manifest, info = store
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_log_runs, args=(manifest, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert len(_runs(info, "harvest")) == 12
    assert len(_runs(info, "data")) == 0
