"""Figs. 10-11 stage: config checks for deep/adaTAP models, curves, timing and figure claims."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from matplotlib.collections import PolyCollection

from tapmachine.core import estimators, tap
from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli
from tapmachine.core.seeding import seeded_generator
from tapmachine.figures import fig10, fig11
from tapmachine.figures.common import FigureError
from tapmachine.io.schema import SCHEMA_FILE as SCHEMA
from tapmachine.pipeline.configuration import ConfigError, load_config, validate
from tapmachine.tap_paper import curves

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def default():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def _set(config, path, value):
    node = config
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return config


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["models", "bmnist_dbm2", "hidden"],
            [],
            "models.bmnist_dbm2.hidden: [] should be non-empty",
        ),
        (
            ["models", "bmnist_dbm2", "hidden", 1, "prior"],
            "truncated_gaussian",
            "models.bmnist_dbm2.hidden[1].prior: 'truncated_gaussian' is not supported in a deep",
        ),
        (
            ["models", "bmnist_dbm3", "method"],
            "cd",
            "models.bmnist_dbm3.method: 'cd' is not supported for a machine with 3 hidden layers",
        ),
        (
            ["models", "bmnist_h25", "pretrain"],
            {"epochs": 2},
            "models.bmnist_h25.pretrain: greedy pretraining needs at least 2 hidden layers",
        ),
        (
            ["models", "bmnist_dbm2", "pretrain"],
            {"epochs": 0},
            "models.bmnist_dbm2.pretrain.epochs: 0 is less than the minimum of 1",
        ),
        (
            ["models", "rmnist_h100", "inference"],
            "adatap",
            "models.rmnist_h100.visible.prior: adaTAP (inference: adatap, Alg. 3) is implemented "
            "for bernoulli and spin units, not 'truncated_gauss_bernoulli'",
        ),
        (
            ["models", "bmnist_dbm2", "inference"],
            "adatap",
            "models.bmnist_dbm2.inference: adatap needs an RBM trained by TAP",
        ),
        (["models", "bmnist_h25", "inference"], "vamp", "models.bmnist_h25.inference: 'vamp'"),
        (
            ["deep", "fig11", "models"],
            ["bmnist_h25"],
            "deep.fig11.models[0]: 'bmnist_h25' has 1 hidden layer",
        ),
        (["deep", "fig10", "models"], ["nope"], "deep.fig10.models[0]: 'nope' is not a model"),
        (["deep", "fig10", "epoch"], 1000, "epochs, fewer than deep.fig10.epoch = 1000"),
        (
            ["deep", "fig10", "timing", "batch_sizes"],
            [0],
            "deep.fig10.timing.batch_sizes[0]: 0 is less than the minimum of 1",
        ),
    ],
)
def test_bad_deep_configs_name_the_key(default, path, value, expected):
    config = _set(copy.deepcopy(default), path, value)
    with pytest.raises(ConfigError) as info:
        validate(config, SCHEMA)
    assert expected in str(info.value)


def test_shipped_configs_declare_figs_10_11():
    for name in ("config.yaml", "workflow/config/paper.yaml"):
        config = validate(load_config([ROOT / name], default=ROOT / "config.yaml"), SCHEMA)
        f10 = config["deep"]["fig10"]["models"]
        kinds = {
            (config["models"][m]["inference"], config["models"][m]["tap"]["train_iterations"])
            for m in f10
        }
        assert kinds == {(i, n) for i in ("tap", "adatap") for n in (3, 10, 100)}
        depths = sorted(
            len(config["models"][m]["hidden"]) for m in config["deep"]["fig11"]["models"]
        )
        assert depths == [2, 3]
    paper = validate(
        load_config([ROOT / "workflow/config/paper.yaml"], default=ROOT / "config.yaml"), SCHEMA
    )
    m = paper["models"]["bmnist_fig10_adatap3"]
    assert (m["n_train"], m["hidden"][0]["units"], m["learning_rate"], m["batch_size"]) == (
        5000,
        500,
        0.001,
        100,
    )
    assert paper["models"]["bmnist_dbm2"]["pretrain"] == {
        "epochs": 50,
        "learning_rate": 0.001,
        "inputs": "samples",
    }
    assert paper["deep"]["fig10"]["timing"]["adatap_method"] == "joint"


def test_pseudo_likelihood_curves_score_the_same_sites_at_every_epoch_and_for_every_model():
    """Common random numbers: every point of the curves of two models, from generators seeded
    alike, is the pseudo-likelihood over one draw of sites per image (so a model scored at two
    epochs gives the same number twice, and the gap between models is theirs alone)."""
    g = torch.Generator().manual_seed(2)
    nv, nh, rows, n_sites = 12, 5, 40, 4
    a, b = (
        RBM(
            0.5 * torch.randn(nv, nh, generator=g, dtype=torch.float64),
            Bernoulli(0.3 * torch.randn(nv, generator=g, dtype=torch.float64)),
            Bernoulli(torch.zeros(nh, dtype=torch.float64)),
        )
        for _ in range(2)
    )
    x = torch.bernoulli(torch.full((rows, nv), 0.4, dtype=torch.float64), generator=g)

    def sites():
        return seeded_generator(7, curves.SITES_SEED_LABEL)

    drawn = estimators.site_subsets(rows, nv, n_sites, sites())
    for machine in (a, b):
        curve = curves.pseudo_likelihood_curve([(1, machine), (2, machine)], x, n_sites, sites())
        want = estimators.pseudo_log_likelihood(machine, x, sites=drawn)
        mean, se = estimators.mean_and_stderr(want)
        assert [(r["pl"], r["pl_stderr"]) for r in curve.rows] == [(mean, se)] * 2
        assert torch.equal(curve.last["pl"], want)
    fresh = curves.pseudo_likelihood_curve([(1, a)], x, n_sites, g).rows[0]["pl"]
    assert fresh != curves.pseudo_likelihood_curve([(1, a)], x, n_sites, sites()).rows[0]["pl"]
    exact = curves.pseudo_likelihood_curve([(1, a)], x, None, sites()).rows[0]["pl"]
    assert exact == pytest.approx(float(estimators.pseudo_log_likelihood(a, x).mean()))
    # the per-image rows of an epoch other than the last (Fig. 10's deep.fig10.epoch)
    early = curves.pseudo_likelihood_curve([(1, a), (2, b)], x, n_sites, sites(), rows_epoch=1)
    torch.testing.assert_close(
        early.last["pl"], estimators.pseudo_log_likelihood(a, x, sites=drawn)
    )
    with pytest.raises(ValueError, match="rows_epoch 3 is not among the epochs"):
        curves.pseudo_likelihood_curve([(1, a), (2, b)], x, n_sites, sites(), rows_epoch=3)


def test_timing_rows_and_curves():
    rows = curves.inference_timing(20, 6, [1, 4], torch.Generator().manual_seed(0), repeats=1)
    assert [r["batch_size"] for r in rows] == [1, 4]
    assert all(r["tap_seconds"] > 0 and r["adatap_seconds"] > 0 for r in rows)
    g = torch.Generator().manual_seed(1)
    m = RBM(
        0.3 * torch.randn(6, 4, generator=g, dtype=torch.float64),
        Bernoulli(torch.zeros(6, dtype=torch.float64)),
        Bernoulli(torch.zeros(4, dtype=torch.float64)),
    )
    x = torch.bernoulli(torch.full((30, 6), 0.5, dtype=torch.float64), generator=g)
    pl = curves.pseudo_likelihood_curve([(1, m), (2, m)], x, None, g).rows
    assert pl[0]["pl"] == pytest.approx(pl[1]["pl"]) and pl[0]["pl"] < 0
    deep = BoltzmannMachine(
        (
            Bernoulli(torch.zeros(6, dtype=torch.float64)),
            Bernoulli(torch.zeros(4, dtype=torch.float64)),
            Bernoulli(torch.zeros(3, dtype=torch.float64)),
        ),
        (m.W, 0.2 * torch.randn(4, 3, generator=g, dtype=torch.float64)),
    )
    solver = tap.SolverSettings(tol=1e-12, max_iter=500)
    curve = curves.tap_likelihood_curve([(1, deep)], x[:20], x[20:], 10, solver)
    assert curve.last["tap_ll_test"].shape == (10,)
    rows = curve.rows
    assert rows[0]["tap_ll_train"] < 0 and rows[0]["tap_ll_test"] < 0 and rows[0]["n_unique"] >= 1


def test_tap_curve_makes_the_evaluation_second_pass_and_gives_nan_without_solutions(cycling_rbm):
    """Fig. 11's per-epoch TAP log-likelihood is training's evaluation: NaN where no row
    converges, and with the second pass the value training's evaluation records."""
    import math

    from tapmachine.train import TrainSettings, evaluate_tap_log_likelihood

    m, x = cycling_rbm
    once = tap.SolverSettings(tol=1e-12, max_iter=2000)
    unsolved = curves.tap_likelihood_curve([(1, m)], x, x, len(x), once)
    (none,) = unsolved.rows
    assert none["n_unique"] == 0 and math.isnan(none["tap_ll_train"])
    assert math.isnan(none["tap_ll_test"]) and torch.isnan(unsolved.last["tap_ll_train"]).all()
    twice = once.replace(retry_damping=0.95)
    (row,) = curves.tap_likelihood_curve([(1, m)], x, x, len(x), twice).rows
    settings = TrainSettings(retry_damping=0.95, tol=1e-12, max_iter=2000)
    assert settings.solver_settings == twice
    evaluated = evaluate_tap_log_likelihood(m, x, twice, settings.dedup_tol)
    assert row["n_unique"] == evaluated["n_unique"] > 0
    assert row["tap_ll_train"] == pytest.approx(evaluated["tap_ll"], abs=1e-12)
    assert row["tap_ll_test"] == row["tap_ll_train"]


def test_rises_leaves_epochs_without_a_tap_solution_out():
    import math

    import numpy as np

    e = np.arange(1.0, 6.0)
    ok, gain, rho = fig11.rises(e, np.array([-0.3, math.nan, -0.28, -0.27, math.nan]))
    assert ok and gain == pytest.approx(0.03) and rho == pytest.approx(1.0)
    assert fig11.rises(e, np.array([-0.3, math.nan, math.nan, math.nan, math.nan]))[0] is False


def test_outlier_rule():
    finals = {"TAP 3 it.": -100.0, "TAP 10 it.": -101.0, "adaTAP 3 it.": -110.0}
    assert fig10.outlier(finals, "adaTAP 3 it.")[0]
    # below the others by more than their spread, but not by more than the noise: 2 * hypot(3, 4)
    stderrs = {"TAP 3 it.": 0.1, "TAP 10 it.": 4.0, "adaTAP 3 it.": 3.0}
    assert not fig10.outlier(finals, "adaTAP 3 it.", stderrs)[0]
    stderrs["TAP 10 it."] = 1.0  # 2 * hypot(3, 1) = 6.3 < 9
    assert fig10.outlier(finals, "adaTAP 3 it.", stderrs)[0]
    finals["adaTAP 3 it."] = -101.5  # below, but by less than the others' spread
    assert not fig10.outlier(finals, "adaTAP 3 it.")[0]


def test_outlier_rule_pairs_the_rows_of_curves_scored_on_the_same_images():
    """Images that differ widely (per-curve standard errors of 4) but shift by 9 +- 1 nats
    between two curves: hypot's 2 x 5.7 hides the gap of 9, the paired 2 x 0.1 does not."""
    rng = np.random.default_rng(0)
    base = rng.normal(-100.0, 40.0, 100)
    rows = {
        "TAP 3 it.": base,
        "TAP 10 it.": base - 0.5,
        "adaTAP 3 it.": base - 9.0 + rng.normal(0.0, 1.0, 100),
    }
    finals = {k: float(v.mean()) for k, v in rows.items()}
    stderrs = {k: float(v.std(ddof=1) / 10.0) for k, v in rows.items()}
    verdict, detail = fig10.outlier(finals, "adaTAP 3 it.", stderrs)
    assert not verdict and "2 stderr of the gap" in detail
    verdict, detail = fig10.outlier(finals, "adaTAP 3 it.", stderrs, rows)
    paired = 2.0 * np.std(rows["TAP 10 it."] - rows["adaTAP 3 it."], ddof=1) / 10.0
    assert verdict and f"2 paired stderr of the gap {paired:.3f}" in detail
    rows["adaTAP 3 it."] = base - 0.7 + rng.normal(0.0, 1.0, 100)  # within the others' spread
    finals["adaTAP 3 it."] = float(rows["adaTAP 3 it."].mean())
    assert not fig10.outlier(finals, "adaTAP 3 it.", stderrs, rows)[0]
    rows["adaTAP 3 it."] = rows["adaTAP 3 it."][:50]
    with pytest.raises(FigureError, match="scored on 100 and 50 images"):
        fig10.outlier(finals, "adaTAP 3 it.", stderrs, rows)


def _model_file(tmp_path, name, sizes):
    from tapmachine.io.modelfile import ModelFile

    ps = [Bernoulli(torch.zeros(n)) for n in sizes]
    ws = [torch.zeros(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    path = tmp_path / name / "model.pt"
    path.parent.mkdir(parents=True)
    machine = BoltzmannMachine(tuple(ps), tuple(ws))
    ModelFile.from_machine(machine, name, dataset="binary_mnist").save(path)
    return path


@pytest.mark.parametrize("n_epochs", [3, 25])
def test_figures_from_synthetic_curves(tmp_path, n_epochs):
    models, csvs = [], []
    epochs = list(range(1, n_epochs + 1))
    for inference, its, slope in (("tap", 3, 1.0), ("adatap", 3, 0.2), ("adatap", 10, 1.0)):
        name = f"m_{inference}{its}"
        models.append(_model_file(tmp_path, name, (6, 4)))
        df = pd.DataFrame(
            {
                "epoch": epochs,
                "pl": [-10 + slope * e for e in epochs],
                "pl_stderr": 0.1,
                "inference": inference,
                "train_iterations": its,
            }
        )
        csvs.append(tmp_path / f"{name}.csv")
        df.to_csv(csvs[-1], index=False)
    timing = tmp_path / "t.csv"
    pd.DataFrame(
        {
            "batch_size": [1, 100],
            "tap_seconds": [1e-4, 1e-3],
            "adatap_seconds": [1e-2, 2.0],
            "ratio": [100.0, 2000.0],
            "n_visible": 6,
            "n_hidden": 4,
            "threads": 1,
            "dtype": "float32",
        }
    ).to_csv(timing, index=False)
    result = fig10.make(csvs, models, timing)
    claims = result.table[result.table["kind"] == "claim"].set_index("claim")
    assert claims.loc["adatap3_is_outlier", "value"] == 1.0
    rows = []
    for csv, shift in zip(csvs, (0.0, -8.0, 0.1), strict=True):
        rows.append(csv.with_suffix(".npz"))
        final = float(pd.read_csv(csv)["pl"].iloc[-1])
        np.savez(rows[-1], epoch=n_epochs, pl=final + shift + np.linspace(-1.0, 1.0, 50))
    paired = fig10.make(csvs, models, timing, rows).table.set_index("claim")
    assert "2 paired stderr of the gap 0.000" in paired.loc["adatap3_is_outlier", "detail"]
    with pytest.raises(FigureError, match="one --last-rows file per curve CSV"):
        fig10.make(csvs, models, timing, rows[:2])
    assert claims.loc["time_ratio_batch_100", "value"] == 2000.0
    assert claims.loc["paper_strategies_not_run", "value"] == 3.0
    assert claims.loc["paper_strategies_not_run", "detail"] == (
        "TAP 10 it., TAP 100 it., adaTAP 100 it."
    )
    # a few epochs point by point with error bars; many as lines in +-1 stderr bands
    ax_pl = result.figure.axes[0]
    marked = n_epochs <= fig10.MARKED_EPOCHS
    bands = [c for c in ax_pl.collections if isinstance(c, PolyCollection)]
    assert len(ax_pl.containers) == (3 if marked else 0)
    assert len(bands) == (0 if marked else 3)
    deep_models, deep_csvs = [], []
    for name, sizes, gain in (("d2", (6, 4, 3), 0.01), ("d3", (6, 4, 3, 2), -0.01)):
        deep_models.append(_model_file(tmp_path, name, sizes))
        df = pd.DataFrame(
            {
                "epoch": [1, 2, 3],
                "tap_ll_train": [-0.3 + gain * e for e in (1, 2, 3)],
                "tap_ll_test": [-0.32 + gain * e for e in (1, 2, 3)],
                "tap_ll_train_stderr": 0.01,
                "tap_ll_test_stderr": 0.01,
            }
        )
        deep_csvs.append(tmp_path / f"{name}.csv")
        df.to_csv(deep_csvs[-1], index=False)
    result = fig11.make(deep_csvs, deep_models)
    c = result.table[result.table["kind"] == "claim"]
    rises = c[c["claim"] == "train_rises"].set_index("model")["value"]
    assert rises["d2"] == 1.0 and rises["d3"] == 0.0
    gap = c[c["claim"] == "train_test_gap"].set_index("model")["value"]
    assert gap["d2"] == pytest.approx(0.02)
    # the same figure through the command line: `figure fig11` is dispatched by stages.figures
    from tapmachine.pipeline import cli

    out = tmp_path / "cli"
    paths = [out / f"fig11.{ext}" for ext in ("png", "pdf", "csv")]
    argv = ["figure", "fig11", "--curves", *map(str, deep_csvs)]
    argv += ["--model-files", *map(str, deep_models)]
    argv += ["--png", str(paths[0]), "--pdf", str(paths[1]), "--csv", str(paths[2])]
    assert cli.main(argv) == 0
    drawn = pd.read_csv(paths[2])
    assert drawn[drawn["claim"] == "train_rises"].set_index("model")["value"]["d2"] == 1.0


@pytest.mark.slow
def test_deep_curve_is_a_likelihood_run_tagged_with_its_model(tmp_path, monkeypatch):
    """`deep-curve` logs to a run `{model}-curve` of experiment "likelihood" (step = epoch),
    tagged model_run_id = the training run, and adds nothing to the finished training run.
    `tapmachine track` rebuilds the training, curve and `deep-timing` runs from the files with
    the live runs' params, key for key and value for value."""
    import mlflow
    import numpy as np

    from tapmachine.io.data import Dataset, save_dataset
    from tapmachine.pipeline import cli
    from tapmachine.pipeline.stages import train as train_stage
    from tapmachine.pipeline.tracking import store as tracking

    manifest = tmp_path / "mlflow" / "experiments.json"
    tracking.init_store(manifest.parent, manifest)
    x = (np.random.default_rng(0).random((120, 16)) < 0.4).astype(np.uint8)
    data = tmp_path / "tiny.npz"
    save_dataset(
        Dataset(x[:100], np.zeros(100, int), x[100:], np.zeros(20, int), (4, 4), {}, "tiny"), data
    )
    spec = {
        "dataset": "tiny",
        "visible": {"prior": "bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 4}],
        "epochs": 2,
        "batch_size": 50,
        "eval": {"n_samples": 20},
    }
    results = tmp_path / "results" / "run"
    outdir = results / "models" / "tiny"
    train_stage.train_model("tiny", spec, data, outdir, seed=1, manifest=manifest)
    uri, train_exp = tracking.experiment_id(manifest, "train")
    client = mlflow.MlflowClient(uri)
    (train_run,) = client.search_runs([train_exp])
    before = client.get_run(train_run.info.run_id).data.metrics
    out = results / "deep" / "tiny" / "curve.csv"
    out.parent.mkdir(parents=True)
    args = ["deep-curve", "--model-file", str(outdir / "model.pt"), "--data", str(data)]
    args += ["--measure", "pl", "--n-train", "40", "--out", str(out), "--tracking", str(manifest)]
    last = results / "deep" / "tiny" / "last_epoch.npz"
    assert cli.main([*args, "--pl-sites", "5", "--last-rows", str(last)]) == 0
    with np.load(last) as rows:  # the last epoch's per-image values behind its mean
        assert int(rows["epoch"]) == 2 and rows["pl"].shape == (40,)
        assert float(rows["pl"].mean()) == pytest.approx(pd.read_csv(out)["pl"].iloc[-1])
    _, exp = tracking.experiment_id(manifest, "likelihood")
    (run,) = client.search_runs([exp])
    assert run.info.run_name == "tiny-curve"
    assert run.data.tags["model_run_id"] == train_run.info.run_id
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "pl")) == [1, 2]
    assert [r.info.run_id for r in client.search_runs([train_exp])] == [train_run.info.run_id]
    assert client.get_run(train_run.info.run_id).data.metrics == before
    timing = results / "deep" / "fig10_timing.csv"
    args = ["deep-timing", "--visible", "8", "--hidden", "4", "--batch-sizes", "2", "4"]
    args += ["--repeats", "1", "--tap-iterations", "2", "--adatap-iterations", "1"]
    assert cli.main([*args, "--out", str(timing), "--tracking", str(manifest)]) == 0

    def params(store_uri):
        c = mlflow.MlflowClient(store_uri)
        return {
            (e.name, r.info.run_name): r.data.params
            for e in c.search_experiments()
            for r in c.search_runs([e.experiment_id])
        }

    live = params(uri)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # set by the live runs' store
    fresh = tmp_path / "fresh"
    assert cli.main(["track", "--results", str(results), "--data", "", "--store", str(fresh)]) == 0
    replayed = params(f"sqlite:///{fresh}/mlflow.db")
    runs = [("train", "tiny"), ("likelihood", "tiny-curve"), ("benchmarks", "fig10/timing")]
    assert sorted(replayed) == sorted(runs)
    for run in runs:
        assert replayed[run] == live[run], run
    assert (
        live["train", "tiny"]["seed"] == "1" and live["likelihood", "tiny-curve"]["n_train"] == "40"
    )


def test_fig10_compares_the_strategies_at_the_epoch_asked(tmp_path):
    """adaTAP-3 lies below the others at epoch 2 and above them at epoch 5: the verdict is the
    compared epoch's; a curve without that epoch is refused; per-image rows of another epoch
    are not paired (the detail says so)."""
    models, csvs, rows = [], [], []
    epochs = np.arange(1, 6)
    curves_at = {("tap", 3): -10.0 + epochs, ("adatap", 10): -9.95 + epochs}
    curves_at[("adatap", 3)] = -16.0 + 3.0 * epochs
    for (inference, its), pl in curves_at.items():
        name = f"m_{inference}{its}"
        models.append(_model_file(tmp_path, name, (6, 4)))
        df = pd.DataFrame(
            {"epoch": epochs, "pl": pl, "pl_stderr": 0.1}
            | {"inference": inference, "train_iterations": its}
        )
        csvs.append(tmp_path / f"{name}.csv")
        df.to_csv(csvs[-1], index=False)
        rows.append(tmp_path / f"{name}.npz")
        np.savez(rows[-1], epoch=5, pl=pl[-1] + np.linspace(-1.0, 1.0, 20))
    timing = tmp_path / "t.csv"
    pd.DataFrame(
        {"batch_size": [100], "tap_seconds": [1e-3], "adatap_seconds": [2.0], "ratio": [2000.0]}
        | {"n_visible": 6, "n_hidden": 4, "threads": 1, "dtype": "float32"}
    ).to_csv(timing, index=False)

    def claims(**kw):
        return fig10.make(csvs, models, timing, **kw).table.set_index("claim")

    at_last, at_2 = claims(), claims(epoch=2)
    assert at_last.loc["adatap3_is_outlier", "value"] == 0.0
    assert at_2.loc["adatap3_is_outlier", "value"] == 1.0
    finals = at_2.loc["final_pl"]
    assert sorted(finals["value"]) == pytest.approx([-10.0, -8.0, -7.95])
    assert set(finals["epoch"]) == {2}
    paired = claims(last_rows=rows, epoch=2).loc["adatap3_is_outlier", "detail"]
    assert "per-image rows not at epoch 2" in paired and "paired" not in paired
    assert "2 paired stderr" in claims(last_rows=rows).loc["adatap3_is_outlier", "detail"]
    with pytest.raises(FigureError, match="no epoch 9 .epochs 1..5."):
        claims(epoch=9)
