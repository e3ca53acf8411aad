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
    assert meta["license"] == "MIT" and meta["license-files"] == ["LICENSE"]
    assert text.startswith("MIT License") and "the tapmachine developers" in text


def test_every_error_class_is_a_tapmachine_error_printed_as_one_line(capsys, monkeypatch):
    """Each package's error subclasses ``TapmachineError``, and the command prints any of them,
    a message over several lines included, as one line with status 2."""
    import ast

    from tapmachine.core.errors import TapmachineError
    from tapmachine.pipeline import cli
    from tapmachine.pipeline.stages import common

    package = ROOT / "src" / "tapmachine"
    plain = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ClassDef)
                and node.name.endswith("Error")
                and node.name != "TapmachineError"
            ):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if not bases & {"TapmachineError", "ModelFileError"}:
                    plain.append(f"{path.relative_to(package)}:{node.name}")
    assert not plain, plain

    from tapmachine.pipeline.stages import train

    def fail(*args, **kwargs):
        raise common.UsageError("first line\n  second line")

    # looked up in the stage's module when the command runs, whichever test imported it first
    monkeypatch.setattr(train, "train_model", fail)
    code = cli.main(["train", "--model", "m", "--spec", "{}", "--data", "d", "--outdir", "o"])
    err = capsys.readouterr().err
    assert code == 2 and err == "tapmachine: error: first line second line\n", err
    assert issubclass(common.UsageError, TapmachineError)


def test_figure_commands_come_from_one_table_in_any_order():
    """``tapmachine figure`` offers exactly the figures of ``stages.figures.FIGURES``, whatever
    order the stages register in, and no module reaches into argparse's private attributes."""
    import argparse
    import ast

    from tapmachine.pipeline import cli
    from tapmachine.pipeline.stages.figures import FIGURES

    def figure_names(parser):
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        (figs,) = [
            a for a in sub.choices["figure"]._actions if isinstance(a, argparse._SubParsersAction)
        ]
        return set(figs.choices)

    forward = figure_names(cli._parser())
    try:
        cli.STAGES = tuple(reversed(cli.STAGES))
        backward = figure_names(cli._parser())
    finally:
        cli.STAGES = tuple(reversed(cli.STAGES))
    assert forward == backward == set(FIGURES)
    private = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "src" / "tapmachine").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("_actions", "_SubParsersAction")
    ]
    assert not private, private
