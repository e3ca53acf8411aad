"""Corruption never costs finished work: unreadable checkpoints are named and skipped, a job killed
or out of disk space mid-write leaves the previous files whole, and a corrupt model.pt, dataset
.npz or half-written CSV found by Snakemake is set aside and remade (training resuming from its
checkpoints, a dataset from its verified source)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from services import run_bounded
from tiny_models import SPEC, bars_and_stripes, settings
from tiny_ops import prepare

from tapmachine.core.seeding import seeded_generator
from tapmachine.io import data
from tapmachine.io.modelfile import Checkpoint, ModelFile
from tapmachine.io.runlog import resumed_epoch
from tapmachine.train import TrainingError, build_machine, train

ROOT = Path(__file__).resolve().parents[2]


def _train(ckpt_dir, epochs=4, on_epoch=None):
    x = bars_and_stripes().repeat(3, 1)
    g = seeded_generator(5, "corrupt")
    m = build_machine(SPEC, x, 0.01, g)
    s = dataclasses.replace(settings(), epochs=epochs)
    return train(m, x, s, g, checkpoint_dir=ckpt_dir, progress=False, on_epoch=on_epoch)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    machine, history = _train(tmp_path_factory.mktemp("reference"))
    return machine, history


def _same_machine(a, b):
    for wa, wb in zip(a.weights, b.weights, strict=True):
        torch.testing.assert_close(wa, wb, rtol=0, atol=0)


def test_unreadable_newest_checkpoints_are_named_and_skipped(tmp_path, capsys, reference):
    _train(tmp_path)
    (tmp_path / "epoch_4.pt").write_bytes((tmp_path / "epoch_4.pt").read_bytes()[:200])
    (tmp_path / "epoch_3.pt").write_bytes(np.random.default_rng(0).bytes(3000))
    capsys.readouterr()
    machine, history = _train(tmp_path)
    err = capsys.readouterr().err
    assert "other settings" not in err and "afresh" not in err, err
    named = [line for line in err.splitlines() if line.startswith("skipping unreadable")]
    assert len(named) == 2 and "epoch_4.pt" in named[0] and "epoch_3.pt" in named[1], err
    assert resumed_epoch(err) == 2, err
    assert [h["epoch"] for h in history] == [1, 2, 3, 4]
    _same_machine(machine, reference[0])
    assert [h["tap_ll"] for h in history] == [h["tap_ll"] for h in reference[1]]
    assert Checkpoint.load(tmp_path / "epoch_4.pt").epoch == 4


_KILLED_WRITER = """
import os, signal, sys
sys.path[:0] = [{tests!r}, {tests!r} + "/pipeline", {src!r}]
from tapmachine.io import modelfile
from test_corruption import _train

real_save = modelfile.torch.save

def save(obj, fh):
    if obj["epoch"] == 3:  # half the bytes on disk, then killed before the rename
        fh.write(b"PK" * 500)
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_save(obj, fh)

modelfile.torch.save = save
_train({ckpt!r})
"""


def test_sigkill_during_a_checkpoint_write_loses_nothing(tmp_path, capsys, reference):
    script = _KILLED_WRITER.format(
        tests=str(ROOT / "tests"), src=str(ROOT / "src"), ckpt=str(tmp_path)
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pt")) == ["epoch_1.pt", "epoch_2.pt"]
    assert Checkpoint.load(tmp_path / "epoch_2.pt").epoch == 2
    assert list(tmp_path.glob(".epoch_3.pt.*")), "the killed writer's temporary file"
    capsys.readouterr()
    machine, history = _train(tmp_path)
    assert resumed_epoch(capsys.readouterr().err) == 2
    _same_machine(machine, reference[0])
    # the killed writer's leftover is removed at resume (on a full disk it is space lost)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"epoch_{e}.pt" for e in range(1, 5)]


def _mount_tmpfs(path: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a small full disk) needs root")
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {proc.stderr.decode().strip()}")


def test_full_disk_during_a_checkpoint_write_loses_nothing(tmp_path, capsys, reference):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "1m")
    try:
        ckpt = disk / "checkpoints"
        filler = disk / "filler"

        def fill_after_epoch_2(epoch, metrics, machine):
            if epoch == 2:  # every byte but a few taken: epoch 3's checkpoint does not fit
                with open(filler, "wb", buffering=0) as fh:
                    try:
                        while True:
                            fh.write(b"\0" * 4096)
                    except OSError:
                        pass
                    os.ftruncate(fh.fileno(), max(0, fh.tell() - 1024))

        with pytest.raises(TrainingError, match="no space left on device") as err:
            _train(ckpt, on_epoch=fill_after_epoch_2)
        assert "epoch_3.pt" in str(err.value) and "epoch 2" in str(err.value), str(err.value)
        assert sorted(p.name for p in ckpt.iterdir()) == ["epoch_1.pt", "epoch_2.pt"]
        filler.unlink()
        capsys.readouterr()
        machine, _ = _train(ckpt)
        assert resumed_epoch(capsys.readouterr().err) == 2
        _same_machine(machine, reference[0])
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# --- the same through Snakemake: a tiny workflow directory (tests/tiny_ops.py) ------------------

MODEL_DIR = "results/ops/models/tiny"


def _snakemake(work: Path, *targets: str, wait: bool = True):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(work), "--configfile", str(work / "config.yaml"), "--cores", "1"]
    cmd += list(targets or [f"{MODEL_DIR}/model.pt"])
    if wait:
        return run_bounded(cmd, timeout=400, env=env)
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A workdir whose tiny model was trained by Snakemake (3 epochs, checkpoints kept)."""
    work = prepare(tmp_path_factory.mktemp("trained"), "ops", 3)
    r = _snakemake(work)
    assert r.returncode == 0, r.stdout[-3000:]
    return work


def _copy(trained: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(trained, work, symlinks=True)
    return work


def _truncate(path: Path, keep: float = 0.5) -> None:
    blob = path.read_bytes()
    path.write_bytes(blob[: int(len(blob) * keep)])


@pytest.mark.workflow
@pytest.mark.parametrize("what", ["model.pt", "metrics.csv", "dataset"])
def test_snakemake_remakes_a_corrupt_file_without_retraining(trained, tmp_path, what):
    work = _copy(trained, tmp_path)
    model = work / MODEL_DIR / "model.pt"
    before = ModelFile.load(model)
    dataset = work / "results" / "data" / "binary_mnist.npz"
    reference = data.load_dataset(dataset)
    broken = {
        "model.pt": model,
        "metrics.csv": work / MODEL_DIR / "metrics.csv",
        "dataset": dataset,
    }[what]
    _truncate(broken)
    # the dataset, the model and its metrics, as `all` asks for them
    targets = [str(dataset.relative_to(work)), f"{MODEL_DIR}/model.pt", f"{MODEL_DIR}/metrics.csv"]
    rel = broken.relative_to(work)
    # A run names the damaged file while the workflow is parsed and changes nothing: one with
    # jobs to do (the model's, after a damaged dataset) stops before the first.
    r = _snakemake(work, *targets)
    named = [line for line in r.stdout.splitlines() if str(rel) in line and "corrupt" in line]
    assert named and "set_aside_damaged" in named[0], r.stdout[-3000:]
    if what == "dataset":
        assert r.returncode != 0 and "damaged files (named above) would be read" in r.stdout
    else:
        assert r.returncode == 0 and "Nothing to be done" in r.stdout, r.stdout[-3000:]
    assert broken.exists() and not broken.with_name(broken.name + ".corrupt").exists()
    assert not (work / "logs" / "ops" / "set_aside_damaged.log").exists()
    # The rule sets it aside (the bytes kept); the next run makes it again.
    damaged_bytes = broken.read_bytes()
    r = _snakemake(work, "set_aside_damaged")
    assert r.returncode == 0, r.stdout[-3000:]
    assert broken.with_name(broken.name + ".corrupt").read_bytes() == damaged_bytes
    assert not broken.exists()
    r = _snakemake(work, *targets)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "is corrupt" not in r.stdout, r.stdout[-3000:]
    log = (work / "logs" / "ops" / "train" / "tiny.log").read_text()
    assert resumed_epoch(log) == 3, log[-2000:]  # no epoch trained again
    after = ModelFile.load(model)
    _same_machine(after.machine(), before.machine())
    assert after.history == before.history
    rows = (work / MODEL_DIR / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 3
    again = data.load_dataset(dataset)
    np.testing.assert_array_equal(again.x_train, reference.x_train)
    np.testing.assert_array_equal(again.x_test, reference.x_test)


@pytest.mark.workflow
def test_a_second_snakemake_on_the_same_run_is_refused(tmp_path):
    work = prepare(tmp_path / "work", "ops", 3)
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["models"]["tiny"].update(epochs=6, batch_size=10)  # long enough to overlap
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    first = _snakemake(work, wait=False)
    try:
        ckpts = work / MODEL_DIR / "checkpoints"
        t0 = time.monotonic()
        while not list(ckpts.glob("epoch_*.pt")) and time.monotonic() - t0 < 300:
            assert first.poll() is None, first.stdout.read()[-3000:]
            time.sleep(0.1)
        # Pause the first snakemake (it keeps its lock; its training job runs on) so that the
        # second surely starts while the first is unfinished, however fast the machine.
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = _snakemake(work)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=400)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode != 0
    lines = [line for line in second.stdout.splitlines() if "holds the lock" in line]
    assert lines, second.stdout[-3000:]
    print(lines[0])
    assert first.returncode == 0, out[-3000:]
    record = ModelFile.load(work / MODEL_DIR / "model.pt")
    assert [h["epoch"] for h in record.history] == list(range(1, 7))
    log = (work / "logs" / "ops" / "train" / "tiny.log").read_text()
    assert resumed_epoch(log) == 0, log[-2000:]
