"""The parent runs of one ``snakemake`` invocation: opened in an experiment by its first run
(``tracking.invocation_parent``), closed when the invocation ends. The Snakefile's ``onstart``
calls ``invocation_start``, its ``onsuccess``/``onerror`` ``invocation_end``."""

from __future__ import annotations

import datetime
import json
import os
import uuid
from pathlib import Path

from tapmachine.pipeline.tracking import environment
from tapmachine.pipeline.tracking import store as tracking

__all__ = [
    "open_invocation",
    "invocation_parents",
    "close_invocation",
    "invocation_start",
    "invocation_end",
    "remake_store",
]


def open_invocation(
    store_dir: str | os.PathLike, manifest: str | os.PathLike, name: str
) -> Path | None:
    """Start this ``snakemake`` invocation's record of parent runs (the store is made first
    unless ``manifest`` already describes it), with none in it yet.

    The first run an experiment gets in this invocation opens its parent run there
    (``tracking.invocation_parent``), so parents exist only in the experiments the
    invocation uses. The record is a JSON file beside the manifest
    (``invocations/<id>.json``, experiment -> parent run id), exported as ``invocation`` of the
    job environment (``environment``) so that every job started afterwards (locally or through
    SLURM, which passes the environment on, over the shared file system) finds it.
    Returns its path; best effort: on failure prints one line and returns None.
    """
    uri = None
    try:
        uri = tracking.default_tracking_uri(store_dir)
        info = json.loads(Path(manifest).read_text()) if Path(manifest).exists() else {}
        if "error" in info or info.get("tracking_uri") != uri or not info.get("experiments"):
            tracking.init_store(store_dir, manifest)
        record = Path(manifest).resolve().parent / "invocations" / f"{uuid.uuid4().hex}.json"
        tracking.write_json_atomic(record, {"name": name, "parents": {}})
    except Exception as err:  # noqa: BLE001
        tracking.disable(uri, "opening the invocation's record of parent runs", err)
        return None
    environment.update(invocation=str(record))
    return record


def invocation_parents() -> dict[str, str]:
    """This invocation's parent runs so far, experiment -> run id."""
    record = environment.get("invocation")
    try:
        return dict(json.loads(Path(record).read_text())["parents"]) if record else {}
    except (OSError, ValueError, KeyError):
        return {}


def close_invocation(manifest: str | os.PathLike, status: str) -> dict[str, str]:
    """Mark this invocation's parent runs FINISHED or FAILED and remove its record; returns
    them (experiment -> run id)."""
    parents = invocation_parents()
    record = environment.get("invocation")
    uri = None
    try:
        if parents:
            uri = tracking.store_uri(manifest)
            client = tracking.client_for(uri)
            for run_id in parents.values():
                client.set_terminated(run_id, status=status)
        if record:
            Path(record).unlink(missing_ok=True)
    except Exception as err:  # noqa: BLE001
        tracking.disable(uri, "closing the invocation's parent runs", err)
    return parents


def invocation_start(store, manifest, run_name: str) -> Path | None:
    """Snakefile ``onstart``: this invocation's record of parent runs
    (``open_invocation``: a parent opens in an experiment with its first run)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    name = f"snakemake {run_name} {stamp}"
    record = open_invocation(store, manifest, name)
    if record is not None:
        print(f"tapmachine: MLflow parent runs '{name}' open in each experiment this run uses")
    return record


def remake_store(store, manifest) -> str:
    """Snakefile ``onstart`` where the store's ``manifest`` was missing though results exist: make
    the store (best effort, ``store.init_store``) and return why the run stops before any job.

    The manifest is an ancient() input of every rule; missing when the DAG of a run with jobs
    was built, it made its rule (``tracking_init``) and so every rule after it run again. Made
    now, the next run makes only what is missing."""
    tracking.init_store(store, manifest, best_effort=True)
    return (
        f"tapmachine: the tracking store's manifest {manifest} was missing though results exist; "
        "made the store now and stopped before any job, so that no result is made again: "
        "run again"
    )


def invocation_end(ok: bool, store, manifest, results, data="results/data") -> str:
    """Snakefile ``onsuccess``/``onerror``: close the parent runs, print a short summary (what was
    made and where, failures, the ``mlflow ui`` command and the link to the runs table)."""
    close_invocation(manifest, "FINISHED" if ok else "FAILED")
    uri = tracking.default_tracking_uri(store)
    results = Path(results)
    figures = sorted(results.glob("figures/*.png"))
    models = sorted(p.parent.name for p in results.glob("models/*/model.pt"))
    lines = [
        "",
        "tapmachine summary: "
        + ("success" if ok else "FAILED (the failing jobs and their logs are named above)"),
        f"  results in {results}/ (datasets in {data}/), logs in logs/{results.name}/, "
        f"timings in benchmarks/{results.name}/",
        f"  models ({len(models)}): {', '.join(models) or 'none yet'}",
        f"  figures ({len(figures)}) in {results}/figures/: "
        f"{', '.join(p.name for p in figures) or 'none yet'}",
        "  every figure with its caption in one page: snakemake --report report.html "
        "(with the same --configfile)",
    ]
    base = uri
    if uri.startswith("sqlite:"):
        lines.append(f"  browse the runs: mlflow ui --backend-store-uri {uri} --port 5000")
        base = "http://127.0.0.1:5000"
    try:
        exp = json.loads(Path(manifest).read_text())["experiments"].get("train")
    except (OSError, ValueError, KeyError):
        exp = None
    if exp:
        lines.append(f"  training runs table: {tracking.ui_link(base, exp)}")
    lines.append(
        f"  runs missing in MLflow? replay the run records: tapmachine track --results {results}"
    )
    text = "\n".join(lines)
    print(text)
    return text
