"""Parsing the workflow writes nothing: `snakemake -n` and `snakemake --lint` in a copy of the
workflow leave every file and folder as they were.

What counts is every path outside `.snakemake/`, with its bytes and modification time: the
workflow's own code (common.smk, tracking.smk, ...) makes no results, logs, MLflow store or
renames while it is parsed; the store is made by a run (`onstart`, rule `tracking_init`), damaged
files are set aside by rule `set_aside_damaged`. `.snakemake/` is Snakemake's own bookkeeping,
which it writes for any invocation (a log of the invocation, its cache of file states, empty
folders for metadata and environments); it is checked to hold only those, with no lock left.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_workflow import TINY

ROOT = Path(__file__).resolve().parents[2]
#: What the Snakefile reads: its default config, the rule files, config overlays, report
#: captions and profiles (workflow/), and the conda env the rules name.
COPIED = ("Snakefile", "config.yaml", "workflow", "envs")
#: Snakemake's own folders under .snakemake/ (snakemake 9).
SNAKEMAKE_OWN = {
    "auxiliary",
    "conda",
    "conda-archive",
    "incomplete",
    "iocache",
    "locks",
    "log",
    "metadata",
    "shadow",
    "singularity",
}

pytestmark = pytest.mark.workflow


def _copy(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, work / name)
        else:
            shutil.copy2(source, work / name)
    (work / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return work


def _tree(root: Path) -> dict:
    """Every path below ``root`` but .snakemake/ -> (size, mtime in ns, sha256 of a file)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".snakemake":
            continue
        stat = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        out[rel.as_posix()] = (stat.st_size if path.is_file() else 0, stat.st_mtime_ns, digest)
    return out


def _snakemake(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    cmd = [sys.executable, "-m", "snakemake", "--configfile", "tiny.yaml", *args]
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=300)


def _only_snakemakes_own(work: Path) -> None:
    own = work / ".snakemake"
    assert {p.name for p in own.iterdir()} <= SNAKEMAKE_OWN
    assert not list((own / "locks").iterdir())


def test_a_dry_run_and_lint_of_a_fresh_copy_change_no_file(tmp_path):
    work = _copy(tmp_path)
    before = _tree(work)
    dry = _snakemake(work, "-n", "--cores", "1")
    assert dry.returncode == 0, dry.stderr[-3000:]
    lint = _snakemake(work, "--lint")
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr[-3000:]
    assert "Lints for" not in lint.stdout + lint.stderr
    assert _tree(work) == before
    _only_snakemakes_own(work)


def test_a_dry_run_over_results_without_a_store_and_with_a_damaged_file_changes_no_file(
    tmp_path,
):
    """The two repairs a run needs (a store made afresh, a damaged file set aside) are named
    while parsing, and neither is done."""
    work = _copy(tmp_path)
    metrics = work / "results" / "default" / "models" / "tiny" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("epoch,tap_ll\n1,-3.5\n2,-3.")  # its last line cut off
    before = _tree(work)
    dry = _snakemake(work, "-n", "--cores", "1")
    assert dry.returncode == 0, dry.stderr[-3000:]
    rel = metrics.relative_to(work)
    assert f"tapmachine: {rel} is corrupt (its last line is cut off)" in dry.stderr
    assert "`snakemake --cores 1 set_aside_damaged`" in dry.stderr
    store = "tapmachine: no tracking store (results/mlflow/experiments.json is missing)"
    assert store in dry.stderr
    lint = _snakemake(work, "--lint")
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr[-3000:]
    assert _tree(work) == before
    _only_snakemakes_own(work)
