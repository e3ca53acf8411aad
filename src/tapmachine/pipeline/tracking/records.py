"""One run record per job: what a stage's MLflow run holds, kept beside its output.

A stage builds one ``RunRecord`` (experiment, run name, params, tags, links to other runs,
metrics by step, series files, artifacts) and hands it to ``pipeline.tracking.recorder``, which
logs it live and writes it atomically beside the output as ``<output stem>.run.json``. ``tapmachine
track`` (``pipeline.stages.track``) replays the records found under ``results/`` without knowing
any stage. Paths inside a record are relative to the record's folder, so a results folder can
be moved or copied whole.

Links name other runs by (experiment, run name); their ids are looked up when the record is
logged (live or replayed), so a record never holds an id of one particular store except its own
live ``run_id``, a hint the replay prefers where the store has that run.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tapmachine.io.files import atomic_write

__all__ = [
    "RunRecord",
    "Series",
    "flat_params",
    "record_path",
    "write_record",
    "read_record",
    "source_run",
    "find_records",
]

SUFFIX = ".run.json"


def flat_params(params: Mapping, prefix: str = "") -> dict[str, str]:
    """Params as MLflow keeps them: nested keys joined by dots, lists as JSON, everything else
    ``str``, at most 6000 characters (a flat dict of strings is its own flattening)."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_params(value, prefix=f"{name}."))
        else:
            text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
            flat[name] = text[:6000]
    return flat


@dataclass
class Series:
    """A CSV whose rows are metric steps: ``step`` names the step column (rows without one are
    step None); the other numeric columns are metrics, except those in ``skip``."""

    file: str
    step: str | None = "epoch"
    skip: list[str] = field(default_factory=list)


@dataclass
class RunRecord:
    """One job's run. ``links``: tag -> (experiment, run name[, live run id]) of another run,
    logged as the id of that run in the store used (the live id where the store has it);
    ``link_groups``: tag -> {key: such a link}, logged as JSON key -> id ("" for a run the
    store lacks); ``metrics``: step (None: no step) -> {name: value};
    ``series``: CSV files holding further metrics by step; ``artifacts``: (path, artifact
    folder or None); ``machine``: (model.pt, dataset .npz, number of training rows or None),
    logged as an MLflow model with its dataset; ``run_id``: the live run's id, once logged;
    ``output``: the file the record was written beside (set by ``write_record``)."""

    experiment: str
    name: str
    params: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    links: dict = field(default_factory=dict)
    link_groups: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    series: list[Series] = field(default_factory=list)
    artifacts: list = field(default_factory=list)
    machine: tuple | None = None
    run_id: str | None = None
    output: Path | None = None

    def link(self) -> tuple:
        """A link to this run: (experiment, run name, its live run id as a hint)."""
        return (self.experiment, self.name, self.run_id)

    def add_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        self.metrics.setdefault(step, {}).update({k: float(v) for k, v in values.items()})

    def all_metrics(self) -> dict[int | None, dict[str, float]]:
        """``metrics`` and the steps of every series file that exists, finite values only."""
        steps: dict[int | None, dict[str, float]] = {}
        for series in self.series:
            if Path(series.file).exists():
                for step, values in read_series(Path(series.file), series).items():
                    steps.setdefault(step, {}).update(values)
        for step, values in self.metrics.items():
            steps.setdefault(step, {}).update(values)
        return {s: {k: v for k, v in vals.items() if math.isfinite(v)} for s, vals in steps.items()}

    def to_json(self, folder: Path) -> dict:
        def rel(p):
            return os.path.relpath(Path(p).resolve(), folder.resolve())

        machine = None
        if self.machine is not None:
            model, dataset, rows = self.machine
            machine = {"model": rel(model), "dataset": rel(dataset), "rows": rows}
        return {
            "experiment": self.experiment,
            "name": self.name,
            "params": flat_params(self.params),
            "tags": {k: str(v) for k, v in self.tags.items()},
            "links": {k: list(v) for k, v in self.links.items()},
            "link_groups": {
                k: {kk: list(vv) for kk, vv in g.items()} for k, g in self.link_groups.items()
            },
            "metrics": [
                {"step": s, "values": v}
                for s, v in sorted(self.metrics.items(), key=lambda kv: _order(kv[0]))
            ],
            "series": [{**vars(s), "file": rel(s.file)} for s in self.series],
            "artifacts": [{"path": rel(p), "folder": f} for p, f in _pairs(self.artifacts)],
            "machine": machine,
            "run_id": self.run_id,
            "output": None if self.output is None else rel(self.output),
        }

    @classmethod
    def from_json(cls, blob: dict, folder: Path) -> RunRecord:
        def at(rel: str) -> Path:
            return Path(os.path.normpath(folder / rel))

        machine = blob.get("machine")
        if machine is not None:
            machine = (at(machine["model"]), at(machine["dataset"]), machine["rows"])
        return cls(
            experiment=blob["experiment"],
            name=blob["name"],
            params=dict(blob["params"]),
            tags=dict(blob["tags"]),
            links={k: tuple(v) for k, v in blob["links"].items()},
            link_groups={
                k: {kk: tuple(vv) for kk, vv in g.items()} for k, g in blob["link_groups"].items()
            },
            metrics={m["step"]: m["values"] for m in blob["metrics"]},
            series=[Series(**{**s, "file": str(at(s["file"]))}) for s in blob["series"]],
            artifacts=[(at(a["path"]), a["folder"]) for a in blob["artifacts"]],
            machine=machine,
            run_id=blob.get("run_id"),
            output=at(blob["output"]) if blob.get("output") else None,
        )


def _order(step) -> int:
    return -1 if step is None else step


def _pairs(artifacts) -> list[tuple]:
    return [a if isinstance(a, tuple) else (a, None) for a in artifacts]


def read_series(path: Path, series: Series) -> dict[int | None, dict[str, float]]:
    """The metrics of a series CSV by step: every numeric, non-missing value of each row."""
    import pandas as pd

    table = pd.read_csv(path)
    steps: dict[int | None, dict[str, float]] = {}
    for row in table.to_dict("records"):
        step = row.get(series.step) if series.step else None
        step = None if _missing(step) else int(step)
        values = steps.setdefault(step, {})
        for key, value in row.items():
            if key == series.step or key in series.skip or isinstance(value, bool | str):
                continue
            if not _missing(value):
                values[str(key)] = float(value)
    return steps


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def record_path(output: str | os.PathLike) -> Path:
    """Where the record of the job writing ``output`` lives: ``<output stem>.run.json``."""
    return Path(output).with_suffix(SUFFIX)


def write_record(record: RunRecord, output: str | os.PathLike) -> Path:
    """Write ``record`` beside ``output`` as JSON, atomically."""
    record.output = Path(output)
    path = record_path(output)
    text = json.dumps(record.to_json(path.parent), indent=1, sort_keys=True)
    return atomic_write(path, lambda fh: fh.write(text), text=True)


def read_record(path: str | os.PathLike) -> RunRecord:
    """The record in ``path`` (a ``*.run.json``)."""
    path = Path(path)
    return RunRecord.from_json(json.loads(path.read_text()), path.parent)


def source_run(output: str | os.PathLike) -> tuple | None:
    """The link to the run that wrote ``output``, from its record: (experiment, run name, live
    run id or None); None if it has no record (a file made outside the workflow)."""
    path = record_path(output)
    if not path.exists():
        return None
    return read_record(path).link()


def find_records(*folders: str | os.PathLike) -> list[Path]:
    """Every record under ``folders`` (sorted, each folder in turn; None or "" is none)."""
    found = []
    for folder in folders:
        if folder and Path(folder).is_dir():
            found += sorted(Path(folder).rglob(f"*{SUFFIX}"))
    return found
