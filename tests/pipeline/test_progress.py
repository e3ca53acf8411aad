"""``tapmachine progress``: epochs done and time left of a run's training jobs, from checkpoints."""

import copy
import math
import os
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from tapmachine.core.seeding import seeded_generator
from tapmachine.io.modelfile import (
    Checkpoint,
    EpochInProgress,
    ModelFile,
    in_progress_path,
    machine_state,
)
from tapmachine.pipeline import cli
from tapmachine.pipeline.stages import progress, running_jobs
from tapmachine.train import TrainSettings, build_machine, expected_signature, train

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 4}]}


class Stop(Exception):
    """Ends training after an epoch's checkpoint, as a session's end does."""


def _train(model_dir, epochs, stop_after=None, **settings_kw):
    x = (torch.rand(40, 9, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    g = seeded_generator(0, "progress")
    machine = build_machine(SPEC, x, 0.01, g)
    settings = TrainSettings(epochs=epochs, batch_size=10, eval_samples=20, **settings_kw)

    def on_epoch(epoch, metrics, machine):
        if epoch == stop_after:
            raise Stop

    return train(
        machine,
        x,
        settings,
        g,
        checkpoint_dir=model_dir / "checkpoints",
        progress=False,
        on_epoch=on_epoch,
    )


def test_progress_counts_epochs_and_prices_what_is_left(tmp_path, capsys):
    run = tmp_path / "results" / "paper"
    stopped = run / "models" / "b_stopped"
    with pytest.raises(Stop):
        _train(stopped, epochs=7, stop_after=2)
    row = progress.model_progress(stopped)
    assert (row["epochs_done"], row["epochs_total"], row["finished"]) == (2, 7, False)
    from tapmachine.io.modelfile import Checkpoint

    history = Checkpoint.load(stopped / "checkpoints" / "epoch_2.pt").history
    pace = sum(h["epoch_seconds"] for h in history) / 2
    assert row["epoch_seconds"] == pytest.approx(pace)
    assert row["remaining_hours"] == pytest.approx(5 * pace / 3600)

    finished = run / "models" / "a_done"
    machine, history = _train(finished, epochs=3)
    ModelFile.from_machine(machine, "a_done", spec={"epochs": 3}, history=history).save(
        finished / "model.pt"
    )
    (run / "models" / "c_not_started").mkdir()  # a folder, no checkpoint: not listed
    rows = progress.run_progress(run)
    assert [r["model"] for r in rows] == ["a_done", "b_stopped"]
    assert rows[0]["finished"] and rows[0]["remaining_hours"] == 0.0
    assert rows[0]["epochs_done"] == rows[0]["epochs_total"] == 3
    # only the latest PACE_EPOCHS epochs set the pace
    many = run / "models" / "d_long"
    with pytest.raises(Stop):
        _train(many, epochs=20, stop_after=progress.PACE_EPOCHS + 2)
    row = progress.model_progress(many)
    latest = Checkpoint.load(many / "checkpoints" / f"epoch_{progress.PACE_EPOCHS + 2}.pt").history
    want = statistics.median(h["epoch_seconds"] for h in latest[-progress.PACE_EPOCHS :])
    assert row["epoch_seconds"] == pytest.approx(want)

    assert cli.main(["progress", "--results", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["a_done", "3/3"] and out[1].endswith("finished")
    assert out[2].split()[:2] == ["b_stopped", "2/7"] and out[2].endswith("in progress")
    rows = progress.run_progress(run)
    total = sum(r["remaining_hours"] for r in rows)
    cpu_total = sum(r["remaining_cpu_hours"] for r in rows)
    (total_line,) = [line for line in out if line.startswith("total (one after the other)")]
    assert math.isclose(float(total_line.split()[-2]), total, abs_tol=0.005)
    assert math.isclose(float(total_line.split()[-1]), cpu_total, abs_tol=0.005)
    assert out[-1].startswith(f"on {os.cpu_count()} idle core")


def test_cpu_hours_left_count_the_cpu_an_epoch_took_not_its_wall_time(tmp_path, capsys):
    """On a shared machine an epoch's wall time is its share of the cores: the CPU hours left
    scale the wall-clock hours by the latest epochs' CPU over wall time. A history without CPU
    times shows n/a and adds nothing to the total."""
    from tapmachine.io.modelfile import Checkpoint

    run = tmp_path / "results" / "paper"
    shared, untimed = run / "models" / "a_shared", run / "models" / "b_untimed"
    for model_dir in (shared, untimed):
        with pytest.raises(Stop):
            _train(model_dir, epochs=9, stop_after=3)
    latest = shared / "checkpoints" / "epoch_3.pt"
    ckpt = Checkpoint.load(latest)
    times = [(30.0, 9.0), (40.0, 10.0), (20.0, 8.0)]  # wall, CPU seconds
    for row, (wall, cpu) in zip(ckpt.history, times, strict=True):
        row["epoch_seconds"], row["epoch_cpu_seconds"] = wall, cpu
    ckpt.save(latest)
    row = progress.model_progress(shared)
    assert row["remaining_hours"] == pytest.approx(6 * 30.0 / 3600)  # median wall 30 s
    assert row["remaining_cpu_hours"] == pytest.approx(6 * 9.0 / 3600)  # median CPU 9 s
    latest = untimed / "checkpoints" / "epoch_3.pt"
    ckpt = Checkpoint.load(latest)
    for row in ckpt.history:
        del row["epoch_cpu_seconds"]
    ckpt.save(latest)
    assert math.isnan(progress.model_progress(untimed)["remaining_cpu_hours"])

    assert cli.main(["progress", "--results", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "CPU h left" in out[0]
    assert out[1].split()[4] == "0.01" and out[2].split()[4] == "n/a"
    (total_line,) = [line for line in out if line.startswith("total (one after the other)")]
    assert total_line.split()[-1] == "0.01"


def test_progress_counts_a_running_reevaluation_pass(tmp_path, capsys):
    """A pass that has rewritten epoch 1's checkpoint with another retry_damping has the later
    epochs still to evaluate: counted, priced at their evaluation's pace, shown in the state."""
    from tapmachine.io.modelfile import Checkpoint

    run = tmp_path / "results" / "paper"
    model_dir = run / "models" / "m"
    with pytest.raises(Stop):
        _train(model_dir, epochs=6, stop_after=3)
    before = progress.model_progress(model_dir)
    assert before["reevaluating"] == 0
    first = model_dir / "checkpoints" / "epoch_1.pt"
    ckpt = Checkpoint.load(first)
    ckpt.settings["retry_damping"] = None  # what a pass with retry_damping: null writes
    ckpt.save(first)
    row = progress.model_progress(model_dir)
    assert row["reevaluating"] == 2
    history = Checkpoint.load(model_dir / "checkpoints" / "epoch_3.pt").history
    evaluation = [h["epoch_seconds"] - h["train_seconds"] for h in history[1:]]
    extra = sum(evaluation) / 3600
    assert row["remaining_hours"] == pytest.approx(before["remaining_hours"] + extra)
    assert cli.main(["progress", "--results", str(run)]) == 0
    assert "evaluating 2 earlier epochs again first" in capsys.readouterr().out


def test_a_run_scored_every_other_epoch_has_no_pass_until_one_begins(tmp_path):
    """eval_every 2 (epochs 2 and 4 scored of 5): the unscored epochs are no sign of a pass under
    way; once a pass has rewritten the oldest scored checkpoint, the scored epochs after it are
    still to evaluate, the unscored ones are not."""
    model_dir = tmp_path / "results" / "paper" / "models" / "m"
    with pytest.raises(Stop):
        _train(model_dir, epochs=6, stop_after=5, eval_every=2)
    assert progress.model_progress(model_dir)["reevaluating"] == 0
    second = model_dir / "checkpoints" / "epoch_2.pt"
    ckpt = Checkpoint.load(second)
    ckpt.settings["retry_damping"] = None
    ckpt.save(second)
    assert progress.model_progress(model_dir)["reevaluating"] == 1  # epoch 4


def test_progress_with_the_config_counts_a_pass_not_yet_begun(tmp_path, capsys, monkeypatch):
    """A job that will evaluate its epochs again when it starts (its config's second pass differs
    from its checkpoints') shows nothing pending from the checkpoints alone; with the run's config
    every such epoch counts, and none where the config matches."""
    run = tmp_path / "results" / "paper"
    model_dir = run / "models" / "m"
    with pytest.raises(Stop):
        _train(model_dir, epochs=6, stop_after=3)
    assert progress.model_progress(model_dir)["reevaluating"] == 0
    trained = TrainSettings(epochs=6, batch_size=10, eval_samples=20)
    same = expected_signature(trained.solver_settings)
    from tapmachine.io import modelfile

    loaded = []
    real_load = modelfile.Checkpoint.load
    monkeypatch.setattr(
        modelfile.Checkpoint,
        "load",
        lambda path: (loaded.append(Path(path).name), real_load(path))[1],
    )
    assert progress.model_progress(model_dir, same)["reevaluating"] == 0
    assert loaded == ["epoch_3.pt"]  # the latest alone: its job reads no other to decide
    monkeypatch.undo()
    other = expected_signature(trained.solver_settings.replace(retry_damping=None))
    row = progress.model_progress(model_dir, other)
    assert row["reevaluating"] == 3 and row["remaining_hours"] > 0

    # Through the CLI, with the shipped default config plus this model without a second pass.
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["models"]["m"] = copy.deepcopy(config["models"]["bmnist_h25"])
    config["models"]["m"]["tap"] = {"retry_damping": None}
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    monkeypatch.chdir(ROOT)
    assert cli.main(["progress", "--results", str(run), "--configfile", str(config_file)]) == 0
    assert "evaluating 3 earlier epochs again first" in capsys.readouterr().out
    assert cli.main(["progress", "--results", str(run), "--configfile", "nowhere.yaml"]) == 2
    assert "config file nowhere.yaml does not exist" in capsys.readouterr().err
    config["models"]["m"]["epochs"] = -1
    config_file.write_text(yaml.safe_dump(config))
    assert cli.main(["progress", "--results", str(run), "--configfile", str(config_file)]) == 2
    assert "models.m.epochs" in capsys.readouterr().err


def test_progress_with_the_config_counts_a_finished_model_an_overlay_trains_on(
    tmp_path, capsys, monkeypatch
):
    """A model whose model.pt holds 3 epochs, where the run's config asks for 7 (an overlay that
    trains it on, as faces_substitute.yaml): finished from its files alone; with the config, 3/7,
    its 4 epochs left priced at its pace, and the state says why. The config's epochs also count
    while the job runs: its checkpoints still carry the 3 epochs they were trained to."""
    run = tmp_path / "results" / "paper"
    model_dir = run / "models" / "m"
    machine, history = _train(model_dir, epochs=3)
    ModelFile.from_machine(machine, "m", spec={"epochs": 3}, history=history).save(
        model_dir / "model.pt"
    )
    alone = progress.model_progress(model_dir)
    assert alone["finished"] and not alone["extended"] and alone["epochs_total"] == 3
    row = progress.model_progress(model_dir, epochs=7)
    assert (row["epochs_done"], row["epochs_total"], row["finished"], row["extended"]) == (
        3,
        7,
        False,
        True,
    )
    assert row["remaining_hours"] == pytest.approx(4 * row["epoch_seconds"] / 3600)
    assert progress.model_progress(model_dir, epochs=3)["finished"]

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["models"]["m"] = {**copy.deepcopy(config["models"]["bmnist_h25"]), "epochs": 7}
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    monkeypatch.chdir(ROOT)
    assert cli.main(["progress", "--results", str(run), "--configfile", str(config_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    line = out[1]
    assert line.split()[:2] == ["m", "3/7"]
    assert line.endswith("to train on (the config asks for more epochs)")
    # the config's other models have no checkpoint in this run: named, not priced
    waiting = out[-1].removeprefix("not started (no checkpoint yet; not in the hours above): ")
    assert waiting != out[-1] and waiting.split(", ") == sorted(set(config["models"]) - {"m"})

    (model_dir / "model.pt").unlink()  # the job has started: Snakemake removed its output
    running = progress.model_progress(model_dir, epochs=7)
    assert (running["epochs_total"], running["finished"], running["extended"]) == (7, False, False)


def test_progress_shows_the_share_of_converged_training_steps(tmp_path, capsys):
    """Converged training (Alg. 2 to convergence) shows the mean of its epochs'
    train_converged_step_share and the latest epoch's iterations per row; training with a fixed
    number of iterations shows n/a in both columns."""
    run = tmp_path / "results" / "run"
    converged = run / "models" / "a_converged"
    with pytest.raises(Stop):
        _train(converged, epochs=5, stop_after=3, train_iterations="converge")
    from tapmachine.io.modelfile import Checkpoint

    history = Checkpoint.load(converged / "checkpoints" / "epoch_3.pt").history
    row = progress.model_progress(converged)
    shares = [h["train_converged_step_share"] for h in history]
    assert row["converged_step_share"] == pytest.approx(sum(shares) / 3)
    assert row["row_iterations"] == history[-1]["train_mean_iterations"] > 0
    fixed = run / "models" / "b_fixed"
    with pytest.raises(Stop):
        _train(fixed, epochs=5, stop_after=1)
    assert math.isnan(progress.model_progress(fixed)["converged_step_share"])

    assert cli.main(["progress", "--results", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "conv. steps" in out[0] and "sweeps/row" in out[0]
    a, b = out[1].split(), out[2].split()
    assert a[5] == f"{row['converged_step_share']:.2%}" and a[6] == f"{row['row_iterations']:.1f}"
    assert b[5:7] == ["n/a", "n/a"]


def test_progress_of_a_missing_run_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["progress", "--results", str(tmp_path / "nowhere")]) == 2
    assert "is not a run's results folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert progress.run_progress(tmp_path / "empty") == []
    assert progress.format_progress([]) == "no model has a checkpoint yet\n"


def test_a_rising_k_prices_each_epoch_left_at_its_own_k():
    """Epoch times 3 + 2 k at k = 1, 1, 2 (two k seen): the line is recovered and the epochs left
    of {start: 1, end: 3, every: 2} over 6 epochs (k = 2, 3, 3) cost 7 + 9 + 9 s; with one k
    seen, its time scales with k (an upper bound)."""
    schedule = {"start": 1, "end": 3, "every": 2}
    history = [
        {"epoch": 1, "sampling_steps": 1, "epoch_seconds": 5.0},
        {"epoch": 2, "sampling_steps": 1, "epoch_seconds": 5.0},
        {"epoch": 3, "sampling_steps": 2, "epoch_seconds": 7.0},
    ]
    assert progress._rising_k_seconds(history, schedule, 3, 6) == pytest.approx(25.0)
    assert progress._rising_k_seconds(history[:2], schedule, 2, 6) == pytest.approx(5.0 * 10)


def test_a_rising_k_is_priced_on_its_cpu_times_when_the_load_moved_its_wall_times(tmp_path):
    """A CD-k whose early epochs ran starved (wall times 40, 40, then 12 s at k = 1, 1, 2) but
    whose CPU times follow 3 + 2 k: the hours left come from the CPU line (k = 2, 3, 3 left:
    7 + 9 + 9 CPU s), turned into wall time by the latest epochs' CPU share (7 / 12), not from
    the wall times, whose line falls with k."""
    schedule = {"start": 1, "end": 3, "every": 2}
    history = [
        {"epoch": 1, "sampling_steps": 1, "epoch_seconds": 40.0, "epoch_cpu_seconds": 5.0},
        {"epoch": 2, "sampling_steps": 1, "epoch_seconds": 40.0, "epoch_cpu_seconds": 5.0},
        {"epoch": 3, "sampling_steps": 2, "epoch_seconds": 12.0, "epoch_cpu_seconds": 7.0},
    ]
    model_dir = tmp_path / "m"
    path = model_dir / "checkpoints" / "epoch_3.pt"
    path.parent.mkdir(parents=True)
    machine = build_machine(
        {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 2}]},
        torch.zeros(4, 3),
        0.1,
        seeded_generator(0, "rising"),
    )
    Checkpoint(
        machine_state=machine_state(machine),
        epoch=3,
        history=history,
        velocity=[],
        generator=torch.Generator().get_state(),
        fingerprint="",
        settings={"epochs": 6, "sampling_steps": schedule},
    ).save(path)
    row = progress.model_progress(model_dir)
    share = statistics.median([5.0, 5.0, 7.0]) / statistics.median([40.0, 40.0, 12.0])
    assert row["remaining_cpu_hours"] == pytest.approx(25.0 / 3600)
    assert row["remaining_hours"] == pytest.approx(25.0 / share / 3600)
    assert progress._rising_k_seconds(history, schedule, 3, 6) < 0  # the wall line: useless


def test_the_least_wall_time_is_the_cpu_hours_over_the_cores_or_the_longest_job():
    assert progress.least_wall_hours([3.0, 1.0, 2.0], 2) == 3.0  # the longest job: 3 > 6 / 2
    assert progress.least_wall_hours([1.0, 1.0, 1.0, 1.0, 2.0], 2) == 3.0  # 6 / 2 > 2
    assert progress.least_wall_hours([4.0, math.nan], 1) == 4.0
    assert progress.least_wall_hours([], 2) == 0.0
    rows = [
        {"model": m, "epochs_done": 1, "epochs_total": 2, "finished": False,
         "remaining_hours": 2 * h, "remaining_cpu_hours": h, "epoch_seconds": 10.0}
        for m, h in (("a", 5.0), ("b", 1.0), ("c", 1.0))
    ]  # fmt: skip
    assert (
        progress.format_progress(rows, cores=2)
        .splitlines()[-1]
        .startswith("on 2 idle cores, one thread a job: at least 5.0 h of training left")
    )
    assert "idle core" not in progress.format_progress(rows)


def test_short_epochs_read_as_seconds_not_zero():
    """The faces' 0.4-second epochs read "0.43", not "0"; from 10 s in whole seconds."""
    row = {
        "model": "m", "epochs_done": 1, "epochs_total": 2, "finished": False,
        "remaining_hours": 0.0,
    }  # fmt: skip

    def pace(seconds):
        table = progress.format_progress([{**row, "epoch_seconds": seconds}])
        return table.splitlines()[1].split()[2]

    seconds = (0.43, 0.0071, 9.46, 761.4, math.nan)
    assert [pace(s) for s in seconds] == ["0.43", "0.0071", "9.5", "761", "n/a"]


def test_an_epoch_kept_part_way_counts_what_is_done_of_it(tmp_path, capsys):
    """Stopped after 3 of an epoch's 4 minibatches (the state kept at every boundary), a model
    shows 75% of its next epoch done and prices only the rest of it."""
    x = (torch.rand(40, 9, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    run = tmp_path / "results" / "paper"
    model_dir = run / "models" / "m"
    g = seeded_generator(0, "progress")
    machine = build_machine(SPEC, x, 0.01, g)
    settings = TrainSettings(epochs=5, batch_size=10, eval_samples=20)

    def stop_in_epoch_3(step, metrics):
        if step == 2 * 4 + 4:  # epoch 3's 4th update: the state after its 3rd is kept
            raise Stop

    with pytest.raises(Stop):
        train(
            machine, x, settings, g, checkpoint_dir=model_dir / "checkpoints", progress=False,
            on_step=stop_in_epoch_3, in_progress_seconds=0.0,
        )  # fmt: skip
    row = progress.model_progress(model_dir)
    assert row["epochs_done"] == 2 and row["epoch_fraction"] == 0.75
    assert row["remaining_hours"] == pytest.approx((5 - 2 - 0.75) * row["epoch_seconds"] / 3600)
    assert cli.main(["progress", "--results", str(run)]) == 0
    assert "in progress (75% of epoch 3)" in capsys.readouterr().out
    # kept after the epoch's last minibatch: what is left of it is its evaluation
    within = EpochInProgress.load(in_progress_path(model_dir / "checkpoints"))
    within.batches = 4
    within.save(in_progress_path(model_dir / "checkpoints"))
    assert progress.model_progress(model_dir)["epoch_fraction"] == 1.0
    assert cli.main(["progress", "--results", str(run)]) == 0
    assert "in progress (epoch 3 trained, its evaluation left)" in capsys.readouterr().out


def test_a_first_epoch_kept_part_way_is_listed(tmp_path, capsys):
    """A model with no whole epoch yet but its first kept part-way is listed (0 epochs done, the
    share of the first, no pace yet); one with nothing kept is not."""
    x = (torch.rand(40, 9, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    run = tmp_path / "results" / "paper"
    g = seeded_generator(0, "progress")
    settings = TrainSettings(epochs=5, batch_size=10, eval_samples=20)

    def stop(step, metrics):
        if step == 2:
            raise Stop

    with pytest.raises(Stop):
        train(
            build_machine(SPEC, x, 0.01, g), x, settings, g, progress=False, on_step=stop,
            checkpoint_dir=run / "models" / "first" / "checkpoints", in_progress_seconds=0.0,
        )  # fmt: skip
    (run / "models" / "empty" / "checkpoints").mkdir(parents=True)
    rows = progress.run_progress(run)
    assert [r["model"] for r in rows] == ["first"]
    assert (rows[0]["epochs_done"], rows[0]["epochs_total"], rows[0]["epoch_fraction"]) == (
        0,
        5,
        0.25,
    )
    assert math.isnan(rows[0]["remaining_hours"])
    assert cli.main(["progress", "--results", str(run)]) == 0
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line[:5] == ["first", "0/5", "n/a", "n/a", "n/a"] and "(25% of epoch 1)" in " ".join(
        line
    )


def test_a_deep_model_still_pretraining_is_listed_by_its_layer_at_work(tmp_path, capsys):
    """Before a deep model's joint training keeps anything, its row is the pretraining layer at
    work (Alg. 4: ``pretrain/layer_{l}``), named with the layers and the joint epochs the
    config gives; a layer begun with nothing kept yet falls back to the one before. Once the
    joint training has a checkpoint, the row is that training's."""
    x = (torch.rand(40, 9, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    run = tmp_path / "results" / "paper"
    deep = run / "models" / "deep"
    g = seeded_generator(0, "progress")

    def pretrain(layer, epochs, stop_after=None):
        def on_epoch(epoch, metrics, machine):
            if epoch == stop_after:
                raise Stop

        settings = TrainSettings(epochs=epochs, batch_size=10, eval_samples=20)
        train(
            build_machine(SPEC, x, 0.01, g), x, settings, g, progress=False, on_epoch=on_epoch,
            checkpoint_dir=deep / "pretrain" / f"layer_{layer}",
        )  # fmt: skip

    pretrain(1, epochs=2)
    with pytest.raises(Stop):
        pretrain(2, epochs=3, stop_after=1)
    (deep / "pretrain" / "layer_3").mkdir()  # begun, nothing kept yet
    rows = progress.run_progress(run, epochs={"deep": 5}, layers={"deep": 3})
    assert [(r["model"], r["epochs_done"], r["epochs_total"]) for r in rows] == [("deep", 1, 3)]
    assert rows[0]["stage"] == "pretraining layer 2 of 3, then 5 joint epochs"
    assert rows[0]["remaining_hours"] > 0
    assert progress.run_progress(run)[0]["stage"] == "pretraining layer 2 of 3"
    assert cli.main(["progress", "--results", str(run)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.split()[:2] == ["deep", "1/3"]
    assert line.endswith("pretraining layer 2 of 3 (hours left: this layer's)")
    with pytest.raises(Stop):
        _train(deep, epochs=4, stop_after=1)
    (row,) = progress.run_progress(run, epochs={"deep": 4}, layers={"deep": 3})
    assert (row["epochs_done"], row["epochs_total"], row.get("stage")) == (1, 4, None)


def test_running_jobs_are_those_the_newest_snakemake_run_started_and_left_unfinished(tmp_path):
    """A job killed with an earlier run (its log still recent) is not running; of the newest run
    (not an --unlock or a start the lock refused after it: they build no DAG), the jobs it
    finished or failed are not either; without a Snakemake log, or where the newest run names
    no job (a --quiet run), no filter."""
    assert running_jobs.unfinished_snakemake_jobs(tmp_path) is None
    run_logs = tmp_path / ".snakemake" / "log"
    run_logs.mkdir(parents=True)

    def start(jobid, name):
        return (
            f"[Sun Nov 29 18:52:33 2026]\nlocalrule train_model:\n    input: data.npz\n"
            f"    log: logs/r/train/{name}.log\n    jobid: {jobid}\n    wildcards: model={name}\n"
        )

    dag = "Building DAG of jobs...\n"
    (run_logs / "2026-11-29T120000.000000.snakemake.log").write_text(
        dag + start(1, "killed") + start(2, "resumed")
    )
    (run_logs / "2026-11-29T130000.000000.snakemake.log").write_text(
        dag
        + start(5, "resumed")
        + start(6, "finished")
        + start(7, "failed")
        + "rule harvest:\n    log: logs/r/h/a.log, logs/r/h/b.log\n    jobid: 8\n"
        + "Select jobs to execute...\nFinished jobid: 6 (Rule: train_model)\n"
        + "Error in rule train_model:\n    message: None\n    jobid: 7\n"
        + "    log: logs/r/train/failed.log (check log file(s) for error details)\n"
    )
    (run_logs / "2026-11-29T140000.000000.snakemake.log").write_text(
        "Unlocked working directory.\n"
    )
    (run_logs / "2026-11-29T140500.000000.snakemake.log").write_text(
        dag + "LockException:\nError: Directory cannot be locked.\n"
    )
    unfinished = running_jobs.unfinished_snakemake_jobs(tmp_path)
    assert unfinished == {
        (tmp_path / "logs" / "r" / p).resolve() for p in ("train/resumed.log", "h/a.log", "h/b.log")
    }

    line = "progress training tap: 1/3 (33%), 1m00s elapsed, ETA 2m00s\n"
    logs = tmp_path / "logs" / "r"
    (logs / "train").mkdir(parents=True)
    for name in ("killed", "resumed", "finished", "failed"):
        (logs / "train" / f"{name}.log").write_text(line)
    every = [r["job"] for r in running_jobs.running_jobs(logs)]
    assert every == ["train/failed", "train/finished", "train/killed", "train/resumed"]
    assert [r["job"] for r in running_jobs.running_jobs(logs, unfinished=unfinished)] == [
        "train/resumed"
    ]
    (run_logs / "2026-11-29T150000.000000.snakemake.log").write_text(dag + "Select jobs...\n")
    assert running_jobs.unfinished_snakemake_jobs(tmp_path) is None


def _lost_job(rule, jobid, log, end):
    """A shell job's failure as Snakemake logs it: the CalledProcessError, then its block."""
    return (
        f'RuleException:\nCalledProcessError in file "workflow/rules/x.smk", line 33:\n'
        f"Command 'set -euo pipefail;  tapmachine {rule} > {log} 2>&1' {end}\n"
        f"[Mon Nov 30 12:50:02 2026]\nError in rule {rule}:\n    message: None\n"
        f"    jobid: {jobid}\n    output: out/{jobid}.csv\n"
        f"    log: {log} (check log file(s) for error details)\n    shell:\n"
        f"        tapmachine {rule} > {log} 2>&1\n"
        f"        (command exited with non-zero exit code)\n"
    )


def test_progress_names_the_jobs_the_newest_run_lost_apart_from_those_it_stopped(
    tmp_path, capsys, monkeypatch
):
    """Under --keep-going a failed job shows only in the run log: progress names it, with its
    exit status (137 read as SIGKILL, the OOM killer's signal), and counts apart the jobs a
    stopped run took down with it (SIGTERM, raw or as 143); an earlier run's failures, and a
    start that built no DAG, do not count."""
    run_logs = tmp_path / ".snakemake" / "log"
    run_logs.mkdir(parents=True)
    dag = "Building DAG of jobs...\n"
    (run_logs / "2026-11-30T100000.000000.snakemake.log").write_text(
        dag + _lost_job("harvest", 3, "logs/r/old.log", "returned non-zero exit status 1.")
    )
    assert [r["log"] for r in running_jobs.failed_snakemake_jobs(tmp_path)] == ["logs/r/old.log"]
    (run_logs / "2026-11-30T110000.000000.snakemake.log").write_text(
        dag
        + _lost_job("exact_curve", 4, "logs/r/exact.log", "returned non-zero exit status 137.")
        + "Finished jobid: 5 (Rule: train_model)\n"
        + _lost_job("train_model", 6, "logs/r/a.log", "returned non-zero exit status 143.")
        + _lost_job("train_model", 7, "logs/r/b.log", "died with <Signals.SIGTERM: 15>.")
        + _lost_job("score_final", 8, "logs/r/score.log", "returned non-zero exit status 1.")
        + "Will exit after finishing currently running jobs (scheduler).\n"
    )
    (run_logs / "2026-11-30T120000.000000.snakemake.log").write_text(
        "Unlocked working directory.\n"
    )
    rows = running_jobs.failed_snakemake_jobs(tmp_path)
    assert [(r["rule"], r["jobid"], r["exit"], r["stopped"]) for r in rows] == [
        ("exact_curve", "4", 137, False),
        ("train_model", "6", 143, True),
        ("train_model", "7", 15, True),
        ("score_final", "8", 1, False),
    ]
    assert rows[2]["signal"] == "SIGTERM" and rows[0]["log"] == "logs/r/exact.log"

    (tmp_path / "results" / "r").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    cli.main(["progress", "--results", "results/r"])
    out = capsys.readouterr().out
    lost = [line for line in out.splitlines() if line.endswith(".log")]
    assert lost == [
        f"{'exact_curve':<40} {'137 SIGKILL':>13}  logs/r/exact.log",
        f"{'score_final':<40} {'1':>13}  logs/r/score.log",
    ]
    assert "2 job(s) went down with the stopped run" in out and "dmesg" in out
    assert running_jobs.format_failed([]) == ""


def test_a_checkpoint_removed_between_listing_and_reading_is_listed_again(tmp_path, monkeypatch):
    """Training removes each checkpoint it does not keep (checkpoint_every) once the next is
    written: progress that listed it and finds it gone reads the newest one instead."""
    from tapmachine.io import modelfile

    model_dir = tmp_path / "m"
    with pytest.raises(Stop):
        _train(model_dir, epochs=5, stop_after=3)
    ckpts = model_dir / "checkpoints"
    listed = iter([ckpts / "epoch_7.pt"])  # listed, then removed by the training beside it
    real = modelfile.latest_checkpoint
    monkeypatch.setattr(modelfile, "latest_checkpoint", lambda d: next(listed, None) or real(d))
    row = progress.model_progress(model_dir)
    assert row["epochs_done"] == 3
    # a file that is there but unreadable stays an error
    monkeypatch.setattr(modelfile, "latest_checkpoint", real)
    (ckpts / "epoch_3.pt").write_bytes(b"cut off")
    with pytest.raises(modelfile.ModelFileError):
        progress.model_progress(model_dir)


def test_an_older_checkpoint_removed_between_listing_and_reading_is_passed_over(
    tmp_path, monkeypatch
):
    """The newest checkpoint stays until the next is written; progress that lists the epochs in
    between and finds an older one gone (not kept by checkpoint_every) passes over it."""
    from tapmachine.io import modelfile

    model_dir = tmp_path / "m"
    with pytest.raises(Stop):
        _train(model_dir, epochs=5, stop_after=3)
    real = modelfile.checkpoint_epochs
    monkeypatch.setattr(modelfile, "checkpoint_epochs", lambda d: sorted({0, *real(d)}))
    row = progress.model_progress(model_dir)
    assert row["epochs_done"] == 3 and row["reevaluating"] == 0
    assert [
        r["epoch"]
        for r in progress._stale_epochs(
            model_dir / "checkpoints",
            modelfile.Checkpoint.load(model_dir / "checkpoints" / "epoch_3.pt"),
            ("other",),
        )
    ] == [1, 2, 3]
