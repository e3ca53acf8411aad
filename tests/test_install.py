"""``pip install .`` (not editable) gives a working library outside the checkout.

The wheel is built from a copy of the project's packaging files, installed with ``--no-deps`` into
a fresh virtual environment, and used from a directory outside the checkout with PYTHONPATH
cleared: the package, its schema and every other data file come from the new environment. The
dependencies are the running environment's (a ``.pth`` line puts its site-packages after the new
one's), so nothing is downloaded. 7 s on a quiet 2-core machine, 24 s on a loaded one: slow.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: Run by the new environment's Python: imports, fits and scores from the installed package.
SCRIPT = textwrap.dedent(
    """
    import importlib.metadata as md, json, sys
    import numpy as np
    import tapmachine
    from tapmachine import UCDDBM, TAPMachine
    from tapmachine.figures.common import STYLE
    from tapmachine.io.schema import SCHEMA_FILE, defaults
    from tapmachine.pipeline.tracking.model_registry import MODEL_CODE

    rng = np.random.default_rng(0)
    proto = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=float)
    x = np.abs(proto[rng.integers(0, 2, 200)] - (rng.random((200, 6)) < 0.1))
    rbm = TAPMachine(4, epochs=2, batch_size=20, random_state=0).fit(x)
    scores, hidden = rbm.score_samples(x), rbm.transform(x)

    model, spec = defaults("model"), TAPMachine()._spec()
    # the schema's device-only keys are no estimator parameters (their defaults apply)
    device_only = ("fuse", "cuda_graphs", "cuda_graph_sweeps")
    tap = {k: v for k, v in model["tap"].items() if k not in device_only}
    keys = ["method", "sampling_steps", "epochs", "batch_size", "learning_rate", "momentum",
            "l2", "weight_init_std", "n_solutions", "rho_step", "inference"]
    dbm = {k: v for k, v in UCDDBM()._spec().items() if k not in ("method", "hidden")}
    differ = [k for k in keys if spec[k] != model[k]]
    differ += [f"tap.{k}" for k in set(spec["tap"]) | set(tap)
               if spec["tap"].get(k, "absent") != tap.get(k, "absent")]
    differ += ["eval"] * (spec["eval"] != model["eval"])
    differ += ["dbm_model"] * (dbm != defaults("dbm_model"))
    print(json.dumps({
        "file": tapmachine.__file__,
        "version": tapmachine.__version__,
        "metadata_version": md.version("tapmachine"),
        "requires": md.requires("tapmachine"),
        "schema_file": str(SCHEMA_FILE),
        "data_files": [str(STYLE), str(MODEL_CODE)],
        "scores": [list(scores.shape), bool(np.isfinite(scores).all()), rbm.score_method_],
        "hidden": [list(hidden.shape), bool(np.isfinite(hidden).all())],
        "defaults_differ": sorted(differ),
        "path": sys.path,
    }))
    """
)


def packaging_copy(dest: Path) -> Path:
    """What ``pip install .`` reads (pyproject.toml, README.md, LICENSE, src/) copied to ``dest``,
    so that the build writes its ``build/`` and ``*.egg-info`` there, not into the checkout."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(SRC, dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


def fresh_env(path: Path) -> Path:
    """A virtual environment without pip whose Python finds this one's packages after its own."""
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    # plain path lines: the directories' own .pth files (the checkout's editable install) are
    # not read
    (Path(purelib) / "dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python


def outside_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.mark.slow
def test_the_wheel_installs_and_trains_outside_the_checkout(tmp_path):
    project = packaging_copy(tmp_path / "project")
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        + ["-w", tmp_path / "dist", project],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("tapmachine-*.whl")

    # every file of the package is in the wheel: modules and the data read at runtime
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("tapmachine/")}
    present = {
        p.relative_to(SRC).as_posix()
        for p in (SRC / "tapmachine").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert present <= shipped, sorted(present - shipped)

    env = tmp_path / "env"
    python = fresh_env(env)
    subprocess.run(
        [*pip, "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
        check=True,
        capture_output=True,
        env=outside_env(),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [python, "-c", SCRIPT],
        cwd=elsewhere,
        env=outside_env(),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)

    site = env.resolve()
    assert Path(got["file"]).resolve().is_relative_to(site), got["file"]
    # the dependencies' site-packages may lie in the checkout (a .venv made there), its source not
    assert not any(Path(p).resolve().is_relative_to(SRC) for p in got["path"] if p), got["path"]
    assert str(ROOT) not in {str(Path(p).resolve()) for p in got["path"] if p}, got["path"]
    schema_file = Path(got["schema_file"])
    assert schema_file.resolve().is_relative_to(site)
    assert (
        schema_file.read_bytes() == (SRC / "tapmachine" / "io" / "config.schema.yaml").read_bytes()
    )
    for name in got["data_files"]:
        assert Path(name).resolve().is_relative_to(site) and Path(name).is_file(), name
    assert got["scores"] == [[200], True, "exact"]
    assert got["hidden"] == [[200, 4], True]
    assert got["defaults_differ"] == []

    # the metadata is pyproject.toml's: one version, the declared dependencies
    project_table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert got["version"] == got["metadata_version"]
    declared = {str(Requirement(d)) for d in project_table["dependencies"]}
    required = {str(Requirement(r)) for r in got["requires"] if "extra ==" not in r}
    assert required == declared

    # the command is installed and starts from the new environment
    command = subprocess.run(
        [env / "bin" / "tapmachine", "--help"],
        cwd=elsewhere,
        env=outside_env(),
        capture_output=True,
        text=True,
    )
    assert command.returncode == 0 and "train" in command.stdout, command.stderr
