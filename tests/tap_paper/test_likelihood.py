"""The likelihood stage on tiny enumerable RBMs: AIS vs exact, per-epoch scores, Fig. 12, table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from tapmachine.core import estimators, tap
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.figures import common, fig12, likelihood_table
from tapmachine.io.data import Dataset, load_dataset, save_dataset
from tapmachine.io.runlog import kept_epochs
from tapmachine.io.schema import SCHEMA_FILE as SCHEMA
from tapmachine.pipeline.configuration import ConfigError, validate
from tapmachine.pipeline.stages import likelihood as likelihood_stage
from tapmachine.pipeline.stages import train as train_stage
from tapmachine.pipeline.tracking import store as tracking
from tapmachine.tap_paper import likelihood

ROOT = Path(__file__).resolve().parents[2]

#: Tiny-model scoring: short thinned schedule, enough runs for a meaningful stderr.
TINY = likelihood.ScoreSettings(
    ais_runs=100, n_betas=1500, pl_sites=4, n_train=60, n_test=60, tap_inits=40
)


def _data(n, nv, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(nv, generator=g) * 0.6 + 0.2
    return (torch.rand(n, nv, generator=g) < p).double()


def _rbm(nv, nh, std, seed):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(nv, nh, generator=g, dtype=torch.float64) * std
    U = torch.randn(nv, generator=g, dtype=torch.float64) * 0.3
    return RBM(W, Bernoulli(U), Bernoulli(torch.zeros(nh, dtype=torch.float64)))


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "tiny.npz"
    x = _data(400, 16, 0).numpy().astype(np.uint8)
    ds = Dataset(x[:300], np.zeros(300, int), x[300:], np.zeros(100, int), (4, 4), {}, "tiny")
    save_dataset(ds, path)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlflow")
    manifest = d / "experiments.json"
    tracking.init_store(d, manifest)
    return manifest


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_dataset, store):
    """A 16 x 6 RBM trained 3 epochs by TAP, with per-epoch checkpoints and an MLflow run."""
    outdir = tmp_path_factory.mktemp("models") / "tiny"
    spec = {
        "dataset": "tiny",
        "visible": {"prior": "bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 6}],
        "epochs": 3,
        "batch_size": 50,
        "learning_rate": 0.05,
        "weight_init_std": 0.1,
        "eval": {"n_samples": 50},
    }
    train_stage.train_model("tiny", spec, tiny_dataset, outdir, seed=1, manifest=store)
    return outdir


def test_thinned_salakhutdinov_schedule_keeps_its_shape():
    full = estimators.salakhutdinov_schedule()
    b = likelihood.ais_schedule("salakhutdinov", 1451)
    assert b.numel() == 1451 and b[0] == 0.0 and b[-1] == 1.0
    torch.testing.assert_close(b, full[::10])
    assert likelihood.ais_schedule("salakhutdinov").numel() == 14501
    assert likelihood.ais_schedule("linear", 11).diff().allclose(torch.tensor(0.1, dtype=b.dtype))
    assert "thinned" in likelihood.schedule_label(likelihood.ScoreSettings(n_betas=1451))
    with pytest.raises(ValueError):
        likelihood.ais_schedule("linear")


def test_ais_test_log_likelihood_agrees_with_exact_within_band():
    machine = _rbm(12, 10, 0.4, 3)
    x = _data(200, 12, 4)
    images = {"test": x[:100], "train": x[100:]}
    row = likelihood.score_machine(machine, images, x[:40], x, TINY, (0, "exact"))
    for split in ("test", "train"):
        exact = row[f"exact_ll_{split}"]
        assert math.isfinite(exact)
        # The band comes from ln Z +- 3 stderr, so it holds the exact value when AIS is right.
        assert row[f"ais_ll_{split}_lower"] - 1e-6 <= exact <= row[f"ais_ll_{split}_upper"] + 1e-6
        assert abs(row[f"ais_ll_{split}"] - exact) < 0.05
        # Exact ln P(x) = -F(x) - ln Z, checked by hand.
        direct = float((-machine.free_energy_visible(images[split]) - row["log_z_exact"]).mean())
        assert exact == pytest.approx(direct, abs=1e-9)
    assert row["log_z_exact"] == pytest.approx(
        float(estimators.exact_log_partition(machine)), abs=1e-12
    )
    # TAP log-likelihood: the same data term, TAP's own ln Z (weak couplings: close to exact).
    assert abs(row["log_z_tap"] - row["log_z_exact"]) < 0.2
    assert row["tap_ll_per_unit_test"] == pytest.approx(row["tap_ll_test"] / 22)


def test_pseudo_likelihood_normalisation_is_the_full_site_sum():
    machine = _rbm(8, 5, 0.5, 5)
    x = _data(30, 8, 6)
    full = estimators.pseudo_log_likelihood(machine, x)
    F = machine.free_energy_visible
    brute = torch.zeros(30, dtype=torch.float64)
    for i in range(8):
        flipped = x.clone()
        flipped[:, i] = 1 - flipped[:, i]
        brute += torch.nn.functional.logsigmoid(F(flipped) - F(x))
    torch.testing.assert_close(full, brute)
    # Stochastic: 2 of 8 sites per image, scaled by 8/2, unbiased over draws.
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([estimators.pseudo_log_likelihood(machine, x, 2, g) for _ in range(400)])
    assert float(draws.mean()) == pytest.approx(float(brute.mean()), abs=0.1)


def test_score_checkpoints_one_row_per_epoch_and_tracking(trained, tiny_dataset, store, tmp_path):
    import mlflow

    blob = torch.load(trained / "model.pt", weights_only=True)
    uri, _ = tracking.experiment_id(store, "train")
    client = mlflow.MlflowClient(uri)
    train_id = blob["mlflow_run_id"]

    def train_points():
        keys = client.get_run(train_id).data.metrics
        return {k: len(client.get_metric_history(train_id, k)) for k in keys}

    before = train_points()
    out = tmp_path / "eval" / "scores.csv"
    likelihood_stage.score_checkpoints(
        trained, tiny_dataset, out, TINY, "all", seed=2, manifest=store
    )
    df = pd.read_csv(out)
    assert df["epoch"].tolist() == [1, 2, 3]
    for col in ("tap_ll_test", "ais_ll_test", "pl_test", "ais_ll_train", "log_z_exact"):
        assert np.isfinite(df[col]).all(), col
    inside = (df["ais_ll_test_lower"] - 1e-6 <= df["exact_ll_test"]) & (
        df["exact_ll_test"] <= df["ais_ll_test_upper"] + 1e-6
    )
    assert inside.all()
    assert (df["ais_description"].str.contains("1500 betas, 100 runs")).all()
    assert not list(out.parent.glob("*.tmp"))

    _, exp = tracking.experiment_id(store, "likelihood")
    # The store is shared by the session's tests (other stages log to `likelihood` too): this
    # model's scoring runs are the ones tagged with its training run.
    mine = f"tags.model_run_id = '{train_id}'"
    (run,) = client.search_runs([exp], mine)
    history = client.get_metric_history(run.info.run_id, "ais_ll_test")
    assert sorted(m.step for m in history) == [1, 2, 3]
    # A rerun (here of the last epoch) is a run of its own; the finished training run is left
    # exactly as training wrote it: no scoring metric, no second point at any step.
    likelihood_stage.score_checkpoints(
        trained, tiny_dataset, tmp_path / "again.csv", TINY, "last", seed=2, manifest=store
    )
    runs = client.search_runs([exp], mine, order_by=["attributes.start_time ASC"])
    assert len(runs) == 2 and runs[0].info.run_id == run.info.run_id
    assert sorted(
        m.step for m in client.get_metric_history(runs[1].info.run_id, "ais_ll_test")
    ) == [3]
    assert len(client.get_metric_history(run.info.run_id, "ais_ll_test")) == 3
    assert train_points() == before and "tap_ll" in before

    with pytest.raises(ValueError, match="outside 1..3"):
        likelihood.score_checkpoints(trained, tiny_dataset, out, TINY, [4])


def _scores_fixture(path, rising=True):
    e = np.arange(1, 7)
    base = -150 + 8 * np.log(e) if rising else -150 + 3 * np.sin(e)
    rows = {
        "model": "tiny",
        "epoch": e,
        "log_z_ais": -base,
        "log_z_ais_stderr": 0.1,
        "log_z_tap": -base,
        "ais_n_betas": 1451,
        "ais_description": "Salakhutdinov, thinned schedule, 1451 betas, 100 runs",
        "pl_sites": 100,
    }
    for split, shift in (("test", 0.0), ("train", 2.0)):
        rows.update(
            {
                f"tap_ll_{split}": base + 5 + shift,
                f"tap_ll_per_unit_{split}": (base + 5 + shift) / 22,
                f"ais_ll_{split}": base + shift,
                f"ais_ll_{split}_lower": base + shift - 0.3,
                f"ais_ll_{split}_upper": base + shift + 0.3,
                f"pl_{split}": base + 10 + shift + (0 if rising else np.cos(e)),
                f"n_{split}_images": 100,
            }
        )
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _claim(table, name):
    rows = table[(table["kind"] == "claim") & (table["claim"] == name)]
    assert len(rows) == 1, name
    return float(rows["value"].iloc[0])


def test_fig12_writes_png_pdf_csv_and_says_whether_measures_rise_together(trained, tmp_path):
    scores = _scores_fixture(tmp_path / "scores.csv")
    result = fig12.make(scores, trained / "model.pt")
    paths = common.save(result, tmp_path / "f.png", tmp_path / "f.pdf", tmp_path / "f.csv")
    assert all(p.stat().st_size > 0 for p in paths)
    table = pd.read_csv(tmp_path / "f.csv")
    assert _claim(table, "rise_together.test") == 1.0
    assert _claim(table, "spearman.tap_ll_vs_ais_ll.test") == pytest.approx(1.0)
    assert _claim(table, "fraction_steps_signs_agree.train") == 1.0
    drawn = table[table["kind"] == "drawn"]
    assert len(drawn) == 12 and set(drawn["split"]) == {"test", "train"}
    assert (drawn.loc[drawn["epoch"] > 1, "sign_ais_ll"] == 1).all()

    wobbly = fig12.make(_scores_fixture(tmp_path / "w.csv", rising=False), trained / "model.pt")
    assert _claim(wobbly.table, "rise_together.test") == 0.0


def test_likelihood_table_marks_the_reference_as_published(trained, tiny_dataset, tmp_path):
    settings = likelihood.ScoreSettings(
        ais_runs=50, n_betas=300, pl_sites=4, n_train=0, n_test=None, tap_inits=40
    )
    final = tmp_path / "final.csv"
    row = likelihood.score_model(trained / "model.pt", tiny_dataset, final, settings, seed=3)
    assert row["n_test_images"] == 100 and "ais_ll_train" not in row
    cd = pd.read_csv(final).assign(
        method="cd", sampling_steps=25, ais_ll_test=lambda d: d.ais_ll_test - 1
    )
    cd["ais_ll_test_lower"] = cd["ais_ll_test"] - 0.5
    cd["ais_ll_test_upper"] = cd["ais_ll_test"] + 0.5
    cd.to_csv(tmp_path / "cd.csv", index=False)
    model = trained / "model.pt"
    result = likelihood_table.make([final, tmp_path / "cd.csv"], [model, model])
    paths = common.save(result, tmp_path / "t.png", tmp_path / "t.pdf", tmp_path / "t.csv")
    assert all(p.stat().st_size > 0 for p in paths)
    table = pd.read_csv(tmp_path / "t.csv")
    drawn = table[table["kind"] == "drawn"]
    ref = drawn[drawn["source"] == "published"]
    assert len(ref) == 1
    assert ref["computed"].iloc[0] == 0 and ref["ais_ll_test"].iloc[0] == pytest.approx(-86.34)
    assert "Salakhutdinov" in ref["reference"].iloc[0]
    computed = drawn[drawn["source"] == "computed here"]
    assert computed["method_label"].tolist() == ["TAP", "CD-25"]
    assert (computed["computed"] == 1).all()
    assert _claim(table, "tap_minus_best_sampling_baseline") == pytest.approx(1.0)
    none = likelihood_table.make([final], [model], reference=False)
    assert "published" not in set(none.table.get("source", pd.Series(dtype=str)).dropna())


def test_likelihood_table_states_the_binarisation(trained, tiny_dataset, tmp_path):
    """Each row states its dataset's binarisation (from the dataset file); only a stochastically
    binarised row is like for like with the published value, and TAP is compared with the
    sampling baselines of its own dataset only."""
    from tapmachine.io import data

    source = data.load_dataset(tiny_dataset)
    files = {}
    for name, spec in (("thr", [{"name": "threshold", "level": 0.5}]),
                       ("sto", [{"name": "bernoulli", "seed": 5}])):  # fmt: skip
        files[name] = tmp_path / f"{name}.npz"
        save_dataset(data.derive(source, spec, name), files[name])
    assert likelihood_table.binarisation({"transforms": [{"name": "scale"}]}) == "not binarised"
    assert likelihood_table.dataset_binarisation(files["thr"]) == "thresholded: pixel/255 > 0.5"
    assert likelihood_table.dataset_binarisation(files["sto"]).startswith("stochastic")
    base = pd.DataFrame(
        [{"method": "tap", "ais_ll_test": -90.0, "ais_ll_test_lower": -91.0,
          "ais_ll_test_upper": -89.0, "n_test_images": 100, "ais_description": "x"}]
    )  # fmt: skip
    csvs = []
    for i, (method, steps, value) in enumerate(
        (("tap", 1, -90.0), ("cd", 25, -92.0), ("tap", 1, -86.0), ("cd", 25, -87.0))
    ):
        row = base.assign(method=method, sampling_steps=steps, ais_ll_test=value)
        row["ais_ll_test_lower"], row["ais_ll_test_upper"] = value - 1, value + 1
        csvs.append(tmp_path / f"s{i}.csv")
        row.to_csv(csvs[-1], index=False)
    model = trained / "model.pt"
    data_files = [files["thr"], files["thr"], files["sto"], files["sto"]]
    with pytest.raises(common.FigureError, match="one dataset file per model"):
        likelihood_table.make(csvs, [model] * 4, data_files=data_files[:3])
    result = likelihood_table.make(csvs, [model] * 4, data_files=data_files)
    drawn = result.table[result.table["kind"] == "drawn"]
    assert [str(b).split(":")[0] for b in drawn["binarisation"]] == [
        "thresholded",
        "thresholded",
        "stochastic",
        "stochastic",
        "stochastic",  # the published row
    ]
    rows = result.table[result.table["kind"] == "claim"]
    vs_published = rows[rows["claim"].str.endswith("_minus_published_cd25")]
    assert list(vs_published["value"]) == pytest.approx([-3.66, -5.66, 0.34, -0.66])
    alike = vs_published["detail"].str.startswith(
        ("TAP minus the published -86.34 nats: like", "CD-25 minus the published -86.34 nats: like")
    )
    assert list(alike) == [False, False, True, True]
    # only CD-25 on like data can test the chain: -0.66 is within 1.5 nats
    assert list(vs_published["held"]) == ["", "", "", "held"]
    far = [c.with_name("far.csv") for c in csvs[3:]]
    pd.read_csv(csvs[3]).assign(ais_ll_test=-88.0).to_csv(far[0], index=False)
    result = likelihood_table.make([*csvs[:3], far[0]], [model] * 4, data_files=data_files)
    rows = result.table[result.table["kind"] == "claim"]
    assert rows[rows["claim"] == "cd25_minus_published_cd25"]["held"].tolist()[-1] == "not held"
    # The model files share one dataset name here: every row is one group, TAP vs the best CD.
    assert len(rows[rows["claim"] == "tap_minus_best_sampling_baseline"]) == 1


def test_config_names_existing_rbms():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    validate(config, SCHEMA)
    assert config["likelihood"]["fig12"]["model"] in config["models"]
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["likelihood"]["table"]["models"].append("nope")
    with pytest.raises(ConfigError, match=r"likelihood.table.models\[4\]: 'nope' is not a model"):
        validate(config, SCHEMA)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["likelihood"]["fig12"]["epochs"] = [1, 999]
    with pytest.raises(ConfigError, match="likelihood.fig12.epochs"):
        validate(config, SCHEMA)
    empty = {"models": {}}
    validate(empty, SCHEMA)  # no likelihood section: nothing to score
    assert empty["likelihood"]["fig12"]["model"] is None
    assert empty["likelihood"]["table"]["models"] == []


def test_score_checkpoints_reuses_trainings_tap_log_partition_only_when_identical(
    trained, tiny_dataset, tmp_path
):
    """Training recorded ln Z_TAP from its first 50 rows at tol 1e-12 (TrainSettings defaults):
    scoring at those settings reuses it and gets the solved row's TAP numbers exactly."""
    from tapmachine.io.modelfile import Checkpoint

    same = dataclasses.replace(
        TINY, tap_inits=50, tol=1e-12, max_iter=500, damping=0.5, dedup_tol=1e-2, ais_runs=10
    )
    reused = likelihood.score_checkpoints(trained, tiny_dataset, tmp_path / "r.csv", same)
    solved = likelihood.score_checkpoints(
        trained, tiny_dataset, tmp_path / "s.csv", same, reuse=False
    )
    assert [r["log_z_tap_source"] for r in reused] == ["training"] * 3
    assert [r["log_z_tap_source"] for r in solved] == ["solved"] * 3
    tap_keys = [*likelihood.TAP_INFO_KEYS, "tap_ll_train", "tap_ll_test"]
    tap_keys += ["tap_ll_test_stderr", "tap_ll_per_unit_test"]
    for r, s in zip(reused, solved, strict=True):
        assert {k: r[k] for k in tap_keys} == {k: s[k] for k in tap_keys}
        assert r["ais_ll_test"] == s["ais_ll_test"]  # the rest does not depend on the source
    # The per-image TAP log-likelihood is the one tap.log_likelihood gives with the solutions.
    ckpt = Checkpoint.load(likelihood.checkpoint_path(trained, 2))
    machine = ckpt.machine(dtype=torch.float32)
    ds = load_dataset(tiny_dataset)
    x = torch.as_tensor(ds.x_train, dtype=torch.float32)
    states, info = likelihood.tap_log_partition(machine, x[:50], same)
    direct = tap.log_likelihood(machine, torch.as_tensor(ds.x_test[:60]).float(), states)
    assert reused[1]["tap_ll_test"] == pytest.approx(float(direct.double().mean()), abs=1e-5)
    assert info["log_z_tap"] == reused[1]["log_z_tap"]

    # Any setting that differs from training's evaluation falls back to solving.
    for change in (
        {"tap_inits": 40},
        {"tol": 1e-8},
        {"max_iter": 400},
        {"damping": 0.4},
        {"retry_damping": None},
        {"dedup_tol": 1e-3},
    ):
        rows = likelihood.score_checkpoints(
            trained, tiny_dataset, tmp_path / "f.csv", dataclasses.replace(same, **change), [3]
        )
        (key,) = change
        assert rows[0]["log_z_tap_source"] == "solved", change
        assert key in rows[0]["log_z_tap_note"]
    info, why = likelihood.recorded_tap_partition(ckpt, same, torch.float64)
    assert info is None and "dtype" in why
    # A record made with another second-pass tolerance is not what scoring does now.
    recorded = [row["retry_tol"] for row in ckpt.history]
    for row in ckpt.history:
        row["retry_tol"] = 1e-12
    info, why = likelihood.recorded_tap_partition(ckpt, same, torch.float32)
    assert info is None and "second pass used tol 1e-12" in why
    for row, value in zip(ckpt.history, recorded, strict=True):
        row["retry_tol"] = value
    # Rows without a record of ln Z (training without evaluation): solved.
    for row in ckpt.history:
        del row["log_z_tap"]
    info, why = likelihood.recorded_tap_partition(ckpt, same, torch.float32)
    assert info is None and "no recorded log_z_tap" in why
    assert pd.read_csv(tmp_path / "r.csv")["log_z_tap_source"].eq("training").all()

    # The final model (the table): training's evaluation after its last epoch, same numbers.
    final = likelihood.score_model(trained / "model.pt", tiny_dataset, tmp_path / "m.csv", same)
    final_solved = likelihood.score_model(
        trained / "model.pt", tiny_dataset, tmp_path / "n.csv", same, reuse=False
    )
    assert (final["log_z_tap_source"], final_solved["log_z_tap_source"]) == ("training", "solved")
    assert {k: final[k] for k in tap_keys} == {k: final_solved[k] for k in tap_keys}
    assert final["log_z_tap"] == reused[-1]["log_z_tap"]
    other = likelihood.score_model(
        trained / "model.pt", tiny_dataset, tmp_path / "o.csv", dataclasses.replace(same, tol=1e-9)
    )
    assert other["log_z_tap_source"] == "solved" and "tol" in other["log_z_tap_note"]


def test_scoring_a_machine_without_tap_solutions_gives_nan_tap_and_finite_ais(cycling_rbm):
    """TAP converges from none of the rows at damping 0.5 without the second pass: TAP's ln Z and
    log-likelihood are NaN, the other estimates are still computed; with the second pass TAP's
    ln Z is the one training's evaluation records."""
    from tapmachine.train import TrainSettings, evaluate_tap_log_likelihood

    m, x = cycling_rbm
    off = dataclasses.replace(
        TINY, tap_inits=len(x), max_iter=2000, tol=1e-12, retry_damping=None, n_betas=200
    )
    unique, info = likelihood.tap_log_partition(m, x, off)
    assert unique.iterations.numel() == 0 and info["n_unique"] == info["n_converged"] == 0
    assert math.isnan(info["log_z_tap"])
    row = likelihood.score_machine(m, {"test": x}, x, x, off)
    assert math.isnan(row["tap_ll_test"]) and math.isfinite(row["ais_ll_test"])
    assert math.isfinite(row["exact_ll_test"]) and math.isfinite(row["pl_test"])
    on = dataclasses.replace(off, retry_damping=0.95)
    _, info = likelihood.tap_log_partition(m, x, on)
    training = TrainSettings(max_iter=2000, tol=1e-12, retry_damping=0.95)
    assert on.solver_settings == training.solver_settings
    trained = evaluate_tap_log_likelihood(m, x, training.solver_settings, training.dedup_tol)
    assert info["n_unique"] == trained["n_unique"] > 0
    assert info["log_z_tap"] == pytest.approx(trained["log_z_tap"], abs=1e-12)


def test_exact_curve_is_the_enumerated_log_likelihood_beside_trainings_tap(
    trained, tiny_dataset, tmp_path, capsys
):
    from tapmachine.io.modelfile import Checkpoint
    from tapmachine.pipeline.cli import main

    store = tmp_path / "mlflow" / "experiments.json"
    tracking.init_store(store.parent, store)
    out = tmp_path / "exact.csv"
    args = ["exact-curve", "--model-dir", str(trained), "--data", str(tiny_dataset)]
    assert main(args + ["--epochs", "1,3", "--out", str(out), "--tracking", str(store)]) == 0
    df = pd.read_csv(out)
    assert df["epoch"].tolist() == [1, 3]
    x = torch.as_tensor(load_dataset(tiny_dataset).x_train[:50], dtype=torch.float64)
    for _, row in df.iterrows():
        ckpt = Checkpoint.load(trained / "checkpoints" / f"epoch_{row['epoch']}.pt")
        m = ckpt.machine(torch.device("cpu"), torch.float64)
        log_z = estimators.exact_log_partition(m)  # float64 throughout
        ll = (-m.free_energy_visible(x) - log_z) / sum(m.sizes)
        assert row["rows"] == 50
        assert row["log_z_exact"] == pytest.approx(float(log_z), abs=1e-5)
        assert row["exact_ll"] == pytest.approx(float(ll.mean()), abs=1e-7)
        assert row["tap_ll"] == ckpt.history[-1]["tap_ll"]
    uri, exp = tracking.experiment_id(store, "likelihood")
    import mlflow

    (run,) = mlflow.MlflowClient(uri).search_runs([exp])
    assert run.info.run_name == "tiny-exact"
    steps = mlflow.MlflowClient(uri).get_metric_history(run.info.run_id, "exact_ll")
    assert sorted(m.step for m in steps) == [1, 3]

    capsys.readouterr()
    assert main(args + ["--epochs", "4", "--out", str(tmp_path / "no.csv")]) == 2
    assert "epochs [4] are outside 1..3" in capsys.readouterr().err
    assert not (tmp_path / "no.csv").exists()


def test_exact_curve_resumes_from_the_epochs_a_stopped_job_finished(
    trained, tiny_dataset, tmp_path, monkeypatch, capsys
):
    import importlib

    module = importlib.import_module("tapmachine.tap_paper.likelihood.exact_curve")
    whole = module.exact_curve(trained, tiny_dataset, tmp_path / "whole.csv", [1, 2, 3])
    computed = []
    real = module.exact_log_likelihood_per_unit

    def counted(machine, x):
        computed.append(1)
        return real(machine, x)

    def stop_after_first(epoch, row):
        raise KeyboardInterrupt  # the session ends

    monkeypatch.setattr(module, "exact_log_likelihood_per_unit", counted)
    out = tmp_path / "exact.csv"
    with pytest.raises(KeyboardInterrupt):
        module.exact_curve(trained, tiny_dataset, out, [1, 2, 3], on_row=stop_after_first)
    assert not out.exists() and module.partial_path(out).exists() and len(computed) == 1
    capsys.readouterr()
    rows = module.exact_curve(trained, tiny_dataset, out, [1, 2, 3])
    assert len(computed) == 3  # epoch 1 taken from the partial file, 2 and 3 computed
    assert kept_epochs(capsys.readouterr().err) == [1]
    assert not module.partial_path(out).exists()
    assert all(r["seconds"] > 0 and r["cpu_seconds"] > 0 for r in rows)  # each epoch's own time
    for col in ("epoch", "exact_ll", "log_z_exact", "tap_ll", "rows"):
        assert [r[col] for r in rows] == pytest.approx([r[col] for r in whole])
    assert pd.read_csv(out)["exact_ll"].tolist() == pytest.approx([r["exact_ll"] for r in whole])

    # a partial row of another checkpoint (another run in the same folder) is not used
    pd.DataFrame([{**whole[0], "fingerprint": "another run"}]).to_csv(
        module.partial_path(out), index=False
    )
    module.exact_curve(trained, tiny_dataset, out, [1])
    assert len(computed) == 4


def test_exact_curve_while_training_keeps_the_written_epochs_for_the_job(
    trained, tiny_dataset, tmp_path, monkeypatch, capsys
):
    """``--while-training`` on a model with no model.pt yet computes the chosen epochs whose
    checkpoints exist, keeps them for the job and writes no curve; the job, once training has
    finished, computes only the rest and writes the curve a single start writes. Rows kept for
    another number of training rows (a wrong ``--n-train``) are computed again."""
    import importlib
    import json
    import shutil

    from tapmachine.pipeline.cli import main

    module = importlib.import_module("tapmachine.tap_paper.likelihood.exact_curve")
    ais = {"n_runs": 20, "schedule": "linear", "n_betas": 200}
    whole = module.exact_curve(trained, tiny_dataset, tmp_path / "whole.csv", [1, 3], ais=ais)
    under_way = tmp_path / "models" / "tiny"
    shutil.copytree(trained, under_way)
    (under_way / "model.pt").unlink()
    (under_way / "checkpoints" / "epoch_3.pt").unlink()  # training has written epochs 1, 2
    out = tmp_path / "exact.csv"
    args = ["exact-curve", "--model-dir", str(under_way), "--data", str(tiny_dataset),
            "--epochs", "1,3", "--out", str(out), "--ais", json.dumps(ais)]  # fmt: skip
    capsys.readouterr()
    assert main([*args, "--while-training"]) == 0
    assert "kept epochs 1 in" in capsys.readouterr().out
    assert not out.exists() and pd.read_csv(module.partial_path(out))["epoch"].tolist() == [1]

    computed = []
    real = module.exact_log_likelihood_per_unit
    monkeypatch.setattr(
        module, "exact_log_likelihood_per_unit", lambda m, x: computed.append(1) or real(m, x)
    )
    shutil.copy(trained / "model.pt", under_way / "model.pt")  # training has finished
    shutil.copy(trained / "checkpoints" / "epoch_3.pt", under_way / "checkpoints")
    rows = module.exact_curve(under_way, tiny_dataset, out, [1, 3], ais=ais)
    assert len(computed) == 1 and not module.partial_path(out).exists()
    for col in ("epoch", "exact_ll", "log_z_exact", "log_z_ais", "ais_z", "rows_trained"):
        assert [r[col] for r in rows] == pytest.approx([r[col] for r in whole])
    assert rows[0]["rows_trained"] == 300

    computed.clear()
    (under_way / "model.pt").unlink()
    out.unlink()
    assert main([*args, "--while-training", "--n-train", "100"]) == 0  # the model took 300
    shutil.copy(trained / "model.pt", under_way / "model.pt")
    module.exact_curve(under_way, tiny_dataset, out, [1, 3], ais=ais)
    assert len(computed) == 4  # epochs 1 and 3 while training, both again in the job

    capsys.readouterr()
    assert main([*args, "--n-train", "100"]) == 2
    assert "--n-train is for --while-training" in capsys.readouterr().err
    empty = tmp_path / "models" / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    assert main([*args[:2], str(empty), *args[3:], "--while-training"]) == 2
    assert "no model.pt and no checkpoint" in capsys.readouterr().err


def test_exact_curve_scores_ais_against_the_enumeration(trained, tiny_dataset, tmp_path):
    """With ``ais``, each epoch also carries AIS's ln Z, its standard error and their
    difference from the enumerated ln Z in standard errors; on the tiny RBM AIS lands within a
    few standard errors of the exact value, and a kept epoch without AIS is computed again."""
    import importlib

    module = importlib.import_module("tapmachine.tap_paper.likelihood.exact_curve")
    ais = {"n_runs": 200, "schedule": "linear", "n_betas": 2000}
    out = tmp_path / "exact.csv"
    from tapmachine.io.modelfile import Checkpoint

    plain = module.exact_curve(trained, tiny_dataset, out, [1])
    assert "log_z_ais" not in plain[0]
    fingerprint = Checkpoint.load(trained / "checkpoints" / "epoch_1.pt").fingerprint
    pd.DataFrame([{**plain[0], "fingerprint": fingerprint}]).to_csv(
        module.partial_path(out), index=False
    )
    rows = module.exact_curve(trained, tiny_dataset, out, [1, 3], ais=ais, seed=5)
    df = pd.read_csv(out)
    for row, (_, written) in zip(rows, df.iterrows(), strict=True):
        gap = row["log_z_ais"] - row["log_z_exact"]
        assert row["ais_z"] == pytest.approx(gap / row["log_z_ais_stderr"])
        assert abs(row["ais_z"]) < 4 and abs(gap) < 0.05
        assert row["ais_ll_minus_exact"] == pytest.approx(-gap / (16 + 6))
        assert written["ais_z"] == pytest.approx(row["ais_z"])
    again = module.exact_curve(
        trained, tiny_dataset, tmp_path / "again.csv", [1, 3], ais=ais, seed=5
    )
    assert [r["log_z_ais"] for r in again] == [r["log_z_ais"] for r in rows]


def test_config_checks_the_exact_curves_of_fig3():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["figures"]["fig3"]["exact"] = {"models": ["bmnist_h25"], "epochs": "last"}
    validate(config, SCHEMA)
    for models, match in (
        (["bmnist_h500"], "at most 25 are enumerated"),
        (["rbm_not_drawn"], "not one of figures.fig3.models"),
    ):
        bad = yaml.safe_load((ROOT / "config.yaml").read_text())
        bad["models"]["rbm_not_drawn"] = bad["models"]["bmnist_h25"]
        bad["figures"]["fig3"]["exact"] = {"models": models, "epochs": [1]}
        with pytest.raises(ConfigError, match=match):
            validate(bad, SCHEMA)
    late = yaml.safe_load((ROOT / "config.yaml").read_text())
    late["figures"]["fig3"]["exact"] = {"models": ["bmnist_h25"], "epochs": [1, 99]}
    with pytest.raises(ConfigError, match=r"exact.epochs: \[99\] exceed the 10 training epochs"):
        validate(late, SCHEMA)


def test_score_checkpoints_resumes_from_the_epochs_a_stopped_job_scored(
    trained, tiny_dataset, tmp_path, monkeypatch, capsys
):
    """A job stopped after its first epoch keeps that epoch's row; started again it scores only
    the epochs left, and its CSV equals an uninterrupted job's, value for value (timings aside).
    A changed
    checkpoint, or other settings, are scored anew."""
    import importlib

    from tapmachine.io.modelfile import Checkpoint
    from tapmachine.io.partial import partial_path

    module = importlib.import_module("tapmachine.tap_paper.likelihood.files")
    whole = tmp_path / "whole.csv"
    module.score_checkpoints(trained, tiny_dataset, whole, TINY, "all", seed=2)
    scored = []
    real = module.score_machine

    def counted(machine, *args, **kw):
        scored.append(1)
        return real(machine, *args, **kw)

    def stop_after_first(epoch, row):
        raise KeyboardInterrupt  # the session ends

    monkeypatch.setattr(module, "score_machine", counted)
    out = tmp_path / "scores.csv"
    with pytest.raises(KeyboardInterrupt):
        module.score_checkpoints(
            trained, tiny_dataset, out, TINY, "all", seed=2, on_row=stop_after_first
        )
    assert not out.exists() and partial_path(out).exists() and len(scored) == 1
    capsys.readouterr()
    module.score_checkpoints(trained, tiny_dataset, out, TINY, "all", seed=2)
    assert len(scored) == 3  # epoch 1 kept, epochs 2 and 3 scored
    assert not partial_path(out).exists()
    # the log names the kept epoch, whose row keeps its own times (the job's time counts them)
    assert kept_epochs(capsys.readouterr().err) == [1]
    assert (pd.read_csv(out)[["seconds", "cpu_seconds"]] > 0).all().all()
    resumed, uninterrupted = pd.read_csv(out), pd.read_csv(whole)
    timings = [c for c in uninterrupted.columns if "seconds" in c]
    assert len(timings) >= 1 and list(resumed.columns) == list(uninterrupted.columns)
    pd.testing.assert_frame_equal(
        resumed.drop(columns=timings), uninterrupted.drop(columns=timings), check_exact=True
    )

    # other settings: every epoch scored anew
    with pytest.raises(KeyboardInterrupt):
        module.score_checkpoints(
            trained, tiny_dataset, out, TINY, "all", seed=2, on_row=stop_after_first
        )
    other = dataclasses.replace(TINY, pl_sites=5)
    module.score_checkpoints(trained, tiny_dataset, out, other, [1], seed=2)
    assert len(scored) == 5
    # a checkpoint rewritten (here its history touched) since its row was kept: scored anew
    copy = tmp_path / "model"
    import shutil

    shutil.copytree(trained, copy)
    with pytest.raises(KeyboardInterrupt):
        module.score_checkpoints(
            copy, tiny_dataset, out, TINY, "all", seed=2, on_row=stop_after_first
        )
    ckpt = Checkpoint.load(copy / "checkpoints" / "epoch_1.pt")
    ckpt.history[-1]["note"] = "rewritten"
    ckpt.save(copy / "checkpoints" / "epoch_1.pt")
    module.score_checkpoints(copy, tiny_dataset, out, TINY, [1], seed=2)
    assert len(scored) == 7
    # an unreadable file of kept rows is ignored, not trusted
    partial_path(out).write_text("{not json\n")
    module.score_checkpoints(trained, tiny_dataset, out, TINY, [1], seed=2)
    assert len(scored) == 8
