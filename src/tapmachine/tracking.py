"""The one place that talks to MLflow.

Files under ``results/`` are the record; MLflow mirrors them so runs can be browsed and compared.
Hence every call after a run has started is best-effort: a tracking failure is reported on stderr
and never loses or aborts the computation that produced the result.

The store is created once, by ``init_store`` (a local Snakemake rule), before any parallel job:
a fresh SQLite store breaks when several processes create its schema at once, and a named experiment
first used concurrently through a server can silently receive runs in "Default". ``init_store``
therefore creates every experiment and writes their ids to a JSON file that jobs read.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from tapmachine.files import atomic_write

__all__ = [
    "EXPERIMENTS",
    "Run",
    "default_tracking_uri",
    "experiment_id",
    "init_store",
    "start_run",
    "attach_run",
    "ui_link",
]

EXPERIMENTS = ("data", "train", "harvest", "likelihood", "figures", "benchmarks", "denoise", "ucd")

_ENV = "MLFLOW_TRACKING_URI"


def default_tracking_uri(store_dir: str | os.PathLike) -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else an SQLite file ``mlflow.db`` inside ``store_dir``."""
    if os.environ.get(_ENV):
        return os.environ[_ENV]
    return "sqlite:///" + str(Path(store_dir).resolve() / "mlflow.db")


def _client(uri: str):
    import mlflow  # imported lazily: mlflow takes seconds to import

    return mlflow.MlflowClient(tracking_uri=uri)


def init_store(store_dir: str | os.PathLike, manifest: str | os.PathLike) -> dict:
    """Create the store (schema) and every experiment; write their ids to ``manifest`` (JSON).

    With the embedded SQLite store, artifacts go to ``store_dir/artifacts/<experiment>``. With
    ``MLFLOW_TRACKING_URI`` pointing at a server, the server decides where artifacts live.
    """
    store_dir = Path(store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    uri = default_tracking_uri(store_dir)
    client = _client(uri)
    embedded = uri.startswith("sqlite:")
    ids = {}
    for name in EXPERIMENTS:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            location = (store_dir / "artifacts" / name).resolve().as_uri() if embedded else None
            ids[name] = client.create_experiment(name, artifact_location=location)
        else:
            ids[name] = exp.experiment_id
    info = {"tracking_uri": uri, "experiments": ids}
    _write_json_atomic(manifest, info)
    return info


def _write_json_atomic(path, obj) -> None:
    atomic_write(path, lambda fh: fh.write(json.dumps(obj, indent=2, sort_keys=True)), text=True)


def experiment_id(manifest: str | os.PathLike, name: str) -> tuple[str, str]:
    """(tracking URI, experiment id) of experiment ``name`` from the manifest of ``init_store``.

    ``$MLFLOW_TRACKING_URI``, if set now, wins over the URI recorded in the manifest.
    """
    info = json.loads(Path(manifest).read_text())
    if name not in info["experiments"]:
        raise KeyError(f"experiment {name!r} is not in the tracking manifest {manifest}")
    uri = os.environ.get(_ENV) or info["tracking_uri"]
    return uri, info["experiments"][name]


def ui_link(base_url: str, experiment: str) -> str:
    """Link to the runs table of an experiment (MLflow 3 opens the GenAI view otherwise)."""
    return f"{base_url.rstrip('/')}/#/experiments/{experiment}?workflowType=machine_learning"


def _warn(what: str, err: Exception) -> None:
    print(f"tapmachine.tracking: {what} failed ({type(err).__name__}: {err})", file=sys.stderr)


def _flatten(params: Mapping, prefix: str = "") -> dict[str, str]:
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, prefix=f"{name}."))
        else:
            text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
            flat[name] = text[:6000]
    return flat


class Run:
    """A handle on one MLflow run; every method is best-effort (see module docstring)."""

    def __init__(self, client, run_id: str | None):
        self._client = client
        self.run_id = run_id

    @property
    def active(self) -> bool:
        return self.run_id is not None

    def log_params(self, params: Mapping) -> None:
        if not self.active:
            return
        from mlflow.entities import Param

        try:
            items = [Param(k, v) for k, v in _flatten(params).items()]
            for i in range(0, len(items), 100):
                self._client.log_batch(self.run_id, params=items[i : i + 100])
        except Exception as err:  # noqa: BLE001 - tracking must never lose a result
            _warn("log_params", err)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not self.active:
            return
        from mlflow.entities import Metric

        try:
            stamp = int(time.time() * 1000)
            items = [
                Metric(k, float(v), stamp, step or 0)
                for k, v in metrics.items()
                if v is not None and math.isfinite(float(v))
            ]
            if items:
                self._client.log_batch(self.run_id, metrics=items)
        except Exception as err:  # noqa: BLE001
            _warn("log_metrics", err)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if not self.active:
            return
        try:
            for k, v in tags.items():
                self._client.set_tag(self.run_id, k, str(v))
        except Exception as err:  # noqa: BLE001
            _warn("set_tags", err)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        if not self.active:
            return
        try:
            self._client.log_artifact(self.run_id, str(path), artifact_path)
        except Exception as err:  # noqa: BLE001
            _warn(f"log_artifact({path})", err)


@contextlib.contextmanager
def start_run(
    manifest: str | os.PathLike | None,
    experiment: str,
    run_name: str,
    params: Mapping | None = None,
    tags: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
) -> Iterator[Run]:
    """Open a run in ``experiment``; mark it FINISHED, or FAILED if the body raises.

    ``manifest=None`` disables tracking (a library user without a store): the body still runs.
    """
    client, run_id = None, None
    if manifest is not None:
        try:
            uri, exp_id = experiment_id(manifest, experiment)
            client = _client(uri)
            all_tags = {"mlflow.runName": run_name, "tapmachine.stage": experiment}
            if parent_run_id:
                all_tags["mlflow.parentRunId"] = parent_run_id
            all_tags.update(tags or {})
            run_id = client.create_run(exp_id, run_name=run_name, tags=all_tags).info.run_id
        except Exception as err:  # noqa: BLE001
            _warn("start_run", err)
            client, run_id = None, None
    run = Run(client, run_id)
    run.log_params(params or {})
    try:
        yield run
    except BaseException:
        _terminate(run, "FAILED")
        raise
    _terminate(run, "FINISHED")


def _terminate(run: Run, status: str) -> None:
    if run.active:
        try:
            run._client.set_terminated(run.run_id, status=status)
        except Exception as err:  # noqa: BLE001
            _warn("set_terminated", err)


def attach_run(manifest: str | os.PathLike | None, run_id: str | None) -> Run:
    """A handle on an existing run (e.g. a model's training run) to add metrics or artifacts.

    The run's status is left as it is. Without a manifest or run id the handle does nothing.
    """
    if manifest is None or not run_id:
        return Run(None, None)
    try:
        info = json.loads(Path(manifest).read_text())
        uri = os.environ.get(_ENV) or info["tracking_uri"]
        return Run(_client(uri), run_id)
    except Exception as err:  # noqa: BLE001
        _warn("attach_run", err)
        return Run(None, None)
