"""Run records: logged live by the recorder, kept beside the outputs, replayed by `tapmachine
track` into another store as the same runs, idempotently."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from mlflow_runs import dump

from tapmachine.pipeline import cli
from tapmachine.pipeline.stages.track import ordered
from tapmachine.pipeline.tracking import environment
from tapmachine.pipeline.tracking import store as tracking
from tapmachine.pipeline.tracking.recorder import publish, recording
from tapmachine.pipeline.tracking.records import (
    RunRecord,
    Series,
    find_records,
    flat_params,
    read_record,
    record_path,
    source_run,
)

pytestmark = pytest.mark.slow  # real MLflow stores: seconds per test


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    monkeypatch.setattr(tracking, "_DISABLED", {})
    monkeypatch.setattr(tracking, "_IDS", {})
    monkeypatch.setenv(environment.VARIABLE, "{}")  # restored after the test
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _store(store):
    import mlflow

    info = json.loads((store / "experiments.json").read_text())
    return mlflow.MlflowClient(info["tracking_uri"]), info["experiments"]


def _dump(store) -> dict:
    return dump(json.loads((store / "experiments.json").read_text())["tracking_uri"])


def _live_store(tmp_path, monkeypatch):
    store = tmp_path / "live"
    manifest = store / "experiments.json"
    tracking.init_store(store, manifest)
    environment.update(run_name="tiny", config_digest="abc123")
    return store, manifest


def _stages(results, manifest) -> None:
    """Four jobs as the stages record them: a training run (live epochs, a series file, a
    pretraining metric kept in the record, an artifact), a harvest of it (linked, logged at the
    end), a figure of the harvest (a link group), a benchmark with no links."""
    model = results / "models" / "m"
    model.mkdir(parents=True)
    metrics_csv = model / "metrics.csv"
    train = RunRecord("train", "m", series=[Series(str(metrics_csv))], artifacts=[metrics_csv])
    with recording(manifest, train, model / "model.pt") as run:
        run.start({"model": "m", "spec": {"lr": 0.1, "hidden": [3]}}, {"model": "m"})
        rows = []
        for epoch in (1, 2, 3):
            row = {"epoch": epoch, "tap_ll": -1.0 / epoch, "note": "x", "gap": np.nan}
            rows.append(row)
            run.log({k: v for k, v in row.items() if k in ("tap_ll", "gap")}, epoch, keep=False)
        run.log({"pretrain_l1.loss": 0.5}, step=1)
        pd.DataFrame(rows).to_csv(metrics_csv, index=False)
        (model / "model.pt").write_bytes(b"weights")
    solutions = results / "solutions" / "m"
    solutions.mkdir(parents=True)
    npz = solutions / "epoch_2.npz"
    np.savez(npz, x=np.zeros(2))
    harvest = RunRecord(
        "harvest",
        "m/epoch_2",
        {"model": "m", "epoch": 2},
        {"model": "m", "epoch": "2", "model_run_id": "an id the library gave"},
        links={"model_run_id": source_run(model / "model.pt")},
        artifacts=[npz],
    )
    harvest.add_metrics({"n_unique": 4, "seconds": 0.5}, step=2)
    publish(manifest, harvest, npz)
    figures = results / "figures"
    figures.mkdir()
    csv = figures / "fig5.csv"
    pd.DataFrame({"kind": ["claim"], "value": [1.0]}).to_csv(csv, index=False)
    harvest_run = source_run(npz)
    fig = RunRecord(
        "figures",
        "fig5",
        {"models": ["m"], "epochs": [2, 3]},
        {"figure": "fig5"},
        links={"train_run.m": read_record(record_path(npz)).links["model_run_id"]},
        link_groups={"harvest_runs.m": {"2": harvest_run, "3": ("harvest", "m/epoch_3")}},
        artifacts=[csv],
    )
    fig.add_metrics({"ll_rises.m": 0.2}, step=3)
    fig.add_metrics({"count": 7})
    publish(manifest, fig, csv)
    timing = results / "deep" / "fig10_timing.csv"
    timing.parent.mkdir()
    timing.write_text("batch_size,tap_seconds\n10,0.1\n")
    bench = RunRecord("benchmarks", "fig10/timing", {"repeats": 3}, artifacts=[timing])
    bench.add_metrics({"tap_seconds": 0.1}, step=10)
    publish(manifest, bench, timing)


def _track(results, store, capsys, data="") -> str:
    capsys.readouterr()
    assert (
        cli.main(["track", "--results", str(results), "--store", str(store), "--data", data]) == 0
    )
    return capsys.readouterr().out


def test_a_record_round_trips_and_moves_with_its_folder(tmp_path, monkeypatch):
    """Paths in a record are relative to its folder: a copied results folder reads back whole."""
    out = tmp_path / "a" / "run" / "scores.csv"
    out.parent.mkdir(parents=True)
    data = tmp_path / "a" / "data.npz"
    record = RunRecord(
        "likelihood",
        "m-epochs",
        {"ais": {"n_runs": 5}, "epochs": [1, 2]},
        {"model": "m"},
        links={"model_run_id": ("train", "m", "id0")},
        link_groups={"g": {"1": ("harvest", "m/epoch_1", None)}},
        series=[Series(str(out), "epoch", ["model"])],
        artifacts=[out, (out.parent / "e.png", "epochs")],
        machine=(out.parent / "model.pt", data, 10),
        run_id="id1",
    )
    record.add_metrics({"ll": -2, "x": np.float32(0.5)}, step=1)
    record.add_metrics({"total": 3.0})
    assert publish(None, record, out) is None  # no store: the record only
    assert record_path(out) == out.parent / "scores.run.json"
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    back = read_record(tmp_path / "b" / "run" / "scores.run.json")
    moved = tmp_path / "b" / "run"
    assert (
        back.params
        == flat_params(record.params)
        == {
            "ais.n_runs": "5",
            "epochs": "[1, 2]",
        }
    )
    assert (back.experiment, back.name, back.tags) == ("likelihood", "m-epochs", {"model": "m"})
    assert back.links == {"model_run_id": ("train", "m", "id0")}
    assert back.link_groups == {"g": {"1": ("harvest", "m/epoch_1", None)}}
    assert back.metrics == {1: {"ll": -2.0, "x": 0.5}, None: {"total": 3.0}}
    assert back.series == [Series(str(moved / "scores.csv"), "epoch", ["model"])]
    assert back.artifacts == [(moved / "scores.csv", None), (moved / "e.png", "epochs")]
    assert back.machine == (moved / "model.pt", tmp_path / "b" / "data.npz", 10)
    assert back.run_id is None  # published without a store: no live run
    assert back.output == moved / "scores.csv"
    assert source_run(moved / "scores.csv") == ("likelihood", "m-epochs", None)
    assert source_run(moved / "other.csv") is None
    assert find_records(tmp_path / "b", tmp_path / "a") == [
        tmp_path / "b" / "run" / "scores.run.json",
        tmp_path / "a" / "run" / "scores.run.json",
    ]
    monkeypatch.chdir(tmp_path / "a")
    assert find_records("", None) == []  # `--data ''`: no folder, not the working directory


def test_replay_gives_the_live_runs_and_adds_nothing_twice(tmp_path, monkeypatch, capsys):
    """Jobs recorded live, then replayed from their records alone into a fresh store: the same
    runs (params, tags with every link naming the same run, metrics by step from the records and
    their series files, artifacts); a second replay adds nothing."""
    live, manifest = _live_store(tmp_path, monkeypatch)
    results = tmp_path / "results" / "tiny"
    _stages(results, manifest)
    want = _dump(live)
    assert set(want) == {
        ("train", "m"),
        ("harvest", "m/epoch_2"),
        ("figures", "fig5"),
        ("benchmarks", "fig10/timing"),
    }
    params, tags, metrics, arts, status = want["train", "m"]
    assert params == {"model": "m", "spec.lr": "0.1", "spec.hidden": "[3]"} and status == "FINISHED"
    assert metrics == {
        "tap_ll": [(1, -1.0), (2, -0.5), (3, round(-1 / 3, 9))],
        "pretrain_l1.loss": [(1, 0.5)],
    }
    assert arts == ["metrics.csv"] and tags["config_digest"] == "abc123"
    assert want["harvest", "m/epoch_2"][1]["model_run_id"] == ("train", "m")
    fig_tags = want["figures", "fig5"][1]
    assert fig_tags["train_run.m"] == ("train", "m")
    assert fig_tags["harvest_runs.m"] == {"2": ("harvest", "m/epoch_2"), "3": ""}
    assert want["figures", "fig5"][2] == {"ll_rises.m": [(3, 0.2)], "count": [(0, 7.0)]}

    environment.update(config_digest=None)
    store = tmp_path / "replayed"
    out = _track(results, store, capsys)
    assert "4 runs replayed, 0 already in the store" in out
    assert out.index("replayed train/m") < out.index("replayed harvest/m/epoch_2")
    assert out.index("replayed harvest/m/epoch_2") < out.index("replayed figures/fig5")
    assert _dump(store) == want
    assert "0 runs replayed, 4 already in the store (" in _track(results, store, capsys)
    (results / "deep" / "fig10_timing.csv").unlink()  # say, removed by a failed rerun
    out = _track(results, tmp_path / "other", capsys)
    assert "skipped  benchmarks/fig10/timing: its output" in out
    assert "3 runs replayed, 0 already in the store, 1 skipped (" in out


def test_a_store_that_is_down_fails_no_job_and_the_record_replays(tmp_path, monkeypatch, capsys):
    """With the store down the jobs finish and write their records (no live run id); the replay
    then gives every run, linked, and the live store that comes back counts them as present."""
    store = tmp_path / "down"
    manifest = store / "experiments.json"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    tracking.init_store(store, manifest, best_effort=True)
    results = tmp_path / "results" / "tiny"
    _stages(results, manifest)
    assert "tracking disabled" in capsys.readouterr().err
    assert read_record(results / "models" / "m" / "model.run.json").run_id is None
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    fresh = tmp_path / "fresh"
    assert "4 runs replayed" in _track(results, fresh, capsys)
    got = _dump(fresh)
    assert got["harvest", "m/epoch_2"][1]["model_run_id"] == ("train", "m")
    assert got["train", "m"][2]["tap_ll"] == [(1, -1.0), (2, -0.5), (3, round(-1 / 3, 9))]


def test_dead_store_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    (tmp_path / "tiny").mkdir()
    args = ["track", "--results", str(tmp_path / "tiny"), "--store", str(tmp_path / "s")]
    assert cli.main(args) == 2
    assert "tapmachine: error: tracking store http://127.0.0.1:9" in capsys.readouterr().err


def test_wrong_and_missing_links_of_present_runs_are_fixed_and_their_target_only_read(
    tmp_path, monkeypatch, capsys
):
    """A present run whose model_run_id names no training run of that name and config run in
    this store gets the store's one ("corrected"), one without it gets it ("retagged"); a
    link naming another FINISHED run of that name stays; a figure's missing link stays missing.
    The training run itself is only read. Deleted and replayed anew, the training run is what
    every link then names."""
    live, manifest = _live_store(tmp_path, monkeypatch)
    results = tmp_path / "results" / "tiny"
    _stages(results, manifest)
    client, exps = _store(live)
    (train,) = client.search_runs([exps["train"]], tracking.STAGE_RUNS)
    (harvest,) = client.search_runs([exps["harvest"]], tracking.STAGE_RUNS)
    (fig,) = client.search_runs([exps["figures"]], tracking.STAGE_RUNS)
    (bench,) = client.search_runs([exps["benchmarks"]], tracking.STAGE_RUNS)
    client.set_tag(harvest.info.run_id, "model_run_id", bench.info.run_id)
    client.delete_tag(fig.info.run_id, "train_run.m")
    before = client.get_run(train.info.run_id).data
    out = _track(results, live, capsys)
    assert "0 runs replayed, 4 already in the store, 1 corrected (" in out, out
    assert client.get_run(harvest.info.run_id).data.tags["model_run_id"] == train.info.run_id
    assert "train_run.m" not in client.get_run(fig.info.run_id).data.tags
    after = client.get_run(train.info.run_id).data
    assert (after.params, after.metrics, after.tags) == (before.params, before.metrics, before.tags)

    client.delete_tag(harvest.info.run_id, "model_run_id")
    assert "1 retagged" in _track(results, live, capsys)
    with tracking.start_run(manifest, "train", "m") as again:  # a second FINISHED training run
        pass
    client.set_tag(harvest.info.run_id, "model_run_id", again.run_id)
    assert "corrected" not in _track(results, live, capsys)

    client.delete_run(train.info.run_id)
    client.delete_run(again.run_id)
    out = _track(results, live, capsys)
    assert "1 runs replayed, 3 already in the store, 1 corrected (" in out, out
    (new,) = client.search_runs([exps["train"]], tracking.STAGE_RUNS)
    assert client.get_run(harvest.info.run_id).data.tags["model_run_id"] == new.info.run_id


def test_a_link_names_the_run_its_target_record_names(tmp_path, monkeypatch):
    """Of two FINISHED runs of a name, a link resolves to the one the target's record names
    (the live run that wrote the file), not to the newer one."""
    live, manifest = _live_store(tmp_path, monkeypatch)
    model = tmp_path / "model.pt"
    model.write_bytes(b"w")
    first = publish(manifest, RunRecord("train", "m"), model)
    with tracking.start_run(manifest, "train", "m"):
        pass
    out = tmp_path / "h.npz"
    out.write_bytes(b"h")
    publish(manifest, RunRecord("harvest", "h", links={"model_run_id": source_run(model)}), out)
    client, exps = _store(live)
    (h,) = client.search_runs([exps["harvest"]], tracking.STAGE_RUNS)
    assert h.data.tags["model_run_id"] == first


def test_records_come_after_the_records_they_link_to():
    a = RunRecord("figures", "f", links={"x": ("harvest", "h", None)})
    b = RunRecord("harvest", "h", links={"model_run_id": ("train", "m")})
    c = RunRecord("train", "m")
    d = RunRecord("figures", "g", link_groups={"y": {"1": ("train", "gone")}})
    assert [(r.experiment, r.name) for r in ordered([a, b, d, c])] == [
        ("train", "m"),
        ("harvest", "h"),
        ("figures", "f"),
        ("figures", "g"),
    ]


def test_a_failed_job_leaves_a_failed_run_and_no_record(tmp_path, monkeypatch):
    live, manifest = _live_store(tmp_path, monkeypatch)
    out = tmp_path / "scores.csv"
    with pytest.raises(RuntimeError), recording(manifest, RunRecord("likelihood", "s"), out) as r:
        r.start({"model": "m"})
        r.log({"ll": -1.0}, step=1)
        raise RuntimeError("scoring failed")
    assert not record_path(out).exists()
    assert _dump(live)["likelihood", "s"][2:] == ({"ll": [(1, -1.0)]}, [], "FAILED")


def test_figure_links_from_the_records_of_its_inputs():
    """A figure names the training run of each model drawn (a training record itself, or the
    run a derived record links as ``model_run_id``), its harvests by epoch and its denoise runs
    by folder; records of models not drawn and of datasets give no link."""
    from pathlib import Path

    from tapmachine.pipeline.stages.figures import figure_links

    train = ("train", "m", "t1")
    sources = [
        (Path("models/m/model.pt"), RunRecord("train", "m", tags={"model": "m"}, run_id="t1")),
        (Path("solutions/m/epoch_2.npz"), _derived("harvest", "m/epoch_2", train, epoch="2")),
        (
            Path("ucd/dbm/bm/u/model.pt"),
            RunRecord("ucd", "t_u", tags={"model": "u", "dataset": "bm"}),
        ),
        (Path("denoise/m/denoise_bsc.npz"), _derived("denoise", "m-bsc", train)),
        (Path("denoise/baselines/bsc.npz"), RunRecord("denoise", "baselines-bsc")),
        (Path("data/bm.npz"), RunRecord("data", "bm", tags={"dataset": "bm"})),
        (Path("models/z/model.pt"), RunRecord("train", "z", tags={"model": "z"})),
    ]
    links, groups = figure_links(["m", "bm/u"], sources)
    assert links == {
        "train_run.m": train,
        "train_run.bm/u": ("ucd", "t_u", None),
        "denoise_run.m": ("denoise", "m-bsc", None),
        "denoise_run.baselines": ("denoise", "baselines-bsc", None),
    }
    assert groups == {"harvest_runs.m": {"2": ("harvest", "m/epoch_2", None)}}


def _derived(experiment, name, train, **tags):
    return RunRecord(experiment, name, tags={"model": "m", **tags}, links={"model_run_id": train})


def test_dataset_params_are_the_same_before_saving_and_read_back(tmp_path):
    """A dataset's run params from the dataset in memory and read back from its .npz: the same
    strings, also for a dict inside a list of the provenance (kept as JSON with sorted keys)."""
    from tapmachine.io import data
    from tapmachine.pipeline.stages.data import dataset_params

    x = np.zeros((5, 4), np.uint8)
    provenance = {"transforms": [{"name": "threshold", "level": 0.5}], "parent": {"b": 1, "a": 2}}
    ds = data.Dataset(x, np.arange(5) % 2, x[:2], np.zeros(2, int), (2, 2), provenance, "toy")
    live = flat_params(dataset_params(ds))
    back = flat_params(dataset_params(data.load_dataset(data.save_dataset(ds, tmp_path / "t.npz"))))
    assert live == back
    assert live["provenance.transforms"] == '[{"level": 0.5, "name": "threshold"}]'
    assert live["train_label_counts"] == "[3, 2]" and live["train_shape"] == "[5, 4]"


def test_dataset_stages_replayed_from_the_data_folder(tmp_path, monkeypatch, capsys):
    """A dataset of the data stage and the binary CIFAR-10 of ``ucd cifar10``, logged live, then
    replayed from the data folder alone: the same runs (``data/<name>`` with its montage,
    ``ucd/data_binary_cifar10``) with the same params, metrics (the dataset's ``mean`` over its
    first 10,000 training images) and tags."""
    from tapmachine.io import data
    from tapmachine.pipeline.stages import ucd_dbm
    from tapmachine.pipeline.stages.data import save_and_track
    from tapmachine.ucd import cifar

    folder = tmp_path / "results" / "data"
    g = np.random.default_rng(0)
    x = (g.random((10_040, 4)) < 0.3).astype(np.uint8)
    x[10_000:] = 1  # images past the first 10,000 count in no mean
    y = np.arange(10_040) % 3
    toy = data.Dataset(x[:10_030], y[:10_030], x[10_030:], y[10_030:], (2, 2), {}, "toy")
    live, manifest = _live_store(tmp_path, monkeypatch)
    save_and_track(toy, folder / "toy.npz", manifest)
    # The stage reads an md5-verified official archive, which a test cannot have (it rejects a
    # fabricated one unopened): its loader gives six images of random channel values here.
    images = (g.integers(0, 256, (6, 3072)).astype(np.uint8), np.arange(6) % 10)
    monkeypatch.setattr(cifar, "load_cifar10", lambda archive: (*images, *images))
    archive = tmp_path / "cifar-10-python.tar.gz"
    ucd_dbm.cifar10(archive, folder / "binary_cifar10.npz", manifest)
    (tmp_path / "results" / "tiny").mkdir()
    want = _dump(live)
    assert set(want) == {("data", "toy"), ("ucd", "data_binary_cifar10")}
    assert want["data", "toy"][2] == {
        "n_train": [(0, 10_030.0)],
        "n_test": [(0, 10.0)],
        "mean": [(0, float(x[:10_000].mean()))],
    }
    assert want["data", "toy"][3] == ["toy.montage.png"]
    assert want["ucd", "data_binary_cifar10"][0] == {"archive": str(archive)}

    rebuilt = tmp_path / "rebuilt"
    out = _track(tmp_path / "results" / "tiny", rebuilt, capsys, data=str(folder))
    assert "2 runs replayed, 0 already" in out
    assert _dump(rebuilt) == want
