"""The one place that talks to MLflow.

The files under ``results/`` and each job's run record beside them (``pipeline.tracking.records``)
are the record; MLflow mirrors them so runs can be browsed and compared. Hence tracking is best
effort and cheap:

- every HTTP call is bounded (``MLFLOW_HTTP_REQUEST_TIMEOUT`` 10 s, no retries, unless the user
  set those variables), and a server is probed once (``/health``, 5 s) before a run is created;
- the first failed call disables tracking for the rest of the process (the job) with one line on
  stderr, so a job never waits on a dead store twice; ``tapmachine track`` replays the run
  records into a store afterwards, idempotently (``pipeline.stages.track``);
- experiments are looked up by name in the store actually used (``$MLFLOW_TRACKING_URI`` wins
  over the manifest's URI), so a manifest written for one store never sends runs to the wrong
  experiment of another;
- every run carries the git commit, user, source, config digest and config run name, and is
  nested under the parent run of its ``snakemake`` invocation in its experiment, opened by the
  experiment's first run (``invocation.open_invocation``, the Snakefile's ``onstart``, sets
  ``invocation`` in the job environment, ``environment``; its ``parent_runs``, experiment -> run
  id, names parents explicitly);
- SIGTERM inside ``start_run`` marks the run KILLED instead of leaving it RUNNING.

The store is created once, by ``init_store`` (a local rule and the Snakefile's ``onstart``), before
any parallel job: a fresh SQLite store breaks when several processes create its schema at once,
and an experiment first used concurrently through a server can receive runs in "Default".
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from tapmachine.core.errors import StoppedBySignal
from tapmachine.io.files import atomic_write
from tapmachine.pipeline.tracking import environment
from tapmachine.pipeline.tracking.records import flat_params

__all__ = [
    "EXPERIMENTS",
    "Run",
    "default_tracking_uri",
    "experiment_id",
    "init_store",
    "start_run",
    "ui_link",
    "standard_tags",
    "disabled_reason",
    "disable",
    "store_uri",
    "client_for",
    "warn",
    "invocation_parent",
    "STAGE_RUNS",
]

EXPERIMENTS = ("data", "train", "harvest", "likelihood", "figures", "benchmarks", "denoise", "ucd")

ENV_URI = "MLFLOW_TRACKING_URI"
#: Bounds on every MLflow HTTP request (defaults only: a user's own settings win).
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_MAX_BACKOFF": "2",
}
PROBE_TIMEOUT_S = 5.0
#: Tag telling stage runs ("stage") from the parent run of an invocation ("invocation"); search
#: with ``STAGE_RUNS`` as ``filter_string`` to leave the parents out.
KIND_TAG = "tapmachine.kind"
STAGE_RUNS = "tags.`tapmachine.kind` = 'stage'"

# Tracking URIs that failed in this process: every later call to them is skipped.
_DISABLED: dict[str, str] = {}


def disabled_reason(uri: str) -> str | None:
    """Why tracking to ``uri`` was disabled in this process, or None while it is enabled."""
    return _DISABLED.get(uri)


def disable(uri: str | None, what: str, err: BaseException) -> None:
    reason = f"{what} failed ({type(err).__name__}: {str(err)[:300]})"
    if uri is not None and uri not in _DISABLED:
        _DISABLED[uri] = reason
        print(
            f"tapmachine.pipeline.tracking: {reason}; tracking disabled for the rest of this job "
            "(results are unaffected; replay them later with `tapmachine track`)",
            file=sys.stderr,
            flush=True,
        )
    elif uri is None:
        print(f"tapmachine.pipeline.tracking: {reason}", file=sys.stderr, flush=True)


def default_tracking_uri(store_dir: str | os.PathLike) -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else an SQLite file ``mlflow.db`` inside ``store_dir``."""
    if os.environ.get(ENV_URI):
        return os.environ[ENV_URI]
    return "sqlite:///" + str(Path(store_dir).resolve() / "mlflow.db")


def _probe(uri: str) -> None:
    """One short request to a server's ``/health``; raises if it does not answer 200 in time."""
    if not uri.startswith(("http://", "https://")):
        return
    with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S) as resp:
        if resp.status != 200:
            raise ConnectionError(f"{uri}/health answered {resp.status}")


def client_for(uri: str, probe: bool = False):
    """An MlflowClient of ``uri`` (bounded HTTP calls; ``probe``: ask a server's /health first);
    raises if tracking to ``uri`` is disabled in this process."""
    if uri in _DISABLED:
        raise ConnectionError(f"tracking to {uri} is disabled: {_DISABLED[uri]}")
    for key, value in HTTP_LIMITS.items():
        os.environ.setdefault(key, value)
    if probe:
        _probe(uri)
    import mlflow  # imported lazily: mlflow takes seconds to import

    return mlflow.MlflowClient(tracking_uri=uri)


def init_store(
    store_dir: str | os.PathLike, manifest: str | os.PathLike, best_effort: bool = False
) -> dict:
    """Create the store (schema) and every experiment; write their ids to ``manifest`` (JSON).

    With the embedded SQLite store, artifacts go to ``store_dir/artifacts/<experiment>``. With
    ``MLFLOW_TRACKING_URI`` pointing at a server, the server decides where artifacts live.
    A server that does not answer fails here within seconds (``PROBE_TIMEOUT_S``); with
    ``best_effort`` that failure is printed and recorded in the manifest (``"error"``) instead of
    raised, so that the jobs depending on the manifest still run (each tries the store once).
    """
    store_dir = Path(store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    uri = default_tracking_uri(store_dir)
    try:
        client = client_for(uri, probe=True)
        ids = {name: _get_or_create(client, uri, store_dir, name) for name in EXPERIMENTS}
        info = {"tracking_uri": uri, "experiments": ids}
    except Exception as err:  # noqa: BLE001
        if not best_effort:
            raise
        disable(uri, "init_store", err)
        info = {"tracking_uri": uri, "experiments": {}, "error": _DISABLED.get(uri, str(err))}
    write_json_atomic(manifest, info)
    return info


def _get_or_create(client, uri: str, store_dir: Path, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    embedded = uri.startswith("sqlite:")
    location = (Path(store_dir) / "artifacts" / name).resolve().as_uri() if embedded else None
    try:
        return client.create_experiment(name, artifact_location=location)
    except Exception:  # noqa: BLE001 - created meanwhile by another process: look it up
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def write_json_atomic(path, obj) -> None:
    atomic_write(path, lambda fh: fh.write(json.dumps(obj, indent=2, sort_keys=True)), text=True)


def store_uri(manifest: str | os.PathLike) -> str:
    """The URI of the store used: ``$MLFLOW_TRACKING_URI`` if set now, else the manifest's."""
    return os.environ.get(ENV_URI) or json.loads(Path(manifest).read_text())["tracking_uri"]


def experiment_id(manifest: str | os.PathLike, name: str) -> tuple[str, str]:
    """(tracking URI, experiment id) of experiment ``name`` in the store actually used.

    The URI is ``$MLFLOW_TRACKING_URI`` if set now, else the one recorded in the manifest of
    ``init_store``; the id is looked up by name in that store (created there if missing), never
    copied from a manifest that may describe another store.
    """
    info = json.loads(Path(manifest).read_text())
    if name not in info.get("experiments", {}) and name not in EXPERIMENTS:
        raise KeyError(f"experiment {name!r} is not in the tracking manifest {manifest}")
    uri = os.environ.get(ENV_URI) or info["tracking_uri"]
    key = (uri, name)
    if key not in _IDS:
        client = client_for(uri, probe=True)
        _IDS[key] = _get_or_create(client, uri, Path(manifest).parent, name)
    return uri, _IDS[key]


_IDS: dict[tuple[str, str], str] = {}


def ui_link(base_url: str, experiment: str) -> str:
    """Link to the runs table of an experiment (MLflow 3 opens the GenAI view otherwise)."""
    return f"{base_url.rstrip('/')}/#/experiments/{experiment}?workflowType=machine_learning"


def warn(what: str, err: Exception) -> None:
    """One line on stderr saying that ``what`` failed (tracking goes on)."""
    print(
        f"tapmachine.pipeline.tracking: {what} failed ({type(err).__name__}: {err})",
        file=sys.stderr,
    )


_GIT_COMMIT: list[str | None] = []


def _git_commit() -> str | None:
    """HEAD of the repository holding this package (None outside git); asked once per process."""
    if not _GIT_COMMIT:
        try:
            out = subprocess.run(
                ["git", "rev-parse", "HEAD"],
                cwd=Path(__file__).resolve().parent,
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
            _GIT_COMMIT.append(out.stdout.strip() or None)
        except (OSError, subprocess.SubprocessError):
            _GIT_COMMIT.append(None)
    return _GIT_COMMIT[0]


def standard_tags() -> dict[str, str]:
    """Tags every run carries: git commit, user, source, config run name and digest."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (containers)
        user = str(os.getuid())
    command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:2]))
    tags = {"mlflow.user": user, "mlflow.source.type": "JOB", "mlflow.source.name": command}
    commit = environment.get("git_commit") or _git_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit
    for key, tag in (("run_name", "tapmachine.run_name"), ("config_digest", "config_digest")):
        if environment.get(key):
            tags[tag] = environment.get(key)
    return tags


def parent_from_env(experiment: str) -> str | None:
    parents = environment.get("parent_runs")
    return parents.get(experiment) if isinstance(parents, dict) else None


class Run:
    """A handle on one MLflow run; every method is best-effort (see module docstring)."""

    def __init__(self, client, run_id: str | None, uri: str | None = None):
        self._client = client
        self.run_id = run_id
        self._uri = uri

    @property
    def active(self) -> bool:
        return self.run_id is not None and (self._uri is None or self._uri not in _DISABLED)

    def _failed(self, what: str, err: BaseException) -> None:
        disable(self._uri, what, err)

    def log_params(self, params: Mapping) -> None:
        if not self.active:
            return
        try:
            from mlflow.entities import Param

            items = [Param(k, v) for k, v in flat_params(params).items()]
            for i in range(0, len(items), 100):
                self._client.log_batch(self.run_id, params=items[i : i + 100])
        except Exception as err:  # noqa: BLE001 - tracking must never lose a result
            self._failed("log_params", err)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.log_steps({step: metrics})

    def log_steps(self, steps: Mapping[int | None, Mapping[str, float]]) -> None:
        """The metrics of several steps (step -> {name: value}) in batches of 1,000 values: a
        store write per batch, not per step (a resumed job's thousands of epochs)."""
        if not self.active:
            return
        try:
            from mlflow.entities import Metric

            stamp = int(time.time() * 1000)
            items = [
                Metric(k, float(v), stamp, step or 0)
                for step, metrics in steps.items()
                for k, v in metrics.items()
                if v is not None and math.isfinite(float(v))
            ]
            for i in range(0, len(items), 1000):
                self._client.log_batch(self.run_id, metrics=items[i : i + 1000])
        except Exception as err:  # noqa: BLE001
            self._failed("log_metrics", err)

    def log_machine(
        self,
        model_file: str | os.PathLike,
        rows,
        dataset_file: str | os.PathLike | None = None,
        dataset_name: str | None = None,
        input_tags: Mapping[str, str] | None = None,
    ) -> str | None:
        """Log a trained machine (``model.pt``) as an MLflow model from code, registered under
        its config model's name, with ``rows``, the training rows, as the run's dataset input
        (``model_registry.log_machine``). Returns the model URI, or None (best effort)."""
        if not self.active:
            return None
        try:
            from tapmachine.pipeline.tracking import model_registry

            return model_registry.log_machine(
                self._uri, self.run_id, model_file, rows, dataset_file, dataset_name, input_tags
            )
        except Exception as err:  # noqa: BLE001
            self._failed("log_machine", err)
            return None

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        if not self.active:
            return
        try:
            self._client.log_artifact(self.run_id, str(path), artifact_path)
        except Exception as err:  # noqa: BLE001
            self._failed(f"log_artifact({path})", err)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into SystemExit(143) in the main thread, so the run is closed as KILLED."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def start_run(
    manifest: str | os.PathLike | None,
    experiment: str,
    run_name: str,
    params: Mapping | None = None,
    tags: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
    system_metrics: bool = False,
) -> Iterator[Run]:
    """Open a run in ``experiment``; mark it FINISHED, FAILED if the body raises, KILLED on
    SIGTERM or Ctrl-C (also when the body kept its state first: ``StoppedBySignal``). With
    ``system_metrics`` the run records CPU, memory, disk and network use (``system/*`` metrics,
    every ``$MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` s, default 10; needs psutil) while the
    body runs.

    ``manifest=None`` disables tracking (a library user without a store): the body still runs.
    Without ``parent_run_id`` the run is nested under this invocation's parent run of
    ``experiment`` (``parent_runs`` of ``environment``, else its ``invocation``'s, opened by
    the experiment's first run), if any.
    """
    client, run_id, uri = None, None, None
    if manifest is not None:
        try:
            uri = store_uri(manifest)
            uri, exp_id = experiment_id(manifest, experiment)
            client = client_for(uri)
            all_tags = {
                "mlflow.runName": run_name,
                "tapmachine.stage": experiment,
                KIND_TAG: "stage",
            }
            all_tags.update(standard_tags())
            parent = (
                parent_run_id
                or parent_from_env(experiment)
                or invocation_parent(client, experiment, exp_id)
            )
            if parent:
                all_tags["mlflow.parentRunId"] = parent
            all_tags.update(tags or {})
            run_id = client.create_run(exp_id, run_name=run_name, tags=all_tags).info.run_id
        except Exception as err:  # noqa: BLE001
            disable(uri, "start_run", err)
            client, run_id = None, None
    run = Run(client, run_id, uri)
    run.log_params(params or {})
    monitor = _system_monitor(run) if system_metrics else None
    guard = _sigterm_raises() if run.active else contextlib.nullcontext()
    with guard:
        try:
            yield run
        except (KeyboardInterrupt, SystemExit, StoppedBySignal):
            _terminate(run, "KILLED", monitor)
            raise
        except BaseException:
            _terminate(run, "FAILED", monitor)
            raise
        _terminate(run, "FINISHED", monitor)


def _system_monitor(run: Run):
    """MLflow's system metrics monitor on ``run``, started (None if the run is inactive)."""
    if not run.active:
        return None
    try:
        import logging

        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # its start/stop notices would clutter the job's log; warnings still show
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        monitor = SystemMetricsMonitor(run.run_id, tracking_uri=run._uri)
        monitor.start()
        return monitor
    except Exception as err:  # noqa: BLE001
        warn("system metrics", err)
        return None


def _terminate(run: Run, status: str, monitor=None) -> None:
    if monitor is not None:  # its last samples are logged while the run is still RUNNING
        monitor.finish()
    if run.active:
        try:
            run._client.set_terminated(run.run_id, status=status)
        except Exception as err:  # noqa: BLE001
            run._failed("set_terminated", err)


def invocation_parent(client, experiment: str, exp_id: str) -> str | None:
    """This invocation's parent run in ``experiment``, opened now if it is the experiment's first
    run (under an exclusive lock on the record: parallel jobs open one parent, not several)."""
    record = environment.get("invocation")
    if not record or not Path(record).exists():
        return None
    import fcntl

    with open(record, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        info = json.load(fh)
        parent = info["parents"].get(experiment)
        if parent is None:
            tags = {"mlflow.runName": info["name"], KIND_TAG: "invocation", **standard_tags()}
            parent = client.create_run(exp_id, run_name=info["name"], tags=tags).info.run_id
            info["parents"][experiment] = parent
            fh.seek(0)
            fh.truncate()
            json.dump(info, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
    return parent
