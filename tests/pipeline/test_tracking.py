"""The MLflow store: created once, runs land in their experiments, failures never lose results."""

import json
import math
import multiprocessing as mp
import time

import pytest

from tapmachine.pipeline.tracking import environment, invocation
from tapmachine.pipeline.tracking import store as tracking

pytestmark = pytest.mark.slow  # real MLflow stores: seconds per test


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    """Each test starts as a new job would: nothing disabled, no cached experiment ids."""
    monkeypatch.setattr(tracking, "_DISABLED", {})
    monkeypatch.setattr(tracking, "_IDS", {})
    monkeypatch.setenv(environment.VARIABLE, "{}")  # restored (unset) after the test


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


def test_many_steps_are_logged_in_batches_of_a_thousand_values(store, monkeypatch):
    """A resumed job's earlier epochs (here 250 steps of 6 values, one NaN dropped each) go to
    the store in 2 writes, not 250, and every step is there once."""
    import mlflow

    manifest, info = store
    steps = {e: {"tap_ll": -1.0 / e, "a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "x": math.nan}
             for e in range(1, 251)}  # fmt: skip
    writes = []
    with tracking.start_run(manifest, "train", "resumed") as run:
        real = run._client.log_batch
        monkeypatch.setattr(
            run._client, "log_batch", lambda *a, **k: (writes.append(1), real(*a, **k))[1]
        )
        run.log_steps(steps)
    assert len(writes) == 2  # 1,250 values
    (found,) = _runs(info, "train")
    history = mlflow.MlflowClient(info["tracking_uri"]).get_metric_history(
        found.info.run_id, "tap_ll"
    )
    assert sorted(m.step for m in history) == list(range(1, 251))
    assert {m.step: m.value for m in history}[4] == pytest.approx(-0.25)
    assert "x" not in found.data.metrics


def test_failure_marks_run_failed(store):
    manifest, info = store
    with pytest.raises(RuntimeError), tracking.start_run(manifest, "train", "bad"):
        raise RuntimeError("diverged")
    (found,) = _runs(info, "train")
    assert found.info.status == "FAILED"


@pytest.mark.parametrize("where", ["dead_server", "unusable_sqlite"])
def test_tracking_failure_does_not_stop_the_work(tmp_path, capsys, monkeypatch, where):
    """A store that fails costs one short try, one log line, and nothing else."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    if where == "dead_server":
        uri = "http://127.0.0.1:9"  # the discard port: connection refused at once
    else:
        (tmp_path / "a_file").write_text("not a directory")
        uri = f"sqlite:///{tmp_path}/a_file/x.db"
    manifest = tmp_path / "experiments.json"
    manifest.write_text(json.dumps({"tracking_uri": uri, "experiments": {"train": "1"}}))
    done = []
    t0 = time.monotonic()
    for name in ("m1", "m2"):
        with tracking.start_run(manifest, "train", name) as run:
            assert not run.active
            run.log_metrics({"x": 1.0}, step=1)
            done.append(name)
    with tracking.start_run(manifest, "figures", "f") as run:
        assert not run.active
    assert time.monotonic() - t0 < 10
    assert done == ["m1", "m2"]
    err = capsys.readouterr().err
    assert err.count("tracking disabled for the rest of this job") == 1, err
    assert tracking.disabled_reason(uri)


def test_init_store_best_effort_records_the_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    manifest = tmp_path / "m.json"
    with pytest.raises(OSError):
        tracking.init_store(tmp_path / "s", manifest)
    info = tracking.init_store(tmp_path / "s", manifest, best_effort=True)
    assert info["experiments"] == {} and "init_store" in info["error"]
    assert json.loads(manifest.read_text())["tracking_uri"] == "http://127.0.0.1:9"


def test_experiment_looked_up_by_name_in_the_store_used(store, tmp_path, monkeypatch):
    """A manifest written for store A, used with MLFLOW_TRACKING_URI = store B: runs land in
    B's experiment of that name, not in whatever experiment has A's id in B."""
    import mlflow

    manifest, info = store
    other = f"sqlite:///{tmp_path}/other.db"
    client = mlflow.MlflowClient(other)
    for name in ("zzz", "figures", "train"):  # ids differ from those of store A
        client.create_experiment(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    with tracking.start_run(manifest, "train", "m") as run:
        assert run.active
    train = client.get_experiment_by_name("train").experiment_id
    assert train != info["experiments"]["train"]
    (found,) = client.search_runs([train])
    assert found.info.run_name == "m"


def test_runs_carry_provenance_tags_and_nest_under_the_invocation(store, monkeypatch):
    import mlflow

    manifest, info = store
    environment.update(run_name="tiny", config_digest="abc123", invocation=None)
    record = invocation.open_invocation(manifest.parent, manifest, "snakemake tiny")
    assert invocation.invocation_parents() == {}  # none until an experiment gets a run
    run_ids = []
    for name in ("m", "n"):
        with tracking.start_run(manifest, "train", name) as run:
            run_ids.append(run.run_id)
    parents = invocation.close_invocation(manifest, "FINISHED")
    assert set(parents) == {"train"} and not record.exists()
    client = mlflow.MlflowClient(info["tracking_uri"])
    tags = client.get_run(run_ids[0]).data.tags
    assert tags["mlflow.parentRunId"] == parents["train"]
    assert client.get_run(run_ids[1]).data.tags["mlflow.parentRunId"] == parents["train"]
    assert tags["tapmachine.run_name"] == "tiny" and tags["config_digest"] == "abc123"
    assert len(tags["mlflow.source.git.commit"]) == 40
    assert tags["mlflow.user"]
    assert client.get_run(parents["train"]).info.status == "FINISHED"
    # no parent run in the experiments this invocation did not use
    others = [info["experiments"][e] for e in tracking.EXPERIMENTS if e != "train"]
    assert client.search_runs(others) == []


def test_sigterm_marks_the_run_killed(store):
    import os
    import signal

    manifest, info = store
    with pytest.raises(SystemExit) as exc, tracking.start_run(manifest, "train", "t"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert exc.value.code == 143
    (found,) = _runs(info, "train")
    assert found.info.status == "KILLED"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_job_that_kept_its_state_on_a_signal_is_marked_killed(store):
    import signal

    from tapmachine.core.errors import StoppedBySignal

    manifest, info = store
    with pytest.raises(StoppedBySignal), tracking.start_run(manifest, "train", "t"):
        raise StoppedBySignal(signal.SIGTERM, "state kept")
    (found,) = _runs(info, "train")
    assert found.info.status == "KILLED"


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


def test_trained_machine_logged_as_mlflow_model_with_dataset(store, tmp_path):
    """The pyfunc model predicts the clamped hidden means, sigmoid(x W + b) for a Bernoulli RBM."""
    import mlflow
    import numpy as np
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io.modelfile import machine_state
    from tapmachine.train import build_machine

    manifest, info = store
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 3}]}
    x = torch.tensor(np.random.default_rng(0).integers(0, 2, (20, 6)), dtype=torch.float64)
    machine = build_machine(spec, x, 0.5, seeded_generator(0, "m"))
    model_file = tmp_path / "model.pt"
    torch.save({"machine": machine_state(machine)}, model_file)
    with tracking.start_run(manifest, "train", "m") as run:
        uri = run.log_machine(model_file, x[:4].numpy(), tmp_path / "data.npz", "toy")
    assert uri is not None
    (found,) = _runs(info, "train")
    assert found.info.status == "FINISHED"
    mlflow.set_tracking_uri(info["tracking_uri"])
    loaded = mlflow.pyfunc.load_model(uri)
    got = loaded.predict(x[:5].numpy().astype(np.float32))
    field = x[:5] @ machine.W
    expected = machine.hidden.moments(field, torch.zeros_like(field))[0]
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert tuple(loaded.metadata.signature.inputs.to_dict()[0]["tensor-spec"]["shape"]) == (-1, 6)
    client = mlflow.MlflowClient(info["tracking_uri"])
    inputs = client.get_run(found.info.run_id).inputs.dataset_inputs
    assert [d.dataset.name for d in inputs] == ["toy"]
