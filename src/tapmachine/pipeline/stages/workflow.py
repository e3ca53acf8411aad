"""What the Snakefile needs from Python beyond the config checks."""

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
