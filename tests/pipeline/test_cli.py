"""The command line as a user starts it: ``python -m tapmachine``, and ``--help`` without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_HELP_THEN_MODULES = """
import runpy, sys
sys.argv = ["tapmachine", "--help"]
try:
    runpy.run_module("tapmachine", run_name="__main__")
except SystemExit as stop:
    assert stop.code == 0, stop.code
print("LOADED", " ".join(sorted(m for m in ("torch", "mlflow", "pandas") if m in sys.modules)))
"""


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def test_python_m_tapmachine_help_does_not_import_torch():
    out = subprocess.run(
        [sys.executable, "-c", _HELP_THEN_MODULES], env=_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "usage: tapmachine" in out.stdout and "train" in out.stdout
    loaded = out.stdout.strip().splitlines()[-1]
    assert loaded == "LOADED", loaded  # none of torch, mlflow, pandas


def test_python_m_tapmachine_runs_a_command_and_reports_usage_errors():
    ok = subprocess.run(
        [sys.executable, "-m", "tapmachine", "train", "--help"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "--model" in ok.stdout, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "tapmachine", "no-such-command"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_licence_file_matches_pyproject():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "LICENSE").read_text()
    assert meta["license"]["text"] == "MIT"
    assert text.startswith("MIT License") and "the tapmachine developers" in text
