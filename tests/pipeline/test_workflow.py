"""The real Snakemake engine on a tiny config: data -> training -> harvest, likelihoods ->
every figure, tracked in MLflow."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from full_configs import whole_config
from mlflow_runs import dump
from tiny_workflow import TINY, snakemake

from tapmachine.pipeline.tracking.store import STAGE_RUNS

ROOT = Path(__file__).resolve().parents[2]
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]

pytestmark = pytest.mark.workflow

DENOISE_FIGURES = ["fig8", "fig9", "fig_denoise_real"]
UCD_FIGURES = ["ucd_samples", "ucd_completion", "ucd_table1", "ucd_table2"]
FIGURES = [
    "fig3",
    "fig4",
    "fig5",
    "fig6",
    "fig7",
    "fig12",
    "likelihood_table",
    "ucd_fig1",
    *UCD_FIGURES,
    *DENOISE_FIGURES,
]
#: The classifier of the classifier FID on 5,000 binary-MNIST images, 2 epochs: at least this
#: test accuracy (measured 0.852 with 8 and 16 channels; 0.992 with the default config's CNN).
CLASSIFIER_FLOOR = 0.75


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    (workdir / "config.yaml").write_text(yaml.safe_dump(TINY))
    result = snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return workdir


def test_data_stage_writes_verified_datasets(finished_run):
    from tapmachine.io.data import load_dataset

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
    # logs and timings per config run, beside results/default (the datasets' in logs/data)
    assert (finished_run / "logs" / "default" / "train" / "tiny.log").stat().st_size > 0
    assert (finished_run / "benchmarks" / "default" / "train" / "tiny.tsv").exists()
    assert (finished_run / "logs" / "data" / "fetch_mnist.log").exists()
    for folder in ("logs", "benchmarks"):
        tops = {
            p.relative_to(finished_run / folder).parts[0]
            for p in (finished_run / folder).rglob("*.*")
        }
        assert tops <= {"default", "data", "tracking_init.log", "tracking_init.tsv"}, tops
    client = mlflow.MlflowClient(f"sqlite:///{finished_run}/results/mlflow/mlflow.db")
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    data_runs = client.search_runs([experiments["data"]], STAGE_RUNS)
    assert sorted(r.info.run_name for r in data_runs) == sorted(
        ["mnist", "fashion_mnist", "faces", *TINY["data"]["derived"]]
    )
    assert all(r.info.status == "FINISHED" for r in data_runs)
    mnist_run = next(r for r in data_runs if r.info.run_name == "mnist")
    assert "montage" in str([a.path for a in client.list_artifacts(mnist_run.info.run_id)])
    train_runs = client.search_runs([experiments["train"]], STAGE_RUNS)
    assert sorted(r.info.run_name for r in train_runs) == sorted(TINY["models"])
    (train_run,) = [r for r in train_runs if r.info.run_name == "tiny"]
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
    assert len(client.search_runs([experiments["harvest"]], STAGE_RUNS)) == 3
    ucd_runs = client.search_runs([experiments["ucd"]], STAGE_RUNS)
    dbms = ["ucd_lmi", "pcd", "no_centering"]
    assert sorted(r.info.run_name for r in ucd_runs) == sorted(
        ["fig1_gibbs", "fig1_gibbs_lmi", "fig1_mh", "fig1_mh_lmi"]
        + [f"train_binary_mnist_{m}" for m in dbms]
        + [f"score_binary_mnist_{m}" for m in dbms]
        + ["classifier_binary_mnist"]
    )
    (train_run,) = client.search_runs(
        [experiments["train"]], f"{STAGE_RUNS} and attributes.run_name = 'tiny'"
    )
    # Harvests are runs of their own, tagged with the training run, step = epoch; nothing was
    # written into the finished training run.
    harvests = client.search_runs([experiments["harvest"]], f"{STAGE_RUNS} and tags.model = 'tiny'")
    assert {r.data.tags["model_run_id"] for r in harvests} == {train_run.info.run_id}
    steps = [m.step for r in harvests for m in client.get_metric_history(r.info.run_id, "n_unique")]
    assert sorted(steps) == [1, 2]
    assert not [k for k in train_run.data.metrics if k.startswith(("harvest_", "eval.", "final."))]
    scores = client.search_runs([experiments["likelihood"]], STAGE_RUNS)
    assert {r.data.tags["model_run_id"] for r in scores} == {train_run.info.run_id}
    check_solution_figures(results / "figures", TINY)


def check_solution_figures(figures, config):
    """Figs. 5-7 of several models: each model's rows at its own epochs (the model's per_model
    ones, else the figure's, else every harvested one), every verdict of a model named by it."""
    import pandas as pd

    for fig in ("fig5", "fig6", "fig7"):
        spec = config["figures"][fig]
        table = pd.read_csv(figures / f"{fig}.csv")
        claims = table[table["kind"] == "claim"]
        assert list(dict.fromkeys(claims["model"].dropna())) == spec["models"], fig
        for model in spec["models"]:
            own = (spec.get("per_model") or {}).get(model, {})
            epochs = own.get("epochs", spec.get("epochs")) or config["harvest"][model]["epochs"]
            rows = claims[claims["model"] == model]
            name = "n_solutions" if fig == "fig7" else "n_unique"
            assert sorted(rows[rows["claim"] == name]["epoch"].astype(int)) == epochs, (fig, model)
            # each model's own verdict row (fig7's is per epoch; with one solution, no verdict)
            verdict = rows[rows["claim"] == VERDICT_ROWS[fig]]
            assert len(verdict) == (len(epochs) if fig == "fig7" else 1), (fig, model)
        verdicts = claims[claims["held"].isin(["held", "not held"])]
        assert verdicts["model"].isin(spec["models"]).all(), fig


#: A row of each of Figs. 5-7 that carries a verdict on the paper's claim.
VERDICT_ROWS = {
    "fig5": "n_unique_grows",
    "fig6": "correlation_falls_first_to_last",
    "fig7": "solutions_in_dense_regions",
}


def test_ucd_dbm_training_scores_and_classifier_floor(finished_run):
    import pandas as pd
    import torch

    results = finished_run / "results" / "default"
    blob = torch.load(results / "ucd" / "classifier" / "binary_mnist.pt", weights_only=True)
    assert blob["test_accuracy"] >= CLASSIFIER_FLOOR
    for model in ("ucd_lmi", "pcd", "no_centering"):
        steps = pd.read_csv(results / "ucd" / "dbm" / "binary_mnist" / model / "steps.csv")
        assert steps["step"].tolist() == list(range(1, 9))  # 400 rows / batch 50
        assert np.isfinite(steps["grad_norm"]).all()
        if model != "pcd":
            assert (steps["tau_mean"] >= 1).all() and (steps["T_mean"] >= 1).all()
        score = json.loads(
            (results / "ucd" / "dbm" / "binary_mnist" / model / "score.json").read_text()
        )
        assert np.isfinite(score["classifier_fid"]) and score["classifier_fid"] >= 0
        assert score["classifier_accuracy"] == blob["test_accuracy"]
        assert np.isfinite(score["ais_ll"]) and score["ais_ll"] < 0  # a log-probability of v
        assert score["ais_runs"] == 8 and score["ais_betas"] == 50
    table = pd.read_csv(results / "figures" / "ucd_table1.csv")
    drawn = table[table["kind"] == "drawn"].set_index("model")
    assert sorted(drawn.index) == ["floor: test halves", "pcd", "ucd_lmi"]
    models = drawn.loc[["pcd", "ucd_lmi"]]
    assert models["ais_ll_lower_bound"].notna().all()
    # the test set against itself is the floor no model's samples reach
    assert (drawn.loc["floor: test halves", "classifier_fid"] < models["classifier_fid"]).all()
    # its halves are taken in the run's one random order of the test rows, not in file order
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.io import data
    from tapmachine.ucd import fid
    from tapmachine.ucd.fid import load_classifier

    x_test = torch.as_tensor(
        data.load_dataset(finished_run / "results" / "data" / "binary_mnist.npz").x_test,
        dtype=torch.float32,
    )
    order = torch.randperm(
        len(x_test), generator=seeded_generator(TINY["seed"], "ucd_score", "order")
    )
    half = min(TINY["ucd"]["dbm"]["fid_samples"], len(x_test) // 2)
    net, _ = load_classifier(results / "ucd" / "classifier" / "binary_mnist.pt")
    shuffled = x_test[order]
    floor = fid.frechet_distance(net, shuffled[:half], shuffled[half : 2 * half])
    assert score["fid_floor"] == pytest.approx(floor, rel=1e-6)
    assert floor != pytest.approx(fid.frechet_distance(net, x_test[:half], x_test[half : 2 * half]))
    claims = set(table.loc[table["kind"] == "claim", "claim"])
    assert "rank_agreement_kendall_fid_vs_ais_ll" in claims
    # each score is a run of its own, tagged with the DBM's training run
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{finished_run}/results/mlflow/mlflow.db")
    exp = client.get_experiment_by_name("ucd").experiment_id
    runs = {r.info.run_name: r for r in client.search_runs([exp], STAGE_RUNS)}
    for model in ("ucd_lmi", "pcd", "no_centering"):
        train = runs[f"train_binary_mnist_{model}"].info.run_id
        assert runs[f"score_binary_mnist_{model}"].data.tags["model_run_id"] == train


def test_denoise_figures_and_runs(finished_run):
    import mlflow
    import pandas as pd

    results = finished_run / "results" / "default"
    fig8 = pd.read_csv(results / "figures" / "fig8.csv")
    curves = fig8[fig8["kind"] != "claim"]
    assert {"method", "p", "mcc", "mcc_se"} <= set(fig8.columns)
    assert sorted(curves["method"].unique()) == ["1nn", "ope", "tap_tiny"]
    for _, curve in curves.groupby("method"):
        assert sorted(curve["p"]) == TINY["denoise"]["fig8"]["ps"]
    assert curves["mcc"].between(-1, 1).all() and (curves["mcc_se"] >= 0).all()
    # p = 0: the OPE and the TAP denoiser return the observation, the clean image (MCC 1).
    clean = curves[(curves["p"] == 0) & curves["method"].isin(["ope", "tap_tiny"])]
    np.testing.assert_allclose(clean["mcc"], 1.0)
    with np.load(results / "denoise" / "tiny" / "denoise_bsc.npz") as npz:
        assert npz["mcc"].shape == (4, TINY["denoise"]["fig8"]["n_images"])
    real = pd.read_csv(results / "figures" / "fig_denoise_real.csv")
    assert (real["kind"] == "claim").any()
    # Fig. 9 is judged by the FID classifier over every denoised digit, at each p in (0, 0.5).
    fig9 = pd.read_csv(results / "figures" / "fig9.csv")
    shares = fig9[fig9["claim"] == "true_label_share"]
    assert sorted(shares["model"].unique()) == ["1nn", "ope", "tap_tiny"]
    assert len(shares) == 3 * 2 and shares["value"].between(0, 1).all()
    assert fig9[fig9["claim"] == "digit_structure_kept"]["held"].isin(["held", "not held"]).all()
    client = mlflow.MlflowClient(f"sqlite:///{finished_run}/results/mlflow/mlflow.db")
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    runs = client.search_runs([experiments["denoise"]], STAGE_RUNS)
    # One run per denoised model (TAP on the BSC, TAP on the Gaussian channel) and the baselines.
    assert sorted(r.info.run_name for r in runs) == [
        "baselines-bsc",
        "tiny-bsc",
        "tiny_real-gaussian",
    ]
    assert all(r.info.status == "FINISHED" for r in runs)
    tap_run = next(r for r in runs if r.info.run_name == "tiny-bsc")
    history = client.get_metric_history(tap_run.info.run_id, "mcc")
    assert sorted(m.step for m in history) == [0, 1, 2, 3]
    (train_run,) = client.search_runs(
        [experiments["train"]], f"{STAGE_RUNS} and attributes.run_name = 'tiny'"
    )
    assert tap_run.data.tags["model_run_id"] == train_run.info.run_id
    # The figures are runs of their own naming the denoise runs; the denoise runs are untouched.
    assert not client.list_artifacts(tap_run.info.run_id, "figures")
    (fig8,) = client.search_runs(
        [experiments["figures"]], f"{STAGE_RUNS} and attributes.run_name = 'fig8'"
    )
    assert fig8.data.tags["denoise_run.tiny"] == tap_run.info.run_id
    baselines = next(r for r in runs if r.info.run_name == "baselines-bsc")
    assert fig8.data.tags["denoise_run.baselines"] == baselines.info.run_id


def test_replay_rebuilds_exactly_the_live_runs(finished_run, tmp_path, capsys):
    """`tapmachine track` on the run records of the tiny DAG (datasets, training, harvest,
    likelihood, UCD-LMI, denoising, figures): into a fresh store it makes the same runs as the
    live jobs did, with the same params, tags (each run id naming the run of the same name),
    metrics by step and artifacts; into (a copy of) the live store it adds none."""

    from tapmachine.pipeline import cli

    live = finished_run / "results" / "mlflow"
    results = finished_run / "results" / "default"
    data = finished_run / "results" / "data"
    assert not list(finished_run.glob("results/**/*.params.json"))

    expected = dump(f"sqlite:///{live}/mlflow.db")
    experiments = {experiment for experiment, _ in expected}
    assert {"data", "train", "harvest", "likelihood", "denoise", "ucd", "figures"} <= experiments
    fresh = tmp_path / "fresh"
    args = ["track", "--results", str(results), "--data", str(data), "--store", str(fresh)]
    assert cli.main(args) == 0
    replayed = dump(f"sqlite:///{fresh}/mlflow.db")
    assert replayed.keys() == expected.keys()
    differ = [key for key in expected if replayed[key] != expected[key]]
    assert not differ, [(key, expected[key], replayed[key]) for key in differ]
    figures = {name: tags for (exp, name), (_, tags, *_) in replayed.items() if exp == "figures"}
    links = figures["fig5"]["harvest_runs.tiny"]
    assert links == {"1": ("harvest", "tiny/epoch_1"), "2": ("harvest", "tiny/epoch_2")}
    assert figures["fig5"]["harvest_runs.tiny_real"] == {"1": ("harvest", "tiny_real/epoch_1")}
    assert figures["fig8"]["denoise_run.baselines"] == ("denoise", "baselines-bsc")
    assert figures["fig_denoise_real"]["denoise_run.tiny_real"] == ("denoise", "tiny_real-gaussian")
    assert figures["ucd_table1"]["train_run.binary_mnist/ucd_lmi"] == (
        "ucd",
        "train_binary_mnist_ucd_lmi",
    )
    derived = [
        tags
        for (exp, _), (_, tags, *_) in replayed.items()
        if exp in ("harvest", "likelihood", "denoise") and "model" in tags
    ]
    # harvests of tiny's epochs 1, 2 and tiny_real's 1; tiny-epochs, -final, -exact (Fig. 3's
    # exact curve); two TAP denoising runs
    assert len(derived) == 3 + 3 + 2
    for tags in derived:
        assert tags["model_run_id"] == ("train", tags["model"])
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(live / "mlflow.db", copy / "mlflow.db")
    capsys.readouterr()
    args = ["track", "--results", str(results), "--data", str(data), "--store", str(copy)]
    assert cli.main(args) == 0
    assert f"0 runs replayed, {len(expected)} already in the store (" in capsys.readouterr().out


def test_a_harvest_asks_memory_by_its_data_and_covers_what_it_used(finished_run):
    """Each harvest job asks for memory from its starts and the units of its data and machine
    (read once the data exist), more than its benchmark's peak resident set."""
    import re

    import pandas as pd

    from tapmachine.io.data import load_dataset
    from tapmachine.pipeline.job_resources import memory_mb

    result = snakemake(finished_run, "--cores", "2", "-n", "--forcerun", "harvest_solutions")
    assert result.returncode == 0, result.stderr[-3000:]
    faces = load_dataset(finished_run / "results" / "data" / "real_faces.npz").x_train
    expected = {
        "tiny": memory_mb(60, 784 + 8),
        "tiny_real": memory_mb(min(20, faces.shape[0]), faces.shape[1] + 8),
    }
    asked = {}
    for block in re.split(r"\n\[[^\]]+\]\n", result.stdout + result.stderr):
        if block.startswith("rule harvest_solutions:"):
            model, epoch = re.search(r"wildcards: model=(\w+), epoch=(\d+)", block).groups()
            mem = int(re.search(r"mem_mb=(\d+)", block)[1])
            assert int(re.search(r"runtime=(\d+)", block)[1]) == 60  # a first attempt
            asked[model, epoch] = mem
    assert sorted(asked) == [("tiny", "1"), ("tiny", "2"), ("tiny_real", "1")]
    for (model, epoch), mem in asked.items():
        assert mem == expected[model]
        bench = finished_run / "benchmarks" / "default" / "harvest" / model / f"epoch_{epoch}.tsv"
        peak = float(pd.read_csv(bench, sep="\t")["max_rss"].iloc[0])
        assert 0 < peak < mem, (model, epoch, peak, mem)


def test_rerun_is_a_no_op(finished_run):
    result = snakemake(finished_run, "--cores", "2", "-n")
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr


def test_recreating_the_tracking_store_reruns_nothing(finished_run):
    """The store's manifest is an ancient() input of every rule. Missing with every result up to
    date, nothing runs. Missing when a job is to run, its rule would run and every rule after it:
    a dry run makes nothing, a run makes the store in onstart and stops before any job, and the
    next run makes only what was missing (as after benchmarks/run.py rewriting the manifest)."""
    results = finished_run / "results"
    store = results / "mlflow"
    table = results / "default" / "figures" / "likelihood_table.pdf"
    model = results / "default" / "models" / "tiny" / "model.pt"
    stamp = model.stat().st_mtime_ns
    store.rename(results / "mlflow.moved")
    try:
        idle = snakemake(finished_run, "--cores", "2")
        assert idle.returncode == 0, idle.stderr[-3000:]
        assert "Nothing to be done" in idle.stdout + idle.stderr
        assert not store.exists()
        table.rename(results / "likelihood_table.pdf.moved")
        dry = snakemake(finished_run, "--cores", "2", "-n")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert "no tracking store" in dry.stderr
        assert not store.exists()  # nothing made while parsing
        stopped = snakemake(finished_run, "--cores", "2")
        assert stopped.returncode != 0
        assert "made the store now and stopped before any job" in stopped.stdout + stopped.stderr
        assert (store / "experiments.json").exists() and not table.exists()
        again = snakemake(finished_run, "--cores", "2")
        assert again.returncode == 0, again.stderr[-3000:]
        assert table.exists() and model.stat().st_mtime_ns == stamp
        done = snakemake(finished_run, "--cores", "2", "-n")
        assert "Nothing to be done" in done.stdout + done.stderr
    finally:
        shutil.rmtree(store, ignore_errors=True)
        (results / "mlflow.moved").rename(store)
        if (results / "likelihood_table.pdf.moved").exists():
            (results / "likelihood_table.pdf.moved").replace(table)


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


def _dry_run_jobs(workdir, config):
    workdir.mkdir()
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(workdir, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    # the "Job stats" table: one "rule  count" row per rule planned
    rows = (line.split() for line in (result.stdout + result.stderr).splitlines())
    jobs = {row[0] for row in rows if len(row) == 2 and row[1].isdigit() and row[0] != "total"}
    return jobs, result.stderr


@pytest.mark.parametrize(
    "drop, absent, skipped",
    [
        (
            ["ucd", "denoise", "deep"],
            {"ucd_coupling_steps", "ucd_train_dbm", "denoise_bsc", "deep_curve"},
            ["ucd.fig1", "ucd.dbm", "denoise", "deep"],
        ),
        (["ucd.dbm"], {"ucd_train_dbm", "ucd_score", "draw_ucd_table1"}, ["ucd.dbm", "deep"]),
        (["denoise"], {"denoise_bsc", "denoise_real", "draw_fig8"}, ["denoise", "deep"]),
    ],
)
def test_a_config_without_optional_sections_parses_and_skips_their_targets(
    tmp_path, drop, absent, skipped
):
    """No ucd / ucd.dbm / denoise / deep section: `snakemake -n` plans the rest, leaves the
    section's targets out of `all` and says so in one line per section (TINY has no `deep`)."""
    jobs, _ = _dry_run_jobs(tmp_path / "full", yaml.safe_load(yaml.safe_dump(TINY)))
    assert absent - {"deep_curve"} <= jobs  # the full tiny config plans them (it has no deep)
    config = yaml.safe_load(yaml.safe_dump(TINY))
    for key in drop:
        *parents, last = key.split(".")
        holder = config
        for part in parents:
            holder = holder[part]
        holder.pop(last, None)
    jobs, err = _dry_run_jobs(tmp_path / "min", config)
    assert not jobs & absent and {"train_model", "harvest_solutions"} <= jobs
    for section in skipped:
        assert f"{section}: no such section in the config, targets skipped" in err
    assert err.count("no such section in the config") == len(skipped)


def test_logs_and_benchmarks_are_split_per_config_run(tmp_path):
    """Another run.name plans every job log and benchmark under logs/{name}/, benchmarks/{name}/
    (the shared dataset jobs' under logs/data/; the store's, made by a run in a fresh tree,
    logs/tracking_init.log), never where the default run writes them."""
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["run"] = {"name": "other"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    logs = [line.split(":", 1)[1].strip() for line in out.splitlines() if "    log: " in line]
    marks = [line.split(":", 1)[1].strip() for line in out.splitlines() if "benchmark: " in line]
    assert len(logs) > 20 and len(marks) == len(logs)
    assert any(p.startswith("logs/other/train/") for p in logs)
    assert any(p.startswith("logs/data/") for p in logs)
    store = ("logs/tracking_init.log", "benchmarks/tracking_init.tsv")
    for path in logs + marks:
        assert path in store or path.startswith(
            ("logs/other/", "logs/data/", "benchmarks/other/", "benchmarks/data/")
        ), path


def test_no_job_runs_more_torch_threads_than_its_cores():
    """Jobs given more than one core pass --threads {threads} (the stage then calls
    torch.set_num_threads); every other job inherits one OpenMP/MKL thread from the Snakefile."""
    import re

    snakefile = (ROOT / "Snakefile").read_text()
    assert 'os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")' in snakefile
    checked = 0
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=\s*rule )", path.read_text()):
            name = re.match(r"\s*rule (\w+)", block)
            threads = re.search(r"threads:\s*(\S+)", block)
            if not (name and threads):
                continue
            checked += 1
            if threads.group(1) != "1":
                assert "--threads {threads}" in block, f"{path.name}: rule {name.group(1)}"
    assert checked > 10


def _planned(workdir, *args, config):
    """The jobs `snakemake -n -p` plans in ``workdir``: sorted (rule, outputs, shell command)."""
    import re

    result = snakemake(workdir, "-n", "-p", *args, config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    jobs = []
    for block in re.split(r"\n\[[^\]]+\]\n", text)[1:]:
        rule = re.match(r"(?:local)?rule (\w+):", block)
        output = re.search(r"^    output: (.*)$", block, re.M)
        shell = re.search(r"^Shell command: (.*)$", block, re.M)
        if rule:
            jobs.append((rule[1], output[1] if output else "", shell[1] if shell else ""))
    return sorted(jobs)


@pytest.mark.parametrize("name", ["paper.yaml", "ucd_cpu.yaml"])
def test_an_overlay_plans_what_the_whole_config_it_replaced_planned(tmp_path, name):
    """`--configfile workflow/config/{name}` is merged into config.yaml by Snakemake itself; the
    jobs and their commands are those of the whole config the overlay replaced, with the
    settings added since (``full_configs``; given with --replace-workflow-config, so that nothing
    of config.yaml is merged into it)."""
    overlay, whole = tmp_path / "overlay", tmp_path / "whole"
    for workdir in (overlay, whole):
        workdir.mkdir()
        shutil.copy(ROOT / "config.yaml", workdir / "config.yaml")
    shutil.copy(ROOT / "workflow" / "config" / name, overlay / name)
    (whole / name).write_text(
        yaml.safe_dump(whole_config(f"workflow/config/{name}"), sort_keys=False)
    )
    planned = _planned(overlay, config=name)
    assert len(planned) > 30
    assert planned == _planned(whole, "--replace-workflow-config", config=name)
