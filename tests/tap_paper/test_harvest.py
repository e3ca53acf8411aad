"""Harvest of TAP solutions: fixed points, order-free deduplication, the init -> solution map,
non-converged rows, the files and the config checks."""

import copy
import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import tiny_harvest
import torch
import yaml

from tapmachine.core import tap
from tapmachine.io.schema import SCHEMA_FILE as SCHEMA
from tapmachine.pipeline.configuration import ConfigError, load_config, validate
from tapmachine.tap_paper import harvest
from tapmachine.tap_paper.harvest import HarvestError, HarvestSettings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_harvest.build(tmp_path_factory.mktemp("harvest"), epochs=(1, tiny_harvest.EPOCHS))


@pytest.fixture(scope="module")
def prototypes():
    """A machine with several TAP solutions and its 300 training images."""
    return tiny_harvest.prototype_machine(30)


def test_file_holds_every_documented_key(run):
    sol = harvest.load_solutions(run["solutions"][-1])
    K, nv, nh = 200, tiny_harvest.SIDE**2, 8
    assert sol["a_visible"].shape == sol["c_visible"].shape == (K, nv)
    assert sol["a_hidden"].shape == sol["c_hidden"].shape == (K, nh)
    for key in ("free_energy", "converged", "iterations", "inverse", "init_index", "labels"):
        assert sol[key].shape == (K,), key
    G = sol["representatives"].shape[0]
    assert sol["multiplicity"].shape == sol["unique_free_energy"].shape == (G,)
    assert sol["nearest_separation"].shape == (G,)
    terms = [sol[f"unique_{name}"] for name in tap.FREE_ENERGY_TERMS]
    assert all(t.shape == (G,) for t in terms)
    # the parts of -F of each unique solution (eq. 36) add up to its free energy
    np.testing.assert_allclose(-sum(terms), sol["unique_free_energy"], rtol=0, atol=1e-9)
    assert sol["dedup_tol"] == 0.01 and sol["tol"] == 1e-12 and sol["max_iter"] == 2000
    assert sol["epoch"] == tiny_harvest.EPOCHS and sol["model"] == "tiny"
    assert sol["dataset"] == "synth" and sol["image_shape"] == (6, 6)
    assert sol["summary"]["n_unique"] == G and sol["summary"]["n_init"] == K
    with open(run["solutions"][-1].with_suffix(".csv")) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == G
    assert sum(int(r["multiplicity"]) for r in rows) == int(sol["converged"].sum())
    for row, F in zip(rows, sol["unique_free_energy"], strict=True):
        parts = sum(float(row[name]) for name in tap.FREE_ENERGY_TERMS)
        assert parts == pytest.approx(-F, abs=1e-9)
    # Growth over training: one solution at epoch 1, several later.
    first = harvest.load_solutions(run["solutions"][0])
    assert first["summary"]["n_unique"] == 1 and G > 1


def test_unique_solutions_are_fixed_points(run, prototypes):
    """One more TAP iteration from each unique solution moves it by less than tol (MSE)."""
    from tapmachine.io.modelfile import machine_from_state

    blob = torch.load(
        run["model_dir"] / "checkpoints" / f"epoch_{tiny_harvest.EPOCHS}.pt", weights_only=True
    )
    cases = [(machine_from_state(blob["machine"], dtype=torch.float64), None)]
    cases.append((prototypes[0], prototypes[1]))
    for machine, x in cases:
        if x is None:
            sol = harvest.load_solutions(run["solutions"][-1])
        else:
            sol = harvest.harvest(machine, x, HarvestSettings(n_init=None))
        reps = sol["representatives"]
        assert len(reps) > 1

        rows = {
            k: torch.as_tensor(sol[k][reps], dtype=torch.float64)
            for k in ("a_visible", "c_visible", "a_hidden", "c_hidden")
        }
        again = tap.solve(
            machine,
            rows["a_visible"],
            rows["c_visible"],
            a_hidden=[rows["a_hidden"]],
            c_hidden=[rows["c_hidden"]],
            damping=0.5,
            max_iter=1,
            tol=0.0,
        )
        step = torch.cat(
            [again.a[0] - rows["a_visible"], again.a[1] - rows["a_hidden"]], dim=1
        ).square()
        assert float(step.mean(1).max()) < 1e-8


def test_init_map_reproduces_the_solutions(prototypes):
    machine, x = prototypes
    sol = harvest.harvest(machine, x, HarvestSettings(n_init=None))
    conv = sol["converged"]
    inv = sol["inverse"]
    assert (inv[conv] >= 0).all() and (inv[~conv] == -1).all()
    reps = sol["representatives"][inv[conv]]
    both = np.concatenate([sol["a_visible"], sol["a_hidden"]], axis=1)
    assert np.abs(both[conv] - both[reps]).max() <= sol["dedup_tol"]
    np.testing.assert_allclose(sol["free_energy"][conv], sol["free_energy"][reps], atol=1e-3)
    np.testing.assert_array_equal(np.bincount(inv[conv]), sol["multiplicity"])
    np.testing.assert_array_equal(
        sol["unique_free_energy"], sol["free_energy"][sol["representatives"]]
    )
    # Each representative maps to its own group.
    groups = np.arange(len(sol["representatives"]))
    np.testing.assert_array_equal(inv[sol["representatives"]], groups)


def test_deduplication_does_not_depend_on_the_order_of_initialisations(prototypes):
    machine, x = prototypes
    settings = HarvestSettings(n_init=None)
    a = harvest.harvest(machine, x, settings)
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(3))
    b = harvest.harvest(machine, x[perm], settings)
    assert len(a["representatives"]) == len(b["representatives"]) > 2
    np.testing.assert_allclose(
        np.sort(a["unique_free_energy"]), np.sort(b["unique_free_energy"]), atol=1e-9
    )
    # Same partition: rows i, j share a group before iff they share one after the permutation.
    inv_a = a["inverse"][perm.numpy()]
    inv_b = b["inverse"]
    same_a = inv_a[:, None] == inv_a[None, :]
    same_b = inv_b[:, None] == inv_b[None, :]
    np.testing.assert_array_equal(same_a, same_b)
    # And the same multiplicities per free energy.
    order_a = np.argsort(a["unique_free_energy"])
    order_b = np.argsort(b["unique_free_energy"])
    np.testing.assert_array_equal(a["multiplicity"][order_a], b["multiplicity"][order_b])


def test_nearest_separation_matches_all_pairs():
    """Each row's max-abs distance to its nearest other row, by blocks, equals the brute force
    over all pairs; a lone row has none (inf)."""
    X = torch.rand(23, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    X[7] = X[3] + 0.004  # a near copy
    D = (X[:, None, :] - X[None, :, :]).abs().amax(-1) + torch.diag(torch.full((23,), np.inf))
    np.testing.assert_allclose(harvest.nearest_separation(X, chunk=4), D.min(1).values)
    assert harvest.nearest_separation(X, chunk=4)[7] == pytest.approx(0.004)
    assert harvest.nearest_separation(X[:1]).tolist() == [np.inf]
    assert harvest.nearest_separation(X[:0]).shape == (0,)


def test_separation_stats_by_hand():
    near = np.array([0.02, 0.02, 0.9, 0.95])
    stats = harvest.separation_stats({"nearest_separation": near})
    assert stats["min_separation"] == 0.02
    assert stats["median_nearest_separation"] == pytest.approx((0.02 + 0.9) / 2)
    assert stats["near_copy_fraction"] == 0.5
    # Files written before the distances were stored, and fewer than two solutions: NaN.
    for arrays in ({}, {"nearest_separation": np.array([np.inf])}):
        assert all(np.isnan(v) for v in harvest.separation_stats(arrays).values())


def test_loose_tolerance_splits_fixed_points_into_near_copies(prototypes):
    """The prototype machine has 4 fixed points reached from its 300 images. Stopped at MSE
    1e-6, rows short of them land more than dedup_tol apart and count as 7 "unique" solutions,
    most of them near copies of another; at 1e-12 the 4 lie O(1) apart, with no near copy. Rows
    stopped at 1e-6 and polished to 1e-12 before merging (the default) give the same 4, with
    the same starts mapped to each."""
    machine, x = prototypes
    unpolished = HarvestSettings(n_init=None, tol=1e-6, max_iter=5000, polish_tol=None)
    loose = harvest.harvest(machine, x, unpolished)
    tight = harvest.harvest(machine, x, HarvestSettings(n_init=None, tol=1e-12, max_iter=5000))
    exact = harvest.harvest(
        machine, x, HarvestSettings(n_init=None, tol=1e-24, max_iter=50000, polish_tol=None)
    )
    for solver in ("anderson", "damped", "newton_damped", "newton_sor"):
        settings = HarvestSettings(n_init=None, tol=1e-6, max_iter=5000, polish_solver=solver)
        polished = harvest.harvest(machine, x, settings)
        assert polished["polished"].all() and harvest.summarise(polished)["n_unpolished"] == 0
        np.testing.assert_array_equal(polished["inverse"], tight["inverse"])
        # Against the fixed points themselves (Alg. 1 to 1e-24): a row polished to MSE 1e-12
        # lies up to 1.2e-5 (damped) or 9e-6 (anderson) from its fixed point on this machine,
        # whose slowest mode is close to marginal, as does the harvest at tol 1e-12.
        np.testing.assert_allclose(polished["a_hidden"], exact["a_hidden"], atol=2e-5)
    np.testing.assert_allclose(tight["a_hidden"], exact["a_hidden"], atol=2e-5)
    s_loose, s_tight = harvest.summarise(loose), harvest.summarise(tight)
    assert s_tight["n_unique"] == 4 and s_loose["n_unique"] > 4
    assert s_tight["near_copy_fraction"] == 0 and s_tight["min_separation"] > 0.5
    assert s_loose["near_copy_fraction"] > 0.5
    assert s_loose["median_nearest_separation"] < harvest.NEAR_COPY_DISTANCE


def test_non_converged_rows_are_counted_and_excluded(prototypes):
    machine, x = prototypes
    sol = harvest.harvest(machine, x[:50], HarvestSettings(n_init=None, max_iter=1))
    summary = harvest.summarise(sol)
    conv = sol["converged"]
    assert summary["n_not_converged"] == int((~conv).sum()) == 50
    assert summary["n_unique"] == 0 and np.isnan(summary["helmholtz"])
    assert (sol["inverse"] == -1).all()
    assert np.isnan(sol["a_visible"]).all() and np.isnan(sol["free_energy"]).all()
    # A mix: a few iterations leave some rows unconverged, and only converged ones are grouped.
    mixed = harvest.harvest(machine, x, HarvestSettings(n_init=None, max_iter=15, tol=1e-8))
    conv = mixed["converged"]
    assert 0 < int(conv.sum()) < len(conv)
    assert int(mixed["multiplicity"].sum()) == int(conv.sum())
    assert np.isnan(mixed["a_hidden"][~conv]).all() and np.isfinite(mixed["a_hidden"][conv]).all()
    assert np.isfinite(mixed["unique_free_energy"]).all()


def test_run_harvest_rejects_missing_or_foreign_checkpoints(run, tmp_path):
    model = run["model"]
    ckpt = run["model_dir"] / "checkpoints"
    kwargs = dict(
        data_path=run["data"],
        settings=HarvestSettings(n_init=10),
        out_npz=tmp_path / "x.npz",
        out_csv=tmp_path / "x.csv",
        progress=False,
    )
    with pytest.raises(HarvestError, match="outside its"):
        harvest.run_harvest(model, ckpt / "epoch_99.pt", 99, **kwargs)
    with pytest.raises(HarvestError, match="holds epoch"):
        harvest.run_harvest(model, ckpt / "epoch_1.pt", 2, **kwargs)
    missing = tmp_path / "gone" / "model.pt"
    with pytest.raises(HarvestError, match="train the model first"):
        harvest.run_harvest(missing, ckpt / "epoch_1.pt", 1, **kwargs)
    assert not list(tmp_path.glob("x.*"))


def test_a_stopped_harvest_resumes_at_its_first_unfinished_chunk(
    run, tmp_path, monkeypatch, capsys
):
    """A harvest stopped after its first chunk of starts keeps that chunk; started again it
    solves only the chunks left, and its file equals an uninterrupted harvest's, array for
    array. Its log names the kept chunk with the seconds it took. Kept chunks of other settings
    are not used, nor an unreadable one; the kept folder goes once the files are written."""
    from tapmachine.io.runlog import kept_chunk_seconds
    from tapmachine.tap_paper.harvest import solutions

    settings = dataclasses.replace(HarvestSettings(n_init=100), chunk_size=40)
    ckpt = run["model_dir"] / "checkpoints" / "epoch_1.pt"

    def harvest_to(name, chosen=settings):
        out = tmp_path / f"{name}.npz"
        harvest.run_harvest(
            run["model"], ckpt, 1, run["data"], chosen, out, out.with_suffix(".csv"),
            progress=False,
        )  # fmt: skip
        return out

    whole = harvest.load_solutions(harvest_to("whole"))
    solved = []
    real = tap.solve_with_retry

    def stop_at_second(machine, rows, *args, **kw):
        if len(solved) == 1:
            raise KeyboardInterrupt  # the session ends
        solved.append(rows.shape[0])
        return real(machine, rows, *args, **kw)

    monkeypatch.setattr(solutions.tap, "solve_with_retry", stop_at_second)
    with pytest.raises(KeyboardInterrupt):
        harvest_to("resumed")
    kept = tmp_path / "resumed.npz.partial"
    assert [p.name for p in kept.iterdir()] == ["chunk_0.npz"]
    assert not (tmp_path / "resumed.npz").exists()

    def counting(machine, rows, *args, **kw):
        solved.append(rows.shape[0])
        return real(machine, rows, *args, **kw)

    monkeypatch.setattr(solutions.tap, "solve_with_retry", counting)
    capsys.readouterr()
    resumed = harvest.load_solutions(harvest_to("resumed"))
    assert solved == [40, 40, 20]  # the first chunk kept, the other two solved
    wall, cpu, chunks = kept_chunk_seconds(capsys.readouterr().err)
    assert chunks == 1 and wall > 0 and cpu > 0
    assert not kept.exists()
    for key in ("a_visible", "a_hidden", "free_energy", "converged", "iterations", "inverse",
                "polish_iterations", "multiplicity", "unique_free_energy"):  # fmt: skip
        np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)

    # a chunk kept under other settings, or unreadable, is solved again
    monkeypatch.setattr(solutions.tap, "solve_with_retry", stop_at_second)
    solved.clear()
    with pytest.raises(KeyboardInterrupt):
        harvest_to("again")
    monkeypatch.setattr(solutions.tap, "solve_with_retry", counting)
    solved.clear()
    harvest_to("again", dataclasses.replace(settings, dedup_tol=0.02))
    assert solved == [40, 40, 20]
    monkeypatch.setattr(solutions.tap, "solve_with_retry", stop_at_second)
    solved.clear()
    with pytest.raises(KeyboardInterrupt):
        harvest_to("again")
    (tmp_path / "again.npz.partial" / "chunk_0.npz").write_bytes(b"cut off")
    monkeypatch.setattr(solutions.tap, "solve_with_retry", counting)
    solved.clear()
    harvest_to("again")
    assert solved == [40, 40, 20] and "not a kept block" in capsys.readouterr().err


def _cli_harvest(run, out, spec: str) -> int:
    from tapmachine.pipeline import cli

    return cli.main(
        [
            "harvest",
            "--model-file", str(run["model"]),
            "--checkpoint", str(run["model_dir"] / "checkpoints" / "epoch_2.pt"),
            "--epoch", "2",
            "--data", str(run["data"]),
            "--spec", spec,
            "--out-npz", str(out),
            "--out-csv", str(out.with_suffix(".csv")),
        ]
    )  # fmt: skip


def test_cli_harvest_writes_both_files(run, tmp_path):
    out = tmp_path / "epoch_2.npz"
    # n_init above the 300 images: all are used
    assert _cli_harvest(run, out, '{"n_init": 500, "epochs": [2]}') == 0
    sol = harvest.load_solutions(out)
    assert sol["converged"].shape == (300,) and sol["dtype"] == "float64"
    assert out.with_suffix(".csv").exists()


def test_cli_harvest_names_an_unknown_spec_key(run, tmp_path, capsys):
    out = tmp_path / "epoch_2.npz"
    assert _cli_harvest(run, out, '{"dedup_tolerance": 0.1}') == 2
    assert "unknown harvest settings: dedup_tolerance" in capsys.readouterr().err
    assert not out.exists()


def test_harvest_settings_defaults_are_the_schemas():
    from tapmachine.pipeline.configuration import schema_default

    for field in dataclasses.fields(HarvestSettings):
        if field.name != "chunk_size":
            assert field.default == schema_default("harvest", "*", field.name), field.name


def _config():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    return copy.deepcopy(config)


def test_shipped_configs_declare_harvest_and_figures():
    for name in ("config.yaml", "workflow/config/paper.yaml"):
        config = validate(load_config([ROOT / name], default=ROOT / "config.yaml"), SCHEMA)
        assert config["harvest"] and set(config["figures"]) == {
            "fig3",
            "fig4",
            "fig5",
            "fig6",
            "fig7",
        }
    paper = validate(
        load_config([ROOT / "workflow/config/paper.yaml"], default=ROOT / "config.yaml"), SCHEMA
    )
    assert paper["harvest"]["bmnist_h100"]["n_init"] == 10000
    assert {1, 3, 25, 100} <= set(paper["harvest"]["bmnist_h100"]["epochs"])
    assert paper["harvest"]["faces_h256"]["n_init"] == 2400
    assert {5, 100, 200, 500} <= set(paper["harvest"]["faces_h256"]["epochs"])
    # Figs. 5-7 with the paper's three columns, the faces at their own epochs, every face
    from tapmachine.pipeline.configuration import solution_columns

    assert paper["figures"]["fig5"]["models"] == ["bmnist_h100", "rmnist_h100", "faces_h256"]
    for fig in ("fig6", "fig7"):
        columns = solution_columns(paper["figures"][fig])
        assert list(columns) == ["bmnist_h100", "rmnist_h500", "faces_h256"]
        assert [c["epochs"] for c in columns.values()] == [[1, 3, 25, 100]] * 2 + [
            [5, 100, 200, 500]
        ]
    fig7 = solution_columns(paper["figures"]["fig7"])
    assert [(c["digits"], c["n_images"]) for c in fig7.values()] == [([3, 6, 7], 10000)] * 2 + [
        (None, None)
    ]


def test_harvest_defaults_are_filled():
    config = _config()
    config["harvest"] = {"bmnist_h100": {"epochs": [1]}}
    config["figures"] = {}
    entry = validate(config, SCHEMA)["harvest"]["bmnist_h100"]
    assert entry == {
        "epochs": [1],
        "n_init": 10000,
        "dedup_tol": 0.01,
        "tol": 1e-12,
        "max_iter": 2000,
        "damping": 0.5,
        "retry_damping": 0.95,
        "dtype": "float64",
        "merge_rule": "magnetisations",
        "solver": "damped",
        "polish_tol": 1e-12,
        "polish_solver": "anderson",
    }


def _beyond_training(c):
    """bmnist_h100 harvested one epoch after its last (the default config's epochs + 1)."""
    c["harvest"]["bmnist_h100"].update(epochs=[1, c["models"]["bmnist_h100"]["epochs"] + 1])


_EPOCHS = yaml.safe_load((ROOT / "config.yaml").read_text())["models"]["bmnist_h100"]["epochs"]
_N_INIT = yaml.safe_load((ROOT / "config.yaml").read_text())["harvest"]["bmnist_h100"]["n_init"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (_beyond_training, rf"\[{_EPOCHS + 1}\] exceed .* {_EPOCHS}"),
        (lambda c: c["harvest"].update(nope={"epochs": [1]}), "not a model"),
        (
            lambda c: c["figures"]["fig6"].update(epochs=[7]),
            r"fig6 \(bmnist_h100\): epochs \[7\] are not",
        ),
        (lambda c: c["figures"]["fig5"].update(models=["bmnist_h25"]), "no `harvest` entry"),
        (lambda c: c["figures"]["fig5"].update(model="bmnist_h100"), "'model' was unexpected"),
        (lambda c: c["figures"]["fig3"].update(models=["bmnist_h25", "x"]), "'x' is not"),
        (lambda c: c["figures"]["fig7"].update(n_images=_N_INIT + 1), "exceeds harvest"),
        (lambda c: c["figures"]["fig6"].update(embedding="tsne"), "fig6.embedding"),
        (lambda c: c["figures"].update(fig99={}), "fig99"),
        (lambda c: c["harvest"]["bmnist_h100"].update(dedup=0.1), "dedup"),
    ],
)
def test_bad_harvest_and_figure_configs_fail_with_the_key(edit, message):
    config = _config()
    edit(config)
    with pytest.raises(ConfigError, match=message):
        validate(config, SCHEMA)


@pytest.mark.slow
def test_harvest_runs_are_their_own_and_leave_the_training_run_alone(run, tmp_path):
    """Each harvest is a run of experiment "harvest" tagged with the model's training run
    (``model_run_id``), metrics at step = epoch; a rerun makes a second harvest run and never
    adds points to the finished training run."""
    import mlflow

    from tapmachine.io.modelfile import ModelFile
    from tapmachine.pipeline.stages import harvest as harvest_stage
    from tapmachine.pipeline.tracking import store as tracking
    from tapmachine.pipeline.tracking.records import RunRecord, write_record

    manifest = tmp_path / "mlflow" / "experiments.json"
    tracking.init_store(manifest.parent, manifest)
    with tracking.start_run(manifest, "train", "tiny") as train_run:
        train_run.log_metrics({"tap_ll": -1.0}, step=2)
    ModelFile.load(run["model"]).save(tmp_path / "model.pt")
    # the training job's record beside model.pt names its run (pipeline.tracking.records)
    write_record(RunRecord("train", "tiny", run_id=train_run.run_id), tmp_path / "model.pt")
    uri, harvest_exp = tracking.experiment_id(manifest, "harvest")
    client = mlflow.MlflowClient(uri)
    for i in range(2):
        harvest_stage.harvest_epoch(
            tmp_path / "model.pt",
            run["model_dir"] / "checkpoints" / "epoch_2.pt",
            2,
            run["data"],
            harvest.HarvestSettings(n_init=40),
            tmp_path / f"h{i}.npz",
            tmp_path / f"h{i}.csv",
            manifest=manifest,
            dtype="float64",
        )
    runs = client.search_runs([harvest_exp], tracking.STAGE_RUNS)
    assert [r.info.run_name for r in runs] == ["tiny/epoch_2"] * 2
    for r in runs:
        assert r.data.tags["model_run_id"] == train_run.run_id
        assert [m.step for m in client.get_metric_history(r.info.run_id, "n_unique")] == [2]
    assert set(client.get_run(train_run.run_id).data.metrics) == {"tap_ll"}
    assert len(client.get_metric_history(train_run.run_id, "tap_ll")) == 1


def test_merge_rules_on_hand_made_solutions():
    """Copies 1e-3 apart merge and solutions 0.1 apart stay distinct, under both rules: max-abs
    distance of the means within dedup_tol 0.01, or free energies within 1e-2 of their group's
    lowest. Rows not converged are left out."""
    base = torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.9, 0.2]], dtype=torch.float64)
    a = torch.cat([base, base + 1e-3, base[:1] + 0.1, base[:1]])
    F = torch.tensor([-3.0, -2.0, -1.0, -3.0 + 1e-3, -2.0 + 1e-3, -1.0 + 1e-3, -2.9, 5.0])
    converged = torch.tensor([True] * 7 + [False])
    zeros = torch.zeros_like(a)
    state = tap.TAPState(
        a=[a[:, :1], a[:, 1:]],
        c=[zeros[:, :1], zeros[:, 1:]],
        A=[zeros[:, :1], zeros[:, 1:]],
        B=[zeros[:, :1], zeros[:, 1:]],
        iterations=torch.ones(8, dtype=torch.long),
        converged=converged,
    )
    want = [0, 1, 2, 0, 1, 2, 3, -1]
    for rule in harvest.MERGE_RULES:
        settings = HarvestSettings(merge_rule=rule, dedup_tol=0.01)
        reps, inverse, counts = harvest.merge(state, F, settings)
        groups = inverse.tolist()
        # the same partition as `want` (group numbers may differ between the rules)
        relabel = {g: w for g, w in zip(groups, want, strict=True)}
        assert [relabel[g] for g in groups] == want, rule
        assert len(relabel) == 5 and sorted(counts.tolist()) == [1, 2, 2, 2]
        assert all(inverse[r] == k for k, r in enumerate(reps.tolist()))
    # free energy: groups in increasing F, each represented by its lowest row
    reps, _, _ = tap.unique_free_energy(F, converged, 0.01)
    assert reps.tolist() == [0, 6, 1, 2]
    with pytest.raises(HarvestError):
        HarvestSettings(merge_rule="nearest")
