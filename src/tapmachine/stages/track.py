"""``tapmachine track``: replay the files of ``results/`` into an MLflow store, idempotently.

Tracking during a run is best effort (``tapmachine.tracking``): a store that is down, or a job
killed before it logged, leaves the result files complete and the store short. This command
rebuilds the missing runs from the files alone: datasets (``results/data``), training
(``models/*/metrics.csv``), harvests (``solutions/*/epoch_*.csv``), likelihood scores
(``likelihood/*/*.csv``) and figures (``figures/*.csv`` with their PNG/PDF). A run already present
(same experiment, run name, config run name and FINISHED) is kept, so a second replay adds
nothing; replayed runs carry ``tapmachine.replayed = true``.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tapmachine import tracking

__all__ = [
    "TrackError",
    "Item",
    "items",
    "replay",
    "register",
    "invocation_start",
    "invocation_end",
]


class TrackError(Exception):
    """The store cannot be reached or the results directory is not one."""


@dataclass
class Item:
    """One run to be: experiment, run name, params, metric rows (step -> values), artifacts."""

    experiment: str
    name: str
    params: dict = field(default_factory=dict)
    steps: dict[int | None, dict[str, float]] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


def _numeric_rows(csv: Path, step_column: str | None = "epoch"):
    import pandas as pd

    table = pd.read_csv(csv)
    steps: dict[int | None, dict[str, float]] = {}
    for _, row in table.iterrows():
        step = None
        if step_column in table and not _missing(row[step_column]):
            step = int(row[step_column])
        values = steps.setdefault(step, {})
        for key, value in row.items():
            if key == step_column or isinstance(value, bool | str) or _missing(value):
                continue
            try:
                values[str(key)] = float(value)
            except (TypeError, ValueError):
                continue
    return table, steps


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _claims(csv: Path) -> dict[int | None, dict[str, float]]:
    """The claims of a figure table as metrics (same names and steps as the live runs)."""
    import pandas as pd

    from tapmachine.stages.figures import claim_metrics

    return claim_metrics(pd.read_csv(csv))


def items(results: Path, data: Path | None) -> Iterator[Item]:
    """Every run the files of ``results`` (and the datasets in ``data``) stand for."""
    if data is not None and data.is_dir():
        for npz in sorted(data.glob("*.npz")):
            with np.load(npz, allow_pickle=False) as z:
                sizes = {k: int(z[k].shape[0]) for k in ("x_train", "x_test") if k in z.files}
            metrics = {f"n_{k[2:]}": v for k, v in sizes.items()}
            yield Item("data", npz.stem, {"file": str(npz)}, {None: metrics}, [], {})
    for csv in sorted(results.glob("models/*/metrics.csv")):
        _, steps = _numeric_rows(csv)
        model = csv.parent.name
        yield Item("train", model, {"model": model}, steps, [csv], {"model": model})
    for csv in sorted(results.glob("solutions/*/epoch_*.csv")):
        model, epoch = csv.parent.name, int(csv.stem.split("_")[1])
        import pandas as pd

        n_unique = len(pd.read_csv(csv))
        npz = csv.with_suffix(".npz")
        arts = [p for p in (npz, csv) if p.exists()]
        tags = {"model": model, "epoch": str(epoch)}
        yield Item(
            "harvest", f"{model}/epoch_{epoch}", {}, {epoch: {"n_unique": n_unique}}, arts, tags
        )
    for csv in sorted(results.glob("likelihood/*/*.csv")):
        model = csv.parent.name
        kind = {"scores": "epochs", "final": "final"}.get(csv.stem, csv.stem)
        _, steps = _numeric_rows(csv)
        yield Item("likelihood", f"{model}-{kind}", {}, steps, [csv], {"model": model})
    for csv in sorted(results.glob("figures/*.csv")):
        arts = [p for p in (csv.with_suffix(".png"), csv.with_suffix(".pdf"), csv) if p.exists()]
        yield Item("figures", csv.stem, {}, _claims(csv), arts, {"figure": csv.stem})


def _present(client, exp_id: str, name: str, run_name: str) -> bool:
    quoted = name.replace("'", "\\'")
    filt = (
        f"attributes.run_name = '{quoted}' and attributes.status = 'FINISHED' "
        f"and tags.`tapmachine.run_name` = '{run_name}'"
    )
    return bool(client.search_runs([exp_id], filt, max_results=1))


def replay(results, store, manifest=None, data=None, run_name=None) -> dict[str, int]:
    """Replay ``results`` into the store (``$MLFLOW_TRACKING_URI`` or ``store``/mlflow.db).

    Returns {"replayed": n, "present": m}. Raises TrackError if the store fails.
    """
    results = Path(results)
    if not results.is_dir():
        raise TrackError(f"--results {results}: no such directory")
    run_name = run_name or results.name
    manifest = Path(manifest) if manifest else Path(store) / "experiments.json"
    try:
        info = tracking.init_store(store, manifest)
    except Exception as err:  # noqa: BLE001 - replay must say why it could not start
        raise TrackError(f"tracking store {tracking.default_tracking_uri(store)}: {err}") from err
    uri = info["tracking_uri"]
    client = tracking._client(uri)
    counts = {"replayed": 0, "present": 0}
    for item in items(results, Path(data) if data else None):
        exp_id = info["experiments"][item.experiment]
        label = f"{item.experiment}/{item.name}"
        if _present(client, exp_id, item.name, run_name):
            counts["present"] += 1
            print(f"present  {label}")
            continue
        tags = {**item.tags, "tapmachine.run_name": run_name, "tapmachine.replayed": "true"}
        with tracking.start_run(manifest, item.experiment, item.name, item.params, tags) as run:
            for step, values in sorted(item.steps.items(), key=lambda kv: kv[0] or 0):
                run.log_metrics(values, step=step)
            for path in item.artifacts:
                run.log_artifact(path)
        if tracking.disabled_reason(uri):
            raise TrackError(f"replaying {label}: {tracking.disabled_reason(uri)}")
        counts["replayed"] += 1
        print(f"replayed {label}")
    return counts


def invocation_start(store, manifest, run_name: str) -> dict[str, str]:
    """Snakefile ``onstart``: the parent runs of this invocation (``tracking.open_invocation``)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    name = f"snakemake {run_name} {stamp}"
    parents = tracking.open_invocation(store, manifest, name)
    if parents:
        print(f"tapmachine: MLflow parent runs '{name}' opened in {', '.join(sorted(parents))}")
    return parents


def invocation_end(ok: bool, store, manifest, results, data="results/data") -> str:
    """Snakefile ``onsuccess``/``onerror``: close the parent runs, print a short summary (what was
    made and where, failures, the ``mlflow ui`` command and the link to the runs table)."""
    tracking.close_invocation(manifest, "FINISHED" if ok else "FAILED")
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
        f"  figures ({len(figures)}): {', '.join(p.name for p in figures) or 'none yet'}",
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
        f"  runs missing in MLflow? replay the files: tapmachine track --results {results}"
    )
    text = "\n".join(lines)
    print(text)
    return text


def _cmd_track(args) -> None:
    counts = replay(args.results, args.store, args.manifest, args.data, args.run_name)
    print(
        f"tapmachine track: {counts['replayed']} runs replayed, {counts['present']} already "
        f"in the store ({tracking.default_tracking_uri(args.store)})"
    )


def register(subparsers) -> None:
    s = subparsers.add_parser(
        "track", help="replay the files of results/ into an MLflow store (idempotent)"
    )
    s.add_argument("--results", default="results/default", help="results/{run name}")
    s.add_argument("--data", default="results/data", help="shared datasets ('' to skip)")
    s.add_argument("--store", default="results/mlflow", help="embedded store directory")
    s.add_argument("--manifest", default=None, help="default: STORE/experiments.json")
    s.add_argument("--run-name", default=None, help="config run name (default: RESULTS's name)")
    s.set_defaults(func=_cmd_track)
