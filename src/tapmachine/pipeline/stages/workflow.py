"""What the Snakefile needs from Python beyond the config checks, and ``tapmachine
set-aside-damaged`` (rule ``set_aside_damaged``)."""

from __future__ import annotations

import os
from pathlib import Path


def jobs_run_checkout(basedir: str | os.PathLike) -> None:
    """Make jobs run this checkout's package: ``src/`` on PYTHONPATH, ``workflow/bin/`` (a
    ``tapmachine`` running ``python -m tapmachine.pipeline.cli``) first on PATH.

    For ``--sdm conda``, whose env (envs/tapmachine.yaml) holds the dependencies only: Snakemake
    copies the env file, so it cannot install the package by a relative path.
    """
    basedir = Path(basedir)
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(basedir / "src"), path) if p)
    os.environ["PATH"] = f"{basedir / 'workflow' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def result_files(data_dir: str | os.PathLike, results_dir: str | os.PathLike) -> list[Path]:
    """The files of a results tree that ``io.files.damage`` checks: the datasets
    (``data_dir/*.npz``) and, under ``results_dir``, every ``model.pt``, ``.npz`` and ``.csv``."""
    results = Path(results_dir)
    return [
        *sorted(Path(data_dir).glob("*.npz")),
        *sorted(results.glob("**/model.pt")),
        *sorted(results.glob("**/*.npz")),
        *sorted(results.glob("**/*.csv")),
    ]


def set_aside(args) -> None:
    from tapmachine.io.files import set_aside_damaged

    found = set_aside_damaged(result_files(args.data, args.results))
    for path, reason in found:
        print(f"{path} is corrupt ({reason}): set aside as {path.name}.corrupt")
    print(f"{len(found)} damaged files set aside; a run makes them again")


def register(subparsers) -> None:
    s = subparsers.add_parser(
        "set-aside-damaged",
        help="rename damaged datasets, models and CSVs to <name>.corrupt (their rules run again)",
    )
    s.add_argument("--data", required=True, help="directory of the datasets (results/data)")
    s.add_argument("--results", required=True, help="directory of one config run (results/{run})")
    s.set_defaults(func=set_aside)
