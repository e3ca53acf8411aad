"""Progress with an ETA in a job's log (tapmachine.core.eta), and `tapmachine progress` reading the
running jobs' stage and ETA back from their logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_models import SPEC, bars_and_stripes
from tiny_ops import prepare

from tapmachine.core import estimators, eta
from tapmachine.pipeline.stages import running_jobs
from tapmachine.tap_paper import denoise
from tapmachine.train import build_machine
from tapmachine.ucd import ais as ucd_ais

ROOT = Path(__file__).resolve().parents[2]


def test_progress_lines_carry_counts_and_an_eta_that_parse_back(capsys, monkeypatch):
    monkeypatch.setattr(eta, "ENABLED", True)
    with eta.report(4, "demo") as p:
        for _ in range(4):
            time.sleep(0.01)
            p.advance()
    err = capsys.readouterr().err
    # the opening line, then the interval (30 s) holds all but the last one
    assert err.count("progress demo:") == 2 and "progress demo: 0/4 (0%), 0s elapsed, ETA ?" in err
    assert eta.last_status(err) == {"desc": "demo", "done": 4, "total": 4, "eta_seconds": 0.0}
    line = eta.Progress(10, "x", initial=2)
    line.done = 6  # 4 steps in this process
    line._start -= 40.0
    assert line.line().endswith("40s elapsed, ETA 40s")  # 4 steps left at 10 s a step
    tqdm_bar = "epoch 3/9:  45%|####5     | 9/20 [00:10<01:02, 1.1it/s]"
    assert eta.last_status("progress a: 1/2 (50%), 1s elapsed, ETA 1s\r" + tqdm_bar) == {
        "desc": "epoch 3/9",
        "done": 9,
        "total": 20,
        "eta_seconds": 62.0,
    }
    assert eta.last_status("nothing here") is None


def test_quiet_outside_a_job(capsys, monkeypatch):
    # a test that ran `cli.main` in this process has switched job mode on: switch it off here
    monkeypatch.setattr(eta, "ENABLED", False)
    with eta.report(3, "quiet") as p:
        p.advance(3)
    assert capsys.readouterr().err == ""


def test_ais_denoising_and_ucd_scoring_report_progress_in_a_job(capsys, monkeypatch):
    monkeypatch.setattr(eta, "ENABLED", True)
    monkeypatch.setenv(eta.INTERVAL_ENV, "0")
    x = bars_and_stripes()
    m = build_machine(SPEC, x, 0.1, torch.Generator().manual_seed(0))
    estimators.ais_log_partition(m, n_runs=8, betas=torch.linspace(0, 1, 401), n_groups=2)
    err = capsys.readouterr().err
    assert eta.last_status(err)["desc"] == "AIS steps (all chain groups)"
    assert eta.last_status(err)["done"] == eta.last_status(err)["total"] == 800
    y = x[:5]
    denoise.tap_denoise(m, y, 0.1, denoise.magnetisations(x), block=2)
    status = eta.last_status(capsys.readouterr().err)
    assert status["desc"] == "TAP denoising, rows" and status["done"] == status["total"] == 5
    # UCD scoring: the DBM's AIS
    deep = build_machine(
        {**SPEC, "hidden": [{"prior": "bernoulli", "units": 4}] * 2},
        x,
        0.1,
        torch.Generator().manual_seed(1),
    )
    ucd_ais.dbm_ais_log_partition(deep, n_runs=4, betas=torch.linspace(0, 1, 51))
    status = eta.last_status(capsys.readouterr().err)
    assert status["desc"] == "DBM AIS steps" and status["done"] == status["total"] == 50


def test_training_job_log_reports_the_jobs_eta_and_progress_lists_running_jobs(tmp_path):
    from tapmachine.io import data

    work = prepare(tmp_path, "ops", 3, store=False)  # no Snakemake run here
    data_dir = work / "results" / "data"
    binary = data.derive(data.load_dataset(data_dir / "mnist.npz"), ["threshold"], "binary_mnist")
    data.save_dataset(binary, data_dir / "binary_mnist.npz")  # the values Bernoulli units take
    spec = {**json.loads(json.dumps(SPEC)), "epochs": 3, "batch_size": 50, "n_train": 200}
    spec["hidden"] = [{"prior": "bernoulli", "units": 6}]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "tapmachine", "train", "--model", "tiny", "--spec",
         json.dumps(spec), "--data", str(data_dir / "binary_mnist.npz"), "--outdir",
         str(work / "results" / "ops" / "models" / "tiny")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("progress training")]
    assert len(lines) == 4 and "0/3" in lines[0] and "ETA ?" in lines[0], out.stderr[-2000:]
    assert "1/3" in lines[1] and "ETA ?" not in lines[1]
    lines = lines[1:]
    # the log of a job at work (epoch 1 of 3 done), one of a finished job, one of an old one
    logs = work / "logs" / "ops"
    (logs / "train").mkdir(parents=True)
    (logs / "train" / "running.log").write_text(lines[0] + "\n")
    epoch_done = "epoch 2/3: 100%|##########| 4/4 [00:01<00:00,  3.1it/s]"
    (logs / "train" / "evaluating.log").write_text(lines[0] + "\n" + epoch_done + "\n")
    (logs / "train" / "done.log").write_text(out.stderr)
    old = logs / "train" / "stale.log"
    old.write_text(lines[0] + "\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    rows = running_jobs.running_jobs(logs, active_minutes=15)
    assert [r["job"] for r in rows] == ["train/evaluating", "train/running"]
    assert all(r["done"] == 1 and r["total"] == 3 for r in rows)
    assert "running job" in running_jobs.format_running(rows)


def test_unfinished_status_follows_each_loop_by_its_newest_report():
    outer = "progress training tap: {}/3 (33%), 1m00s elapsed, ETA {}\n"
    bar = "epoch {}/3: {:>3}%|#####     | {}/4 [00:01<{}, 3.1it/s]\r"
    mid_epoch = outer.format(1, "2m00s") + bar.format(2, 50, 2, "00:01")
    assert eta.unfinished_status(mid_epoch)["desc"] == "epoch 2/3"
    evaluating = mid_epoch + bar.format(2, 100, 4, "00:00")  # the bar done, the epoch's evaluation
    assert eta.unfinished_status(evaluating) == {
        "desc": "training tap", "done": 1, "total": 3, "eta_seconds": 120.0,
    }  # fmt: skip
    assert eta.last_status(evaluating)["done"] == 4  # the newest report: a finished bar
    finished = evaluating + outer.format(3, "0s").replace("3/3 (33%)", "3/3 (100%)")
    assert eta.unfinished_status(finished) is None  # the older, unfinished bars are superseded
    restarted = bar.format(1, 50, 2, "00:02") + "resuming\n" + bar.format(1, 100, 4, "00:00")
    assert eta.unfinished_status(restarted) is None
    assert eta.unfinished_status("nothing here") is None


@pytest.mark.parametrize("seconds,text", [(5, "5s"), (125, "2m05s"), (3725, "1h02m")])
def test_format_seconds(seconds, text):
    assert eta.format_seconds(seconds) == text
