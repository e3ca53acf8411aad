"""Resume for real: a training job killed mid-run (SIGTERM, then SIGKILL) inside `snakemake` is
rerun by Snakemake, continues from its last checkpoint, and ends with parameters equal bit for bit
to those of an uninterrupted run (CPU). SIGTERM first keeps the state at the next minibatch
boundary (``train.stopping``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from services import run_bounded
from tiny_ops import prepare

from tapmachine.io import data
from tapmachine.io.modelfile import ModelFile

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.workflow
EPOCHS = 8
MODEL = "results/ops/models/tiny/model.pt"


def _snakemake(work: Path, wait: bool = True):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(work), "--configfile", str(work / "config.yaml")]
    cmd += ["--cores", "1", MODEL]
    if wait:
        return run_bounded(cmd, timeout=300, env=env)
    log = open(work / "snakemake.log", "w")  # noqa: SIM115 - the caller waits for the process
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _train_pid(session: int) -> int | None:
    """PID of the `tapmachine train` process in the session of our snakemake."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != session:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        if b"train" in argv and any(a.endswith(b"tapmachine") for a in argv):
            return int(entry.name)
    return None


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    """Three copies of one workdir whose dataset is already derived: reference, SIGTERM, SIGKILL."""
    base = prepare(tmp_path_factory.mktemp("base"), "ops", EPOCHS)
    config = yaml.safe_load((base / "config.yaml").read_text())
    config["models"]["tiny"].update(n_train=200, batch_size=10)  # 20 batches an epoch
    config["models"]["tiny"]["hidden"][0]["units"] = 16
    (base / "config.yaml").write_text(yaml.safe_dump(config))
    # the derived dataset written here (what `tapmachine derive` writes), not by a Snakemake run:
    # newer than its source, so no job remakes it
    spec = config["data"]["derived"]["binary_mnist"]
    source = data.load_dataset(base / "results" / "data" / "mnist.npz")
    derived = data.derive(source, spec["transforms"], name="binary_mnist")
    data.save_dataset(derived, base / "results" / "data" / "binary_mnist.npz")
    out = {}
    for name in ("reference", "sigterm", "sigkill"):
        out[name] = tmp_path_factory.mktemp(name)
        shutil.copytree(base, out[name], dirs_exist_ok=True, symlinks=True)
    return out


def _params(work: Path) -> dict:
    state = ModelFile.load(work / MODEL).machine_state
    flat = {}

    def walk(prefix, obj):
        if isinstance(obj, torch.Tensor):
            flat[prefix] = obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(obj, list | tuple):
            for i, v in enumerate(obj):
                walk(f"{prefix}[{i}]", v)

    walk("machine", state)
    return flat


@pytest.fixture(scope="module")
def reference(workdirs):
    r = _snakemake(workdirs["reference"])
    assert r.returncode == 0, r.stdout[-3000:]
    return _params(workdirs["reference"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killed_training_resumes_bit_for_bit(workdirs, reference, sig):
    work = workdirs[sig.name.lower()]
    ckpts = work / "results" / "ops" / "models" / "tiny" / "checkpoints"
    proc = _snakemake(work, wait=False)
    try:
        t0 = time.monotonic()
        while not (ckpts / "epoch_2.pt").exists() and time.monotonic() - t0 < 240:
            assert proc.poll() is None, (work / "snakemake.log").read_text()[-3000:]
            time.sleep(0.05)
        pid = _train_pid(proc.pid)
        assert pid is not None, "no tapmachine train process in the run's session"
        os.kill(pid, sig)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    done = sorted(p.name for p in ckpts.glob("epoch_*.pt"))
    print(f"{sig.name}: training killed with checkpoints {done}; snakemake exit {rc}")
    assert rc != 0 and not (work / MODEL).exists()
    assert f"epoch_{EPOCHS}.pt" not in done
    log_file = work / "logs" / "ops" / "train" / "tiny.log"
    if sig == signal.SIGTERM:  # noted, the state kept at the next batch boundary (train.stopping)
        stop = [line for line in log_file.read_text().splitlines() if "stopped on SIGTERM" in line]
        assert stop and "kept in" in stop[0], log_file.read_text()[-2000:]
        print(stop[0])
    again = _snakemake(work)
    assert again.returncode == 0, again.stdout[-3000:]
    log = log_file.read_text()
    assert "resuming from" in log, log[-2000:]
    print([line for line in log.splitlines() if "resuming from" in line][0])
    resumed = _params(work)
    assert resumed.keys() == reference.keys() and resumed
    for key, value in reference.items():
        assert torch.equal(resumed[key], value), key
