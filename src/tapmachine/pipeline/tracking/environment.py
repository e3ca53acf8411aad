"""The one environment the workflow hands its jobs: ``TAPMACHINE_JOB``, a JSON object that the
Snakefile sets (and its ``onstart`` extends) and every job inherits, locally or through SLURM,
which passes the environment on.

Its keys, each optional:

- ``run_name``: the config's ``run.name`` (tag ``tapmachine.run_name`` of every run);
- ``config_digest``: the first 16 hex digits of the sha256 of the config (tag ``config_digest``);
- ``invocation``: the path of this ``snakemake`` invocation's record of parent runs
  (``invocation.open_invocation``);
- ``parent_runs``: experiment -> run id, parents named explicitly instead;
- ``git_commit``: the commit to tag runs with where a job cannot ask git.

``MLFLOW_TRACKING_URI`` (MLflow's own variable) overrides the store's URI and is not part of it.
"""

from __future__ import annotations

import json
import os

__all__ = ["VARIABLE", "KEYS", "get", "update"]

VARIABLE = "TAPMACHINE_JOB"
KEYS = ("run_name", "config_digest", "invocation", "parent_runs", "git_commit")


def _read() -> dict:
    try:
        values = json.loads(os.environ.get(VARIABLE) or "{}")
    except json.JSONDecodeError:
        return {}
    return values if isinstance(values, dict) else {}


def get(key: str):
    """The value of ``key`` (one of ``KEYS``) in this process's environment; None if unset."""
    if key not in KEYS:
        raise KeyError(f"{key!r} is not a key of ${VARIABLE} ({', '.join(KEYS)})")
    return _read().get(key) or None


def update(**values) -> None:
    """Set keys of the environment (a value of None removes its key), for this process and the
    processes it starts."""
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise KeyError(f"{unknown} are not keys of ${VARIABLE} ({', '.join(KEYS)})")
    merged = {**_read(), **values}
    os.environ[VARIABLE] = json.dumps({k: v for k, v in merged.items() if v is not None})
