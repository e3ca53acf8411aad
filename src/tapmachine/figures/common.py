"""What every figure module shares: Agg figures, atomic PNG/PDF/CSV output, titles, claims.

A figure function returns a ``FigureResult``: the matplotlib figure, one table (``pandas``)
with what the figure draws (``kind`` = "drawn") and the numbers behind the paper's claims
(``kind`` = "claim": ``claim``, ``value``, ``detail``), and the model runs it used.
``save`` writes the three files atomically; ``track`` logs them to the "figures" experiment.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tapmachine.files import atomic_write

__all__ = [
    "FigureError",
    "FigureResult",
    "ModelInfo",
    "new_figure",
    "model_info",
    "claim",
    "table",
    "describe",
    "dataset_label",
    "save",
    "track",
]


class FigureError(Exception):
    """A figure cannot be drawn from its inputs (missing, inconsistent or empty files)."""


@dataclasses.dataclass
class ModelInfo:
    """What a figure needs to name a model: dataset, provenance and its MLflow runs."""

    name: str
    dataset: str
    substitute: str = ""
    train_run_id: str = ""
    harvest_run_ids: dict = dataclasses.field(default_factory=dict)
    sizes: tuple = ()


@dataclasses.dataclass
class FigureResult:
    figure: object
    table: object  # pandas.DataFrame
    models: list[ModelInfo]
    params: dict = dataclasses.field(default_factory=dict)


def new_figure(width: float, height: float):
    """A matplotlib Figure on an Agg canvas (no pyplot global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def model_info(model_file) -> ModelInfo:
    """The ModelInfo of a trained ``model.pt``."""
    import torch

    path = Path(model_file)
    if not path.exists():
        raise FigureError(f"{path} not found: train the model first")
    blob = torch.load(path, map_location="cpu", weights_only=False)
    sizes = tuple(int(W.shape[0]) for W in blob["machine"]["weights"][:1]) + tuple(
        int(W.shape[1]) for W in blob["machine"]["weights"]
    )
    return ModelInfo(
        name=str(blob.get("name", path.parent.name)),
        dataset=str(blob.get("dataset", "?")),
        substitute=str(blob.get("substitute") or ""),
        train_run_id=str(blob.get("mlflow_run_id") or ""),
        sizes=sizes,
    )


def describe(info: ModelInfo) -> str:
    """'model on dataset' with the substitute named, for titles."""
    text = f"{info.name} on {info.dataset}"
    if info.substitute:
        text += f" [SUBSTITUTE data: {info.substitute}]"
    return text


def dataset_label(dataset: str, substitute: str) -> str:
    return f"{dataset} [SUBSTITUTE: {substitute}]" if substitute else dataset


def claim(name: str, value, model: str = "", detail: str = "", epoch=None) -> dict:
    """A row of the claims part of a figure's table."""
    if isinstance(value, bool | np.bool_):
        value = float(value)
    return {
        "kind": "claim",
        "claim": name,
        "model": model,
        "epoch": epoch,
        "value": value,
        "detail": detail,
    }


def table(drawn, claims: Iterable[dict]):
    """One DataFrame: drawn rows first (``kind`` = "drawn"), then the claim rows."""
    import pandas as pd

    drawn = pd.DataFrame(drawn) if not isinstance(drawn, pd.DataFrame) else drawn.copy()
    drawn.insert(0, "kind", "drawn")
    claims = pd.DataFrame(list(claims))
    if claims.empty:
        return drawn
    frames = [f for f in (drawn, claims) if not f.empty]
    out = pd.concat(frames, ignore_index=True, sort=False)
    front = [c for c in ("kind", "claim", "model", "epoch", "value", "detail") if c in out]
    return out[front + [c for c in out.columns if c not in front]]


def save(result: FigureResult, png, pdf, csv) -> list[Path]:
    """Write the figure as PNG and PDF and its table as CSV (each atomically); the paths."""
    paths = [Path(png), Path(pdf), Path(csv)]
    written = []
    try:
        atomic_write(paths[0], lambda fh: result.figure.savefig(fh, format="png", dpi=110))
        written.append(paths[0])
        atomic_write(paths[1], lambda fh: result.figure.savefig(fh, format="pdf"))
        written.append(paths[1])
        atomic_write(paths[2], lambda fh: fh.write(result.table.to_csv(index=False).encode()))
        written.append(paths[2])
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return paths


def track(manifest, name: str, result: FigureResult, paths: list[Path]) -> str | None:
    """Log the three files of a figure to a run ``name`` in the "figures" experiment.

    Tags name the model runs it was drawn from (``train_run.<model>``; ``harvest_runs.<model>``
    as JSON epoch -> run id) so a user can go from the figure to the runs behind it.
    """
    from tapmachine import tracking

    tags = {"figure": name, "models": ",".join(m.name for m in result.models)}
    for m in result.models:
        if m.train_run_id:
            tags[f"train_run.{m.name}"] = m.train_run_id
        if m.harvest_run_ids:
            tags[f"harvest_runs.{m.name}"] = json.dumps(m.harvest_run_ids, sort_keys=True)
        if m.substitute:
            tags[f"substitute.{m.name}"] = m.substitute
    params = {"models": [m.name for m in result.models], **result.params}
    claims = result.table[result.table["kind"] == "claim"] if "kind" in result.table else None
    with tracking.start_run(manifest, "figures", name, params=params, tags=tags) as run:
        if claims is not None and len(claims):
            by_step: dict[int | None, dict[str, float]] = {}
            for _, row in claims.iterrows():
                try:
                    value = float(row["value"])
                except (TypeError, ValueError):
                    continue
                if not math.isfinite(value):
                    continue
                key = str(row["claim"])
                if isinstance(row.get("model"), str) and row["model"]:
                    key += f".{row['model']}"
                epoch = row.get("epoch")
                step = None
                if epoch is not None and not (isinstance(epoch, float) and math.isnan(epoch)):
                    step = int(epoch)  # the epoch is the metric's step, not part of its name
                by_step.setdefault(step, {})[_metric_key(key)] = value
            for step, metrics in sorted(
                by_step.items(), key=lambda kv: -1 if kv[0] is None else kv[0]
            ):
                run.log_metrics(metrics, step=step)
        for p in paths:
            run.log_artifact(p)
        return run.run_id


def _metric_key(key: str) -> str:
    """MLflow metric names allow alphanumerics, _ - . / and spaces."""
    return "".join(ch if ch.isalnum() or ch in "_-./ " else "_" for ch in key)[:250]
