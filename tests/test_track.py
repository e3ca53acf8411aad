"""`tapmachine track`: the files of results/ replayed into a store, idempotently."""

import json

import numpy as np
import pandas as pd
import pytest

from tapmachine.pipeline import cli, tracking


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


def _write(path, frame):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(frame).to_csv(path, index=False)
    return path


@pytest.fixture
def every_stage(results):
    """``results`` plus hand-made files of every other stage, as the workflow names them, and a
    model.pt whose training run never started (no run id)."""
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io import data
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.train import build_machine

    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 3}]}
    x = torch.zeros(7, 4, dtype=torch.float64)
    x_np = x.numpy().astype(np.uint8)
    toy = data.Dataset(x_np, np.zeros(7, int), x_np[:3], np.zeros(3, int), (2, 2), {}, "toy")
    data.save_dataset(toy, results.parent / "data" / "toy.npz")
    machine = build_machine(spec, x, 0.5, seeded_generator(0, "m"))
    ModelFile.from_machine(machine, "m", spec=spec, dataset="toy").save(
        results / "models" / "m" / "model.pt"
    )
    _write(
        results / "likelihood" / "m" / "scores.csv",
        {"model": ["m"] * 2, "epoch": [1, 2], "ais_ll_test": [-9.0, -8.0], "tap_ll_test": [-9, -7]},
    )
    _write(
        results / "deep" / "m" / "curve.csv",
        {"model": ["m"] * 2, "measure": ["pl"] * 2, "epoch": [1, 2], "pl_train": [-3.0, -2.5]},
    )
    _write(
        results / "deep" / "fig10_timing.csv",
        {"batch_size": [1, 10], "tap_seconds": [0.1, 0.2], "adatap_seconds": [0.3, 0.4]},
    )
    bsc = {"method": ["tap"] * 2, "p": [0.0, 0.2], "value": [1.0, 0.7], "se": [0.0, 0.05]}
    _write(results / "denoise" / "m" / "denoise_bsc.csv", {**bsc, "model": ["m"] * 2})
    _write(
        results / "denoise" / "m" / "denoise_real.csv",
        {"method": ["tap", "tap", "noisy", "noisy"], "sigma": [0.1, 0.3] * 2,
         "value": [0.01, 0.02, 0.04, 0.09], "se": [0.0] * 4, "psnr": [20.0, 17.0, 14.0, 10.5]},
    )  # fmt: skip
    _write(
        results / "denoise" / "baselines" / "bsc.csv",
        {"method": ["ope", "ope", "1nn", "1nn"], "p": [0.0, 0.2] * 2,
         "value": [1.0, 0.6, 0.9, 0.5], "se": [0.0] * 4},
    )  # fmt: skip
    _write(
        results / "ucd" / "fig1" / "mh_lmi.csv",
        {"d": [1, 1, 4, 4], "method": ["mh_lmi"] * 4, "rep": [0, 1, 0, 1],
         "tau": [1, 1, 1, 3], "T": [0, 2, 1, 1], "capped": [0, 0, 0, 1],
         "corrected": [0, 0, 1, 1], "search_capped": [0, 0, 0, 1]},
    )  # fmt: skip
    dbm = results / "ucd" / "dbm" / "binary_mnist" / "ucd_lmi"
    _write(dbm / "steps.csv", {"step": [1, 2], "grad_norm": [0.5, 0.4], "tau_mean": [1.0, 1.5]})
    (dbm / "epochs").mkdir()
    (dbm / "epochs" / "epoch_1.png").write_bytes(b"\x89PNG fake")
    (dbm / "score.json").write_text(json.dumps({"model": "ucd_lmi", "classifier_fid": 12.5}))
    (results / "ucd" / "classifier").mkdir()
    torch.save({"test_accuracy": 0.9}, results / "ucd" / "classifier" / "binary_mnist.pt")
    return results


def _store(store):
    import mlflow

    info = json.loads((store / "experiments.json").read_text())
    client = mlflow.MlflowClient(info["tracking_uri"])
    return client, info["experiments"]


def _by_name(client, exp_id):
    return {r.info.run_name: r for r in client.search_runs([exp_id])}


def test_every_stage_is_replayed_once_and_linked_to_its_training_run(every_stage, capsys):
    """Denoise, deep (Figs. 10-11), UCD (Fig. 1, DBM training, scores, classifier) are replayed
    under the live runs' names; a second replay adds nothing; derived runs carry the id of the
    replayed training run (model.pt had none and is left as it was)."""
    results = every_stage
    model_pt = results / "models" / "m" / "model.pt"
    before = model_pt.read_bytes()
    store = results.parent / "mlflow"
    args = ["track", "--results", str(results), "--store", str(store)]
    args += ["--data", str(results.parent / "data")]
    assert cli.main(args) == 0
    assert "14 runs replayed, 0 already in the store" in capsys.readouterr().out
    assert cli.main(args) == 0
    assert "0 runs replayed, 14 already in the store (" in capsys.readouterr().out
    client, exps = _store(store)
    counts = {e: len(client.search_runs([i])) for e, i in exps.items()}
    assert counts == {
        **{name: 0 for name in tracking.EXPERIMENTS},
        "data": 1,
        "train": 1,
        "harvest": 1,
        "figures": 1,
        "likelihood": 2,
        "benchmarks": 1,
        "denoise": 3,
        "ucd": 4,
    }
    assert model_pt.read_bytes() == before
    (train,) = client.search_runs([exps["train"]])
    assert train.inputs.dataset_inputs  # the machine was logged with its dataset
    derived = [
        ("harvest", "m/epoch_2"),
        ("likelihood", "m-epochs"),
        ("likelihood", "m-curve"),
        ("denoise", "m-bsc"),
        ("denoise", "m-gaussian"),
    ]
    for exp, name in derived:
        assert _by_name(client, exps[exp])[name].data.tags["model_run_id"] == train.info.run_id
    ucd = _by_name(client, exps["ucd"])
    assert set(ucd) == {
        "fig1_mh_lmi",
        "train_binary_mnist_ucd_lmi",
        "score_binary_mnist_ucd_lmi",
        "classifier_binary_mnist",
    }
    dbm_id = ucd["train_binary_mnist_ucd_lmi"].info.run_id
    assert ucd["score_binary_mnist_ucd_lmi"].data.tags["model_run_id"] == dbm_id
    assert ucd["score_binary_mnist_ucd_lmi"].data.metrics == {"classifier_fid": 12.5}
    assert ucd["classifier_binary_mnist"].data.metrics == {"test_accuracy": 0.9}
    assert [a.path for a in client.list_artifacts(dbm_id, "epochs")] == ["epochs/epoch_1.png"]

    def history(exp, name, key):
        run = _by_name(client, exps[exp])[name]
        return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))

    # the live runs' series: step = index of the noise level, epoch, dimension, batch size
    assert history("denoise", "m-bsc", "mcc") == [(0, 1.0), (1, 0.7)]
    assert history("denoise", "m-gaussian", "psnr.noisy") == [(0, 14.0), (1, 10.5)]
    assert history("denoise", "baselines-bsc", "mcc.1nn") == [(0, 0.9), (1, 0.5)]
    assert history("likelihood", "m-epochs", "ais_ll_test") == [(1, -9.0), (2, -8.0)]
    assert history("likelihood", "m-curve", "pl_train") == [(1, -3.0), (2, -2.5)]
    assert history("benchmarks", "fig10/timing", "adatap_seconds") == [(1, 0.3), (10, 0.4)]
    assert history("ucd", "fig1_mh_lmi", "tau_plus_T_mean") == [(1, 2.0), (4, 3.0)]
    assert history("ucd", "fig1_mh_lmi", "capped") == [(1, 0.0), (4, 1.0)]
    assert history("ucd", "fig1_mh_lmi", "corrected_fraction") == [(1, 0.0), (4, 1.0)]
    assert history("ucd", "fig1_mh_lmi", "search_capped") == [(1, 0.0), (4, 1.0)]
    assert history("ucd", "train_binary_mnist_ucd_lmi", "grad_norm") == [(1, 0.5), (2, 0.4)]


def test_params_of_every_stage_from_its_files(every_stage, monkeypatch, capsys):
    """Outputs written before their params were kept replay what the files hold (never a
    guessed setting); with the params files and model.pt's ``extras["run"]`` the live stages now
    write, the replayed params are exactly those."""
    import torch

    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.pipeline.stages.common import write_params
    from tapmachine.pipeline.stages.ucd_dbm import train_params
    from tapmachine.train import build_machine, run_params

    results = every_stage

    def replayed(store):
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # set by the last replay
        args = ["track", "--results", str(results), "--store", str(store)]
        assert cli.main([*args, "--data", str(results.parent / "data")]) == 0
        client, exps = _store(store)
        return {
            (exp, r.info.run_name): r.data.params
            for exp, i in exps.items()
            for r in client.search_runs([i])
        }

    got = replayed(results.parent / "before")
    model_pt = results / "models" / "m" / "model.pt"
    spec = ModelFile.load(model_pt).spec
    assert got["train", "m"] == tracking.flat_params({"model": "m", **spec, "sizes": [4, 3]})
    assert got["harvest", "m/epoch_2"] == {"model": "m", "epoch": "2"}
    assert got["likelihood", "m-epochs"] == {"model": "m", "epochs": "[1, 2]"}
    assert got["likelihood", "m-curve"] == {"model": "m", "measure": "pl"}
    assert got["benchmarks", "fig10/timing"] == {}
    assert got["ucd", "classifier_binary_mnist"] == {"dataset": "binary_mnist"}

    # the files the live stages write now: exactly their params come back
    record = ModelFile.load(model_pt)
    run = {"dataset_file": "d/toy.npz", "seed": 3, "device": "cpu", "dtype": "float64"}
    record.extras = {"run": run}
    record.save(model_pt)
    dbm = results / "ucd" / "dbm" / "binary_mnist" / "ucd_lmi"
    dbm_spec = {"method": "ucd_lmi", "hidden": [5], "ucd": {"gain": 0.7}}
    machine = build_machine(
        {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 5}]},
        torch.zeros(2, 4),
        0.1,
        seeded_generator(0, "dbm"),
    )
    dbm_run = {"seed": 1, "n_train": 60}
    ModelFile.from_machine(
        machine, "ucd_lmi", spec=dbm_spec, dataset="binary_mnist", extras={"run": dbm_run}
    ).save(dbm / "model.pt")
    kept = {
        ("harvest", "m/epoch_2"): (
            results / "solutions" / "m" / "epoch_2.npz",
            {"model": "m", "epoch": 2, "tol": 1e-12, "n_init": None},
        ),
        ("likelihood", "m-epochs"): (
            results / "likelihood" / "m" / "scores.csv",
            {"model": "m", "epochs": [1, 2], "ais": {"n_runs": 8}, "seed": 0},
        ),
        ("likelihood", "m-curve"): (
            results / "deep" / "m" / "curve.csv",
            {"model": "m", "measure": "pl", "pl_sites": None, "n_train": 40},
        ),
        ("benchmarks", "fig10/timing"): (
            results / "deep" / "fig10_timing.csv",
            {"batch_sizes": [1, 10], "repeats": 3, "out": "x.csv"},
        ),
        ("ucd", "classifier_binary_mnist"): (
            results / "ucd" / "classifier" / "binary_mnist.pt",
            {"dataset": "binary_mnist", "epochs": 2, "n_train": 5000},
        ),
    }
    for output, params in kept.values():
        write_params(output, params)
    got = replayed(results.parent / "after")
    for run_key, (_, params) in kept.items():
        assert got[run_key] == tracking.flat_params(params), run_key
    assert got["train", "m"] == tracking.flat_params(run_params("m", spec, [4, 3], run))
    assert got["train", "m"]["seed"] == "3" and got["train", "m"]["dataset_file"] == "d/toy.npz"
    want = train_params("ucd_lmi", "binary_mnist", dbm_spec, [4, 5], dbm_run)
    assert got["ucd", "train_binary_mnist_ucd_lmi"] == tracking.flat_params(want)
    assert got["ucd", "train_binary_mnist_ucd_lmi"]["n_train"] == "60"
    # datasets: as the data stage logs them, from the dataset itself
    assert got["data", "toy"] == tracking.flat_params(
        {"name": "toy", "train_shape": [7, 4], "test_shape": [3, 4], "dtype": "uint8",
         "train_label_counts": [7], "provenance": {}}
    )  # fmt: skip


def test_live_runs_of_a_model_whose_training_run_never_started_get_its_replayed_id(
    every_stage, monkeypatch, capsys
):
    """Training's tracking failed to start (model.pt: no run id), the store was back for the
    harvest: its live run has no model_run_id. The replay creates the training run and tags the
    live harvest run with that id, once."""
    results = every_stage
    store = results.parent / "mlflow"
    manifest = store / "experiments.json"
    tracking.init_store(store, manifest)
    monkeypatch.setenv(tracking.ENV_RUN_NAME, "tiny")
    with tracking.start_run(manifest, "harvest", "m/epoch_2", tags={"model": "m"}) as live:
        live.log_metrics({"n_unique": 2}, step=2)
    args = ["track", "--results", str(results), "--store", str(store), "--data", ""]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "present  harvest/m/epoch_2" in out and "1 retagged" in out
    client, exps = _store(store)
    (train,) = client.search_runs([exps["train"]])
    (harvest,) = client.search_runs([exps["harvest"]])
    assert harvest.info.run_id == live.run_id
    assert harvest.data.tags["model_run_id"] == train.info.run_id
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "0 runs replayed, 13 already in the store (" in out and "retagged" not in out


def _toy_model(path, visible, n_visible=16, name="m", dataset="toy", substitute=None):
    """A small RBM saved as model.pt (no training run id), with the given visible prior."""
    import torch

    from tapmachine.core.machine import RBM
    from tapmachine.core.priors import Bernoulli
    from tapmachine.io.modelfile import ModelFile

    g = torch.Generator().manual_seed(0)
    weights = 0.2 * torch.randn(n_visible, 5, generator=g)
    machine = RBM(weights, visible, Bernoulli(torch.zeros(5)))
    ModelFile.from_machine(
        machine, name, spec={"train_noise": None}, dataset=dataset, substitute=substitute
    ).save(path)
    return path


def _params(client, exp_id, filt=tracking.STAGE_RUNS):
    return {r.info.run_name: r.data.params for r in client.search_runs([exp_id], filt)}


def _run_names(client, exps) -> dict[str, tuple[str, str]]:
    """Run id -> (experiment, run name) of every run of a store."""
    return {
        r.info.run_id: (exp, r.info.run_name)
        for exp, i in exps.items()
        for r in client.search_runs([i])
    }


def _named_tags(run, names) -> dict:
    """A run's own tags (no ``mlflow.*``, no ``tapmachine.replayed``), every run id in them (a
    tag's value, or a value of a ``harvest_runs.<model>`` JSON) replaced by the (experiment,
    run name) it has in its store: the same for a live run and its replay in another store."""
    tags = {}
    for key, value in run.data.tags.items():
        if key.startswith("mlflow.") or key == "tapmachine.replayed":
            continue
        if key.startswith("harvest_runs."):
            tags[key] = {e: names.get(i, i) for e, i in json.loads(value).items()}
        else:
            tags[key] = names.get(value, value)
    return tags


def test_replayed_denoise_and_figure_runs_have_the_live_params(tmp_path, monkeypatch, capsys):
    """The denoise runs (TAP on both channels, baselines), a trained model's training and
    harvest runs, and the figure runs drawn from them (Figs. 5, 8, fig_denoise_real), logged
    live into one store, then replayed from their files alone into a fresh one: every run has
    the same params, key for key and value for value (the settings such as tol and damping are
    in no CSV: the params.json beside each output keeps them), and every figure run the same
    tags, each naming the replayed run of the one the live tag names (``train_run.<model>``,
    ``harvest_runs.<model>``, ``denoise_run.<label>``) and ``substitute.<model>``."""
    import tiny_harvest
    import torch

    from tapmachine.core.priors import Bernoulli, TruncatedGaussBernoulli
    from tapmachine.io import data
    from tapmachine.pipeline.stages import denoise as stage
    from tapmachine.pipeline.stages.harvest import harvest_epoch
    from tapmachine.pipeline.stages.train import train_model
    from tapmachine.tap_paper import harvest

    res = tmp_path / "results" / "tiny"
    g = np.random.default_rng(0)
    x = (g.random((80, 16)) < 0.3).astype(np.float32)
    binary = data.save_dataset(
        data.Dataset(x[:60], np.zeros(60, int), x[60:], np.zeros(20, int), (4, 4), {}, "toy"),
        tmp_path / "results" / "data" / "toy.npz",
    )
    xr = (g.integers(0, 256, (80, 16)) * (g.random((80, 16)) < 0.5) / 255.0).astype(np.float32)
    real = data.save_dataset(
        data.Dataset(xr[:60], np.zeros(60, int), xr[60:], np.zeros(20, int), (4, 4), {}, "toyr"),
        tmp_path / "results" / "data" / "toyr.npz",
    )
    (res / "models" / "m").mkdir(parents=True)
    (res / "models" / "r").mkdir()
    m_pt = _toy_model(res / "models" / "m" / "model.pt", Bernoulli(torch.full((16,), -0.8)))
    tgb = TruncatedGaussBernoulli(torch.full((16,), 0.5), torch.zeros(16), torch.full((16,), 4.0))
    r_pt = _toy_model(
        res / "models" / "r" / "model.pt", tgb, name="r", dataset="toyr", substitute="other faces"
    )

    live = tmp_path / "live"
    manifest = live / "experiments.json"
    tracking.init_store(live, manifest)
    monkeypatch.setenv(tracking.ENV_RUN_NAME, "tiny")
    den = res / "denoise"
    bsc = stage.bsc_settings('{"ps": [0.0, 0.1, 0.3], "n_images": 12, "tol": 1e-6, "k": 3}')
    stage.run_bsc(
        m_pt, binary, bsc, den / "m" / "denoise_bsc.csv", den / "m" / "denoise_bsc.npz",
        manifest=manifest,
    )  # fmt: skip
    stage.run_baselines(
        binary, bsc, den / "baselines" / "bsc.csv", den / "baselines" / "bsc.npz",
        manifest=manifest,
    )  # fmt: skip
    rs = stage.real_settings('{"sigmas": [0.1, 0.4], "n_images": 10, "damping": 0.3}')
    stage.run_real(
        r_pt, real, rs, den / "r" / "denoise_real.csv", den / "r" / "denoise_real.npz",
        manifest=manifest,
    )  # fmt: skip

    def draw(fig, *args):
        files = [f"--{e}={res / 'figures' / f'{fig}.{e}'}" for e in ("png", "pdf", "csv")]
        argv = ["figure", fig, *map(str, args), *files, "--tracking", str(manifest)]
        assert cli.main(argv) == 0

    draw("fig8", "--tap", den / "m" / "denoise_bsc.npz", "--model-files", m_pt,
         "--baselines", den / "baselines" / "bsc.npz", "--labels", "tap_m")  # fmt: skip
    draw("fig_denoise_real", "--results", den / "r" / "denoise_real.npz", "--model-file", r_pt)
    # a model trained and harvested at two epochs, Fig. 5 drawn from its harvests
    synth = tiny_harvest.synthetic_dataset(tmp_path / "results" / "data" / "synth.npz", n=60)
    tiny = res / "models" / "tiny"
    spec = {**tiny_harvest.SPEC, "epochs": 2, "eval": {"n_samples": 10}}
    train_model("tiny", spec, synth, tiny, dtype="float64", manifest=manifest)
    solutions = [res / "solutions" / "tiny" / f"epoch_{e}.npz" for e in (1, 2)]
    for e, npz in enumerate(solutions, 1):
        harvest_epoch(
            tiny / "model.pt", tiny / "checkpoints" / f"epoch_{e}.pt", e, synth,
            harvest.HarvestSettings(n_init=20), npz, npz.with_suffix(".csv"),
            manifest=manifest, dtype="float64", progress=False,
        )  # fmt: skip
    draw("fig5", "--solutions", *solutions)
    capsys.readouterr()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # set by logging the live machine

    rebuilt = tmp_path / "rebuilt"
    args = ["track", "--results", str(res), "--store", str(rebuilt), "--data", ""]
    assert cli.main(args) == 0
    assert "9 runs replayed, 0 already" in capsys.readouterr().out
    live_client, live_exps = _store(live)
    client, exps = _store(rebuilt)
    for exp in ("denoise", "figures", "train", "harvest"):
        want = _params(live_client, live_exps[exp])
        got = _params(client, exps[exp])
        assert (
            set(got)
            == set(want)
            == {
                "denoise": {"m-bsc", "baselines-bsc", "r-gaussian"},
                "figures": {"fig8", "fig_denoise_real", "fig5"},
                "train": {"tiny"},
                "harvest": {"tiny/epoch_1", "tiny/epoch_2"},
            }[exp]
        )
        for name in want:
            assert set(got[name].items()) == set(want[name].items()), (exp, name)
    live_figs = _by_name(live_client, live_exps["figures"])
    live_names, names = _run_names(live_client, live_exps), _run_names(client, exps)
    replayed_figs = _by_name(client, exps["figures"])
    for name, run in replayed_figs.items():
        assert _named_tags(run, names) == _named_tags(live_figs[name], live_names), name
    # the links are there, each to the replayed run of the file the figure was drawn from
    links = {name: _named_tags(run, names) for name, run in replayed_figs.items()}
    assert links["fig5"]["harvest_runs.tiny"] == {
        "1": ("harvest", "tiny/epoch_1"),
        "2": ("harvest", "tiny/epoch_2"),
    }
    assert links["fig5"]["train_run.tiny"] == ("train", "tiny")
    assert links["fig8"]["denoise_run.m"] == ("denoise", "m-bsc")
    assert links["fig8"]["denoise_run.baselines"] == ("denoise", "baselines-bsc")
    assert links["fig_denoise_real"]["denoise_run.r"] == ("denoise", "r-gaussian")
    assert links["fig_denoise_real"]["substitute.r"] == "other faces"
    # into the live store: every run is there and every live link kept (none corrected)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    capsys.readouterr()
    assert cli.main(["track", "--results", str(res), "--store", str(live), "--data", ""]) == 0
    assert "0 runs replayed, 9 already in the store (" in capsys.readouterr().out
    # the same tags too: a live denoise run names its training run by model_run_id alone

    def user_tags(run):
        return {k for k in run.data.tags if not k.startswith("mlflow.")} - {"tapmachine.replayed"}

    live_denoise = _by_name(live_client, live_exps["denoise"])
    for name, run in _by_name(client, exps["denoise"]).items():
        assert user_tags(run) == user_tags(live_denoise[name]), name
    assert _params(client, exps["denoise"])["m-bsc"]["tol"] == "1e-06"
    assert _params(client, exps["denoise"])["baselines-bsc"]["k"] == "3"
    assert _params(client, exps["denoise"])["r-gaussian"]["damping"] == "0.3"
    assert _params(client, exps["figures"])["fig8"]["ps"] == "[0.0, 0.1, 0.3]"

    # Outputs written before their params.json: an npz of the time that kept the params inside
    # (``tracked_params``, JSON of the flat params as logged) replays those; an older npz only
    # what the CSV holds, each value as live.
    npz = den / "baselines" / "bsc.npz"
    params_json = npz.with_suffix(".params.json")
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    assert "tracked_params" not in arrays  # the params are in params.json only
    kept = json.dumps(json.loads(params_json.read_text()), sort_keys=True)
    params_json.unlink()
    np.savez(npz, **arrays, tracked_params=np.asarray(kept))
    want = _params(live_client, live_exps["denoise"])["baselines-bsc"]
    for store, tracked in (("kept", True), ("older", False)):
        if not tracked:
            np.savez(npz, **arrays)
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # set by the last replay
        argv = ["track", "--results", str(res), "--store", str(tmp_path / store), "--data", ""]
        assert cli.main(argv) == 0
        client, exps = _store(tmp_path / store)
        got = _params(client, exps["denoise"])["baselines-bsc"]
        if tracked:
            assert got == want
        else:
            assert set(got) == {"ps", "n_images"} and set(got.items()) <= set(want.items())


def test_a_wrong_model_run_id_is_corrected_and_the_training_run_left_alone(
    every_stage, monkeypatch, capsys
):
    """Derived runs whose model_run_id names no training run of their model and config run in
    this store (an id the store never had, a run of another experiment, a training run deleted
    and replayed anew) get the store's training run; one naming another FINISHED training run
    of the same model keeps it. The training run's params, metrics and tags are only read."""
    from tapmachine.io.modelfile import ModelFile

    results = every_stage
    store = results.parent / "mlflow"
    args = ["track", "--results", str(results), "--store", str(store), "--data", ""]
    assert cli.main(args) == 0
    client, exps = _store(store)
    derived = {"harvest": "m/epoch_2", "likelihood": "m-epochs", "denoise": "m-bsc"}
    runs = {exp: _by_name(client, exps[exp])[name] for exp, name in derived.items()}
    (train,) = client.search_runs([exps["train"]])
    client.set_tag(runs["harvest"].info.run_id, "model_run_id", "0123456789abcdef0123456789abcdef")
    (other,) = client.search_runs([exps["ucd"]], "attributes.run_name = 'fig1_mh_lmi'")
    client.set_tag(runs["likelihood"].info.run_id, "model_run_id", other.info.run_id)
    # a second FINISHED training run of m in this config run (say, the model retrained live)
    manifest = store / "experiments.json"
    monkeypatch.setenv(tracking.ENV_RUN_NAME, "tiny")
    with tracking.start_run(manifest, "train", "m") as retrained:
        retrained.log_metrics({"tap_ll": -0.1}, step=1)
    client.set_tag(runs["denoise"].info.run_id, "model_run_id", retrained.run_id)
    # model.pt names the first: wrong links go to it, not to the newer one
    model_pt = results / "models" / "m" / "model.pt"
    record = ModelFile.load(model_pt)
    record.mlflow_run_id = train.info.run_id
    record.save(model_pt)
    before = client.get_run(train.info.run_id).data
    capsys.readouterr()

    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "0 runs replayed, 13 already in the store, 2 corrected (" in out, out
    assert "corrected harvest/m/epoch_2: model_run_id = " in out
    tag = {exp: client.get_run(r.info.run_id).data.tags["model_run_id"] for exp, r in runs.items()}
    assert tag == {
        "harvest": train.info.run_id,
        "likelihood": train.info.run_id,
        "denoise": retrained.run_id,
    }
    after = client.get_run(train.info.run_id).data
    assert (after.params, after.metrics, after.tags) == (before.params, before.metrics, before.tags)
    assert cli.main(args) == 0
    assert "corrected" not in capsys.readouterr().out

    # The training runs deleted (a store cleaned up by hand): the replay makes one anew and every
    # derived run that pointed at a deleted one now points at the new one.
    client.delete_run(train.info.run_id)
    client.delete_run(retrained.run_id)
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "1 runs replayed, 12 already in the store, 5 corrected (" in out, out
    (new_train,) = client.search_runs([exps["train"]])
    assert new_train.info.run_id != train.info.run_id
    for exp, name in [*derived.items(), ("likelihood", "m-curve"), ("denoise", "m-gaussian")]:
        run = _by_name(client, exps[exp])[name]
        assert run.data.tags["model_run_id"] == new_train.info.run_id, (exp, name)


def test_figure_runs_are_linked_to_the_training_runs_of_their_models(every_stage, capsys):
    """A replayed figure run carries the live run's models tag and train_run.<model> = the
    store's training run; a wrong train_run.<model> is corrected, a missing one (the live run
    had no id to give, as the UCD tables) is left missing."""
    from tapmachine.figures.common import FigureResult, ModelInfo
    from tapmachine.pipeline.stages.figures import write_params

    results = every_stage
    # Fig. 3 drawn from m, its params.json written as the figure stage writes it
    write_params(results / "figures" / "fig3.csv", FigureResult(None, None, [ModelInfo("m", "")]))
    store = results.parent / "mlflow"
    args = ["track", "--results", str(results), "--store", str(store), "--data", ""]
    assert cli.main(args) == 0
    client, exps = _store(store)
    (train,) = client.search_runs([exps["train"]])
    (fig3,) = client.search_runs([exps["figures"]])
    assert fig3.data.tags["train_run.m"] == train.info.run_id
    assert fig3.data.tags["models"] == "m" and fig3.data.params == {"models": '["m"]'}
    client.set_tag(fig3.info.run_id, "train_run.m", "no-such-run")
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "0 runs replayed, 13 already in the store, 1 corrected (" in capsys.readouterr().out
    assert client.get_run(fig3.info.run_id).data.tags["train_run.m"] == train.info.run_id
    client.delete_tag(fig3.info.run_id, "train_run.m")
    assert cli.main(args) == 0
    assert "0 runs replayed, 13 already in the store (" in capsys.readouterr().out
    assert "train_run.m" not in client.get_run(fig3.info.run_id).data.tags


def test_replayed_ucd_fig1_run_has_the_live_params(tmp_path, monkeypatch, capsys):
    """UCD Fig. 1's run of one method, live and replayed from its CSV and params.json: the same
    params (caps, units, gain, seed ... are in no CSV). The per-d `seconds`, a timing, is the
    only metric the replay lacks."""
    from tapmachine.pipeline.stages.ucd import run_steps

    res = tmp_path / "results" / "tiny"
    out = res / "ucd" / "fig1" / "mh_lmi.csv"
    live = tmp_path / "live"
    manifest = live / "experiments.json"
    tracking.init_store(live, manifest)
    monkeypatch.setenv(tracking.ENV_RUN_NAME, "tiny")
    run_steps("mh_lmi", [3, 2], 4, 50, 200, "spin", "logistic", 0.7, 5, out, manifest=manifest)
    rebuilt = tmp_path / "rebuilt"
    assert cli.main(["track", "--results", str(res), "--store", str(rebuilt), "--data", ""]) == 0
    assert "1 runs replayed, 0 already" in capsys.readouterr().out
    live_client, live_exps = _store(live)
    (want,) = _by_name(live_client, live_exps["ucd"]).values()
    client, exps = _store(rebuilt)
    (got,) = _by_name(client, exps["ucd"]).values()
    assert got.info.run_name == want.info.run_name == "fig1_mh_lmi"
    assert set(got.data.params.items()) == set(want.data.params.items())
    assert got.data.params["gain"] == "0.7" and got.data.params["dims"] == "[3, 2]"
    assert set(want.data.metrics) - set(got.data.metrics) == {"seconds"}

    # A CSV written before its params.json: what the CSV holds, each value as live.
    (res / "ucd" / "fig1" / "mh_lmi.params.json").unlink()
    older = tmp_path / "older"
    assert cli.main(["track", "--results", str(res), "--store", str(older), "--data", ""]) == 0
    client, exps = _store(older)
    (got,) = _by_name(client, exps["ucd"]).values()
    assert set(got.data.params) == {"method", "dims", "reps"}
    assert set(got.data.params.items()) <= set(want.data.params.items())


def test_dataset_params_are_the_same_before_saving_and_read_back(tmp_path):
    """A dataset's run params as the data stage logs them and as the replay rebuilds them from
    the .npz: the same strings, also for a dict inside a list of the provenance (the .npz keeps
    it as JSON with sorted keys)."""
    from tapmachine.io import data
    from tapmachine.pipeline.stages.data import dataset_params

    x = np.zeros((5, 4), np.uint8)
    provenance = {"transforms": [{"name": "threshold", "level": 0.5}], "parent": {"b": 1, "a": 2}}
    ds = data.Dataset(x, np.arange(5) % 2, x[:2], np.zeros(2, int), (2, 2), provenance, "toy")
    live = tracking.flat_params(dataset_params(ds))
    back = tracking.flat_params(
        dataset_params(data.load_dataset(data.save_dataset(ds, tmp_path / "t.npz")))
    )
    assert live == back
    assert live["provenance.transforms"] == '[{"level": 0.5, "name": "threshold"}]'
    assert live["train_label_counts"] == "[3, 2]" and live["train_shape"] == "[5, 4]"


def test_replayed_dataset_runs_have_the_live_params_and_metrics(tmp_path, monkeypatch, capsys):
    """A dataset written by the data stage and the binary CIFAR-10 of ``ucd cifar10``, logged
    live, then replayed from the data folder alone: the same runs (``data/<name>``,
    ``ucd/data_binary_cifar10``, no ``data`` run of it) with the same params, metrics (the
    dataset's ``mean`` over its first 10,000 training images included) and tags."""
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
    live = tmp_path / "live"
    manifest = live / "experiments.json"
    tracking.init_store(live, manifest)
    monkeypatch.setenv(tracking.ENV_RUN_NAME, "tiny")
    save_and_track(toy, folder / "toy.npz", manifest)
    # The stage reads an md5-verified official archive, which a test cannot have (it rejects a
    # fabricated one unopened): its loader gives six images of random channel values here.
    images = (g.integers(0, 256, (6, 3072)).astype(np.uint8), np.arange(6) % 10)
    monkeypatch.setattr(cifar, "load_cifar10", lambda archive: (*images, *images))
    archive = tmp_path / "cifar-10-python.tar.gz"
    ucd_dbm.cifar10(archive, folder / "binary_cifar10.npz", manifest)
    (tmp_path / "results" / "tiny").mkdir()
    capsys.readouterr()

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rebuilt = tmp_path / "rebuilt"
    args = ["track", "--results", str(tmp_path / "results" / "tiny"), "--store", str(rebuilt)]
    assert cli.main([*args, "--data", str(folder)]) == 0
    assert "2 runs replayed, 0 already" in capsys.readouterr().out
    live_client, live_exps = _store(live)
    client, exps = _store(rebuilt)
    for exp, names in (("data", {"toy"}), ("ucd", {"data_binary_cifar10"})):
        want = _by_name(live_client, live_exps[exp])
        got = _by_name(client, exps[exp])
        assert set(got) == set(want) == names, exp
        for name in names:
            g_run, w_run = got[name].data, want[name].data
            assert g_run.params == w_run.params, name
            assert g_run.metrics == w_run.metrics, name
            assert _named_tags(got[name], {}) == _named_tags(want[name], {}), name
    replayed = _by_name(client, exps["data"])["toy"].data.metrics
    assert replayed == {"n_train": 10_030.0, "n_test": 10.0, "mean": float(x[:10_000].mean())}
    assert replayed["mean"] != float(x[:10_030].mean())
    cifar_run = _by_name(client, exps["ucd"])["data_binary_cifar10"].data
    assert cifar_run.params == {"archive": str(archive)} and cifar_run.metrics == {}
