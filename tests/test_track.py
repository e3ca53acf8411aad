"""`tapmachine track`: the files of results/ replayed into a store, idempotently."""

import json

import numpy as np
import pandas as pd
import pytest

from tapmachine import cli, tracking


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    monkeypatch.setattr(tracking, "_DISABLED", {})
    monkeypatch.setattr(tracking, "_IDS", {})
    monkeypatch.setenv(tracking.ENV_PARENT_RUNS, "")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def results(tmp_path):
    """A results/{name} tree as the workflow writes it, small."""
    res = tmp_path / "results" / "tiny"
    (res / "models" / "m").mkdir(parents=True)
    pd.DataFrame({"epoch": [1, 2, 3], "tap_ll": [-0.5, -0.4, -0.3], "seconds": [1.0] * 3}).to_csv(
        res / "models" / "m" / "metrics.csv", index=False
    )
    (res / "solutions" / "m").mkdir(parents=True)
    pd.DataFrame({"free_energy": [1.0, 2.0]}).to_csv(res / "solutions" / "m" / "epoch_2.csv")
    (res / "figures").mkdir()
    pd.DataFrame(
        {
            "kind": ["claim", "claim", "point"],
            "claim": ["ll_rises", "ll_rises", ""],
            "model": ["m", "m", "m"],
            "epoch": [1, 3, 2],
            "value": [0.1, 0.2, 9.0],
        }
    ).to_csv(res / "figures" / "fig3.csv", index=False)
    (res / "figures" / "fig3.png").write_bytes(b"\x89PNG fake")
    data = tmp_path / "results" / "data"
    data.mkdir()
    np.savez(data / "toy.npz", x_train=np.zeros((7, 4)), x_test=np.zeros((3, 4)))
    return res


def test_replay_is_complete_and_idempotent(results, capsys):
    import mlflow

    store = results.parent / "mlflow"
    args = ["track", "--results", str(results), "--store", str(store)]
    args += ["--data", str(results.parent / "data")]
    assert cli.main(args) == 0
    assert "4 runs replayed, 0 already in the store" in capsys.readouterr().out
    assert cli.main(args) == 0
    assert "0 runs replayed, 4 already in the store" in capsys.readouterr().out
    info = json.loads((store / "experiments.json").read_text())
    client = mlflow.MlflowClient(info["tracking_uri"])
    counts = {e: len(client.search_runs([i])) for e, i in info["experiments"].items()}
    # every experiment of the store exists; only the replayed stages have runs
    assert counts == {
        **{name: 0 for name in tracking.EXPERIMENTS},
        "data": 1,
        "train": 1,
        "harvest": 1,
        "figures": 1,
    }
    (train,) = client.search_runs([info["experiments"]["train"]])
    assert train.data.tags["tapmachine.run_name"] == "tiny"
    assert train.data.tags["tapmachine.replayed"] == "true"
    history = client.get_metric_history(train.info.run_id, "tap_ll")
    assert sorted((m.step, m.value) for m in history) == [(1, -0.5), (2, -0.4), (3, -0.3)]
    (fig,) = client.search_runs([info["experiments"]["figures"]])
    claim = client.get_metric_history(fig.info.run_id, "ll_rises.m")
    assert sorted((m.step, m.value) for m in claim) == [(1, 0.1), (3, 0.2)]
    assert {a.path for a in client.list_artifacts(fig.info.run_id)} == {"fig3.csv", "fig3.png"}
    (toy,) = client.search_runs([info["experiments"]["data"]])
    assert toy.data.metrics == {"n_train": 7.0, "n_test": 3.0}


def test_live_run_counts_as_present(results, monkeypatch, capsys):
    store = results.parent / "mlflow"
    manifest = store / "experiments.json"
    tracking.init_store(store, manifest)
    monkeypatch.setenv(tracking.ENV_RUN_NAME, "tiny")
    with tracking.start_run(manifest, "train", "m"):
        pass
    args = ["track", "--results", str(results), "--store", str(store), "--data", ""]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "present  train/m" in out and "2 runs replayed, 1 already" in out


def test_dead_store_is_an_error(results, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    args = ["track", "--results", str(results), "--store", str(results.parent / "s")]
    assert cli.main(args) == 2
    assert "tapmachine: error: tracking store http://127.0.0.1:9" in capsys.readouterr().err
