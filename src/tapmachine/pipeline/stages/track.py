"""``tapmachine track``: replay the files of ``results/`` into an MLflow store, idempotently.

Tracking during a run is best effort (``pipeline.tracking``): a store that is down, or a job
killed before it logged, leaves the result files complete and the store short. This command
rebuilds the missing runs from the files alone, under the names the live jobs give them:

- datasets (``results/data/*.npz``, experiment ``data``; the binary CIFAR-10 of ``tapmachine ucd
  cifar10`` as ``ucd/data_binary_cifar10``);
- training (``models/*/metrics.csv``, with the machine as an MLflow model when ``model.pt`` and
  its dataset are there; ``train``);
- harvests (``solutions/*/epoch_*.npz``/``.csv``; ``harvest``), likelihood scores
  (``likelihood/*/*.csv``) and the deep curves of Figs. 10-11 (``deep/*/curve.csv``;
  ``likelihood``), the Fig. 10 timing (``deep/fig10_timing.csv``; ``benchmarks``);
- denoising (``denoise/{model}/denoise_bsc.csv``, ``denoise_real.csv``,
  ``denoise/baselines/bsc.csv``; ``denoise``);
- UCD-LMI (``ucd/fig1/*.csv``, ``ucd/dbm/{dataset}/{model}/`` training, ``score.json``,
  ``ucd/classifier/*.pt``; ``ucd``);
- figures and tables (``figures/*.csv`` with their PNG/PDF; ``figures``).

A run already present (same experiment, run name, config run name and FINISHED) is kept, so a
second replay adds nothing; replayed runs carry ``tapmachine.replayed = true``. Params are the
live run's, from the files: a dataset's from the dataset (``stages.data.dataset_params``; its
metrics ``stages.data.dataset_metrics``), a training run's from ``model.pt``
(``training.run_params`` / ``stages.ucd_dbm.train_params`` of its spec, sizes and
``extras["run"]``), a UCD score's from ``score.json``, every other run's from the
``<stem>.params.json`` its stage writes beside its output (``stages.common.write_params``:
harvests, likelihood scores, deep curves, the Fig. 10 timing, denoising, UCD Fig. 1, the
classifier, figures). An output written before these existed replays what its files hold, never
a guessed setting (a denoise npz of the time it kept its params inside, ``tracked_params``:
those). UCD Fig. 1's per-d ``seconds``, a timing metric, stays live-only.

Runs derived from a model (harvest, scores, curves, denoising, UCD scores) are tagged
``model_run_id`` with the id of that model's training run *in this store*, found or replayed
first, and figure runs ``train_run.<model>`` per model drawn, ``harvest_runs.<model>`` (Figs.
5-7, JSON epoch -> harvest run) and ``denoise_run.<label>`` (Figs. 8-9, fig_denoise_real) as the
live runs (``_figure_links``), and ``substitute.<model>`` (``_substitute``). Of several FINISHED
runs of a name, the one its file records (``model.pt``, a harvest's ``harvest_run_id``, a
denoise npz's ``mlflow_run_id``) is taken if the store has it, else the newest. A training job
whose tracking failed to start records no run id in ``model.pt``, and the replayed training run
is then the one its downstream runs point to. Present derived runs lacking the tag get it
("retagged"); those whose tag names no training run of that model and config run in this store
(an id of another store, a run deleted and replayed anew, a run of another experiment) get it
replaced ("corrected", also a figure's ``denoise_run.<label>``); a tag naming another FINISHED
training run of the same model is kept. A present figure run's ``harvest_runs.<model>`` is left
as it is, and a missing ``train_run.<model>`` or ``denoise_run.<label>`` is left missing (the
live run had no id to give, e.g. the UCD tables); replayed figure runs carry one per model. Only
those tags of derived runs are written: a finished training run is only read, and ``model.pt``
is never rewritten (the store, not the file, holds the link).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tapmachine.pipeline import tracking

__all__ = [
    "TrackError",
    "Item",
    "items",
    "replay",
    "register",
    "invocation_start",
    "invocation_end",
]

#: Tag naming the training run a derived run was made from.
MODEL_TAG = "model_run_id"


class TrackError(Exception):
    """The store cannot be reached or the results directory is not one."""


@dataclass
class Item:
    """One run to be: experiment, run name, params, metric rows (step -> values), artifacts
    (a path, or (path, artifact folder)), tags; ``model``: the (experiment, run name) of the
    training run it derives from; ``machine``: (model.pt, dataset .npz) to log as an MLflow
    model; ``recorded_id``: the run id a training run's model.pt records (the live run that
    wrote the file; a harvest's or denoise run's npz the same), preferred as the link of the
    runs that name it where this store has that run; ``links``: further tags naming runs (tag
    -> (experiment, run name): a figure's training and denoise runs); ``link_groups``: tags
    naming several runs as JSON key -> run id (a figure's ``harvest_runs.<model>``, epoch ->
    (experiment, run name))."""

    experiment: str
    name: str
    params: dict = field(default_factory=dict)
    steps: dict[int | None, dict[str, float]] = field(default_factory=dict)
    artifacts: list = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    model: tuple[str, str] | None = None
    machine: tuple[Path, Path] | None = None
    recorded_id: str | None = None
    links: dict[str, tuple[str, str]] = field(default_factory=dict)
    link_groups: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)

    def model_links(self) -> dict[str, tuple[str, str]]:
        """Tag -> (experiment, run name) of a run: ``model_run_id`` for ``model``, and ``links``
        (a figure's ``train_run.<model>`` per model drawn, ``denoise_run.<label>``)."""
        return {**({MODEL_TAG: self.model} if self.model else {}), **self.links}


def _numeric_rows(csv: Path, step_column: str | None = "epoch", skip=()):
    import pandas as pd

    table = pd.read_csv(csv)
    steps: dict[int | None, dict[str, float]] = {}
    for _, row in table.iterrows():
        step = None
        if step_column in table and not _missing(row[step_column]):
            step = int(row[step_column])
        values = steps.setdefault(step, {})
        for key, value in row.items():
            if key == step_column or key in skip or isinstance(value, bool | str):
                continue
            if _missing(value):
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

    from tapmachine.pipeline.stages.figures import claim_metrics

    return claim_metrics(pd.read_csv(csv))


def _existing(*paths: Path) -> list[Path]:
    return [p for p in paths if p.exists()]


def _train_items(results: Path, data: Path | None) -> Iterator[Item]:
    for csv in sorted(results.glob("models/*/metrics.csv")):
        _, steps = _numeric_rows(csv)
        model = csv.parent.name
        machine, recorded, params = None, None, {"model": model}
        model_file = csv.parent / "model.pt"
        if model_file.exists():
            from tapmachine.io.modelfile import ModelFile
            from tapmachine.train import run_params

            record = ModelFile.load(model_file)
            recorded = record.mlflow_run_id
            # as the live run: training.run_params of the spec, sizes and the job's settings
            params = run_params(record.name, record.spec, record.sizes, record.extras.get("run"))
            dataset_file = data / f"{record.dataset}.npz" if data is not None else None
            machine = (model_file, dataset_file) if dataset_file and dataset_file.exists() else None
        tags = {"model": model}
        yield Item("train", model, params, steps, [csv], tags, None, machine, recorded)
    for steps_csv in sorted(results.glob("ucd/dbm/*/*/steps.csv")):
        yield _ucd_train_item(steps_csv)


def _ucd_train_item(steps_csv: Path) -> Item:
    """A DBM of the second paper: per-step metrics (step = update), the epoch images."""
    model, dataset = steps_csv.parent.name, steps_csv.parent.parent.name
    _, steps = _numeric_rows(steps_csv, "step")
    params = {"model": model, "dataset": dataset}
    tags = {"model": model, "dataset": dataset, "stage": "ucd_train"}
    model_file = steps_csv.parent / "model.pt"
    if model_file.exists():
        from tapmachine.io.modelfile import ModelFile
        from tapmachine.pipeline.stages.ucd_dbm import train_params

        blob = ModelFile.load(model_file)
        # as the live run: ucd_dbm.train_params of the spec, sizes and the job's seed and rows
        run = blob.extras.get("run")
        params = train_params(blob.name, blob.dataset, blob.spec, blob.sizes, run)
        tags["method"] = str(blob.extras.get("method", ""))
        if "seconds" in blob.extras:
            steps.setdefault(None, {})["train_seconds_total"] = float(blob.extras["seconds"])
    pngs = [(p, "epochs") for p in sorted(steps_csv.parent.glob("epochs/epoch_*.png"))]
    item = Item("ucd", f"train_{dataset}_{model}", params, steps, [*pngs, steps_csv], tags)
    if model_file.exists():
        item.recorded_id = blob.mlflow_run_id
    return item


def _harvest_items(results: Path) -> Iterator[Item]:
    import pandas as pd

    for csv in sorted(results.glob("solutions/*/epoch_*.csv")):
        model, epoch = csv.parent.name, int(csv.stem.split("_")[1])
        metrics = {"n_unique": float(len(pd.read_csv(csv)))}
        npz = csv.with_suffix(".npz")
        if npz.exists():
            with np.load(npz, allow_pickle=False) as z:
                if "summary" in z.files:
                    summary = json.loads(str(z["summary"]))
                    metrics = {k: float(v) for k, v in summary.items() if _number(v)}
        tags = {"model": model, "epoch": str(epoch)}
        name = f"{model}/epoch_{epoch}"
        arts = _existing(npz, csv)
        params = _harvest_params(npz, model, epoch)
        item = Item("harvest", name, params, {epoch: metrics}, arts, tags, ("train", model))
        item.recorded_id = _npz_run_id(npz, "harvest_run_id")
        yield item


def _harvest_params(npz: Path, model: str, epoch: int) -> dict:
    """The params of a harvest run as logged live (``epoch_{e}.params.json`` beside the npz);
    for an npz written before that file, what the files hold (model, epoch, dtype and the
    number of initialisations), never a guessed setting."""
    from tapmachine.pipeline.stages.common import read_params

    params = read_params(npz)
    if params is not None:
        return params
    params = {"model": model, "epoch": epoch}
    if npz.exists():
        with np.load(npz, allow_pickle=False) as z:
            if "init_index" in z.files:
                params["n_init"] = int(z["init_index"].shape[0])
            if "dtype" in z.files:
                params["dtype"] = str(z["dtype"])
    return params


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _likelihood_items(results: Path) -> Iterator[Item]:
    import pandas as pd

    from tapmachine.tap_paper.likelihood import tracked_metrics

    for csv in sorted(results.glob("likelihood/*/*.csv")):
        model = csv.parent.name
        kind = {"scores": "epochs", "final": "final"}.get(csv.stem, csv.stem)
        steps: dict[int | None, dict[str, float]] = {}
        for row in pd.read_csv(csv).to_dict("records"):
            row = {k: (None if _missing(v) else v) for k, v in row.items()}
            step = int(row["epoch"]) if kind == "epochs" and row.get("epoch") is not None else None
            steps.setdefault(step, {}).update(tracked_metrics(row))
        tags = {"model": model, "kind": "per-epoch" if kind == "epochs" else kind}
        older = {"model": model}  # a CSV written before its params file: model and epochs
        if kind == "epochs":
            older["epochs"] = sorted(e for e in steps if e is not None)
        params = _read_params(csv, older)
        yield Item("likelihood", f"{model}-{kind}", params, steps, [csv], tags, ("train", model))
    for csv in sorted(results.glob("deep/*/curve.csv")):
        model = csv.parent.name
        info = ("model", "inference", "train_iterations", "n_hidden_layers", "measure")
        table, steps = _numeric_rows(csv, "epoch", skip=info)
        tags = {"model": model}
        if "measure" in table and len(table):
            tags["measure"] = str(table["measure"].iloc[0])
        # an older CSV: the run's settings that are columns of it (model, inference, ...)
        first = table.iloc[0].to_dict() if len(table) else {}
        params = _read_params(csv, {k: first[k] for k in info if k in first})
        yield Item("likelihood", f"{model}-curve", params, steps, [csv], tags, ("train", model))
    timing = results / "deep" / "fig10_timing.csv"
    if timing.exists():
        table = pd.read_csv(timing)
        steps = {
            int(r["batch_size"]): {k: float(r[k]) for k in ("tap_seconds", "adatap_seconds")}
            for r in table.to_dict("records")
        }
        params = _read_params(timing, {})
        yield Item("benchmarks", "fig10/timing", params, steps, [timing])


def _read_params(output: Path, older: dict) -> dict:
    """The params the live run logged, kept beside ``output`` (``stages.common.write_params``);
    ``older`` (what the output itself holds) for an output written before that file."""
    from tapmachine.pipeline.stages.common import read_params

    params = read_params(output)
    return older if params is None else params


def _level_series(csv: Path, metrics) -> dict[int | None, dict[str, float]]:
    """Rows of a denoising summary (one per noise level and method, in level order) as the live
    run's series: step = index of the level, ``metrics(method, row)`` the values."""
    import pandas as pd

    steps: dict[int | None, dict[str, float]] = {}
    for method, rows in pd.read_csv(csv).groupby("method", sort=False):
        for i, row in enumerate(rows.to_dict("records")):
            steps.setdefault(i, {}).update(metrics(method, row))
    return steps


def _denoise_params(csv: Path, level: str, model: str | None) -> dict:
    """The params of a denoise run as the live run logged them (``<stem>.params.json`` beside
    ``csv``, ``_read_params``); for outputs written before that file, the npz's
    ``tracked_params`` where it kept them (what the live run logged), else only what the CSV
    holds (model, levels, number of images), never a guessed setting."""
    import pandas as pd

    npz = csv.with_suffix(".npz")
    if npz.exists():
        with np.load(npz, allow_pickle=False) as z:
            if "tracked_params" in z.files:  # JSON of tracking.flat_params, as logged
                return _read_params(csv, json.loads(str(z["tracked_params"])))
    table = pd.read_csv(csv)
    first = table[table["method"] == table["method"].iloc[0]]
    older: dict = {} if model is None else {"model": model}
    older[f"{level}s"] = [float(v) for v in first[level]]
    if "n_images" in table and len(table):
        older["n_images"] = int(table["n_images"].iloc[0])
    return _read_params(csv, older)


def _npz_run_id(npz: Path, key: str) -> str | None:
    """The run id an npz records under ``key`` (the live run that wrote it), or None."""
    if not npz.exists():
        return None
    with np.load(npz, allow_pickle=False) as z:
        run_id = str(z[key]) if key in z.files else ""
    return run_id or None


def _denoise_items(results: Path) -> Iterator[Item]:
    for csv in sorted(results.glob("denoise/*/denoise_bsc.csv")):
        model = csv.parent.name
        steps = _level_series(csv, lambda m, r: {"mcc": r["value"], "mcc_se": r["se"]})
        tags = {"model": model, "channel": "bsc"}
        params = _denoise_params(csv, "p", model)
        item = Item("denoise", f"{model}-bsc", params, steps, [csv], tags, ("train", model))
        item.recorded_id = _npz_run_id(csv.with_suffix(".npz"), "mlflow_run_id")
        yield item
    for csv in sorted(results.glob("denoise/*/denoise_real.csv")):
        model = csv.parent.name
        steps = _level_series(csv, lambda m, r: {f"mse.{m}": r["value"], f"psnr.{m}": r["psnr"]})
        tags = {"model": model, "channel": "gauss"}
        params = _denoise_params(csv, "sigma", model)
        item = Item("denoise", f"{model}-gaussian", params, steps, [csv], tags, ("train", model))
        item.recorded_id = _npz_run_id(csv.with_suffix(".npz"), "mlflow_run_id")
        yield item
    baselines = results / "denoise" / "baselines" / "bsc.csv"
    if baselines.exists():
        steps = _level_series(baselines, lambda m, r: {f"mcc.{m}": r["value"]})
        params = _denoise_params(baselines, "p", None)
        item = Item("denoise", "baselines-bsc", params, steps, [baselines], {"channel": "bsc"})
        item.recorded_id = _npz_run_id(baselines.with_suffix(".npz"), "mlflow_run_id")
        yield item


def _fig1_params(csv: Path, table) -> dict:
    """The params of a UCD Fig. 1 run as logged live (``{method}.params.json`` beside the CSV);
    for a CSV written before that file, what the CSV holds (method, dims in order, chains per
    d), never a guessed setting."""
    from tapmachine.pipeline.stages.common import read_params

    params = read_params(csv)
    if params is not None:
        return params
    dims = [int(d) for d in dict.fromkeys(table["d"])]
    reps = table.groupby("d").size()
    params = {"method": csv.stem, "dims": dims}
    if len(set(reps)) == 1:
        params["reps"] = int(reps.iloc[0])
    return params


def _ucd_items(results: Path) -> Iterator[Item]:
    import pandas as pd

    for csv in sorted(results.glob("ucd/fig1/*.csv")):
        table = pd.read_csv(csv)
        steps: dict[int | None, dict[str, float]] = {}
        for d, rows in table.groupby("d"):
            total = rows["tau"] + rows["T"]
            steps[int(d)] = {
                "tau_mean": float(rows["tau"].mean()),
                "T_mean": float(rows["T"].mean()),
                "tau_plus_T_mean": float(total.mean()),
                "tau_plus_T_std": float(total.std()) if len(rows) > 1 else 0.0,
                "tau_one_fraction": float((rows["tau"] == 1).mean()),
                "capped": float(rows["capped"].sum()),
            }
            # Written per chain since these columns exist; the live run's `seconds` is a timing,
            # not a result of the files, and is not replayed.
            if "corrected" in rows:
                steps[int(d)]["corrected_fraction"] = float(rows["corrected"].mean())
            if "search_capped" in rows:
                steps[int(d)]["search_capped"] = float(rows["search_capped"].sum())
        yield Item("ucd", f"fig1_{csv.stem}", _fig1_params(csv, table), steps, [csv])
    for pt in sorted(results.glob("ucd/classifier/*.pt")):
        import torch

        blob = torch.load(pt, map_location="cpu", weights_only=True)
        steps = {None: {"test_accuracy": float(blob["test_accuracy"])}}
        params = _read_params(pt, {"dataset": pt.stem})
        yield Item("ucd", f"classifier_{pt.stem}", params, steps, [pt])
    for score in sorted(results.glob("ucd/dbm/*/*/score.json")):
        row = json.loads(score.read_text())
        model, dataset = score.parent.name, score.parent.parent.name
        metrics = {k: float(v) for k, v in row.items() if _number(v)}
        tags = {"model": model, "dataset": dataset, "stage": "ucd_score"}
        train = ("ucd", f"train_{dataset}_{model}")
        yield Item("ucd", f"score_{dataset}_{model}", row, {None: metrics}, [score], tags, train)


def items(results: Path, data: Path | None) -> Iterator[Item]:
    """Every run the files of ``results`` (and the datasets in ``data``) stand for; training runs
    come before the runs derived from them."""
    if data is not None and data.is_dir():
        for npz in sorted(data.glob("*.npz")):
            yield _data_item(npz)
    yield from _train_items(results, data if data is not None and data.is_dir() else None)
    yield from _harvest_items(results)
    yield from _likelihood_items(results)
    yield from _denoise_items(results)
    yield from _ucd_items(results)
    for csv in sorted(results.glob("figures/*.csv")):
        arts = [p for p in (csv.with_suffix(".png"), csv.with_suffix(".pdf"), csv) if p.exists()]
        params = _read_params(csv, {})  # a figure drawn before its params file: none
        tags = {"figure": csv.stem}
        item = Item("figures", csv.stem, params, _claims(csv), arts, tags)
        if "models" in params:  # as the live run: the models drawn, each tagged with its runs
            models = json.loads(params["models"])
            tags["models"] = ",".join(models)
            item.links, item.link_groups = _figure_links(csv.stem, models, params)
            for m in models:
                substitute = _substitute(results, csv.stem, m, params)
                if substitute:
                    tags[f"substitute.{m}"] = substitute
        yield item


def _substitute(results: Path, figure: str, model: str, params: dict) -> str:
    """The substitute data of a figure's model as its live run tags it (``substitute.<model>``):
    from the harvest of its first epoch (Figs. 5-7, ``figures.fig5.load_epochs``), else from its
    ``model.pt`` (``models/<model>/``, a DBM of the second paper ``ucd/dbm/<dataset>/<name>/``);
    none for the UCD tables (drawn from scores alone) or where the file is gone."""
    from tapmachine.io.modelfile import ModelFile

    if figure in ("ucd_table1", "ucd_table2"):
        return ""
    if figure in ("fig5", "fig6", "fig7"):
        epochs = json.loads(params.get("epochs", "[]"))
        npz = results / "solutions" / model / f"epoch_{min(epochs, default=0)}.npz"
        if not npz.exists():
            return ""
        with np.load(npz, allow_pickle=False) as z:
            return str(z["substitute"]) if "substitute" in z.files else ""
    dataset, _, name = model.rpartition("/")
    if dataset:
        pt = results / "ucd" / "dbm" / dataset / name / "model.pt"
    else:
        pt = results / "models" / model / "model.pt"
    return str(ModelFile.load(pt).substitute or "") if pt.exists() else ""


def _figure_links(figure: str, models: list[str], params: dict) -> tuple[dict, dict]:
    """The runs a figure's live run names, as (experiment, run name): ``train_run.<model>`` per
    model drawn; the runs of the files the workflow draws it from (``figures.smk``,
    ``denoise.smk``): ``denoise_run.<label>`` (Figs. 8-9: ``denoise/<model>/denoise_bsc.npz``
    and ``denoise/baselines/bsc.npz``; fig_denoise_real: ``denoise/<model>/denoise_real.npz``)
    and ``harvest_runs.<model>`` (Figs. 5-7: epoch -> the harvest of
    ``solutions/<model>/epoch_<e>.npz``, every epoch of its params)."""
    links = {f"train_run.{m}": _training_run_of(m) for m in models}
    groups = {}
    if figure in ("fig5", "fig6", "fig7"):
        epochs = json.loads(params.get("epochs", "[]"))
        groups = {
            f"harvest_runs.{m}": {str(e): ("harvest", f"{m}/epoch_{e}") for e in epochs}
            for m in models
        }
    elif figure in ("fig8", "fig9"):
        links.update({f"denoise_run.{m}": ("denoise", f"{m}-bsc") for m in models})
        links["denoise_run.baselines"] = ("denoise", "baselines-bsc")
    elif figure == "fig_denoise_real":
        links.update({f"denoise_run.{m}": ("denoise", f"{m}-gaussian") for m in models})
    return links, groups


def _data_item(npz: Path) -> Item:
    """A dataset's run: its params, metrics and tags as the live run's
    (``stages.data.dataset_params`` and ``dataset_metrics`` of the dataset read back); the
    binary CIFAR-10 of ``tapmachine ucd cifar10`` as its run ``ucd/data_binary_cifar10`` (the
    archive it was read from, kept in the provenance, as param). An npz that is not a dataset
    of ``data.save_dataset`` gets its sizes only (said on stderr); the replay goes on."""
    import sys

    from tapmachine.io.data import DataError, load_dataset
    from tapmachine.pipeline.stages.data import dataset_metrics, dataset_params

    with np.load(npz, allow_pickle=False) as z:
        sizes = {k: int(z[k].shape[0]) for k in ("x_train", "x_test") if k in z.files}
    metrics = {f"n_{k[2:]}": v for k, v in sizes.items()}
    try:
        ds = load_dataset(npz)
    except DataError as err:
        print(f"dataset {npz}: params not replayed: {err}", file=sys.stderr)
        return Item("data", npz.stem, {}, {None: metrics}, [], {})
    if ds.name == "binary_cifar10" and "source" in ds.provenance:  # stages.ucd_dbm.cifar10
        return Item("ucd", "data_binary_cifar10", {"archive": ds.provenance["source"]})
    tags = {"dataset": ds.name}
    if ds.provenance.get("substitute"):
        tags["substitute"] = str(ds.provenance["substitute"])
    return Item("data", npz.stem, dataset_params(ds), {None: dataset_metrics(ds)}, [], tags)


def _training_run_of(model: str) -> tuple[str, str]:
    """(experiment, run name) of the training run of a model a figure names: a DBM of the second
    paper as ``{dataset}/{model}``, a machine of the first by its name."""
    if "/" in model:
        dataset, name = model.split("/", 1)
        return ("ucd", f"train_{dataset}_{name}")
    return ("train", model)


def _present(client, exp_id: str, name: str, run_name: str):
    """The FINISHED run ``name`` of this config run in the experiment, or None."""
    quoted = name.replace("'", "\\'")
    filt = (
        f"attributes.run_name = '{quoted}' and attributes.status = 'FINISHED' "
        f"and tags.`tapmachine.run_name` = '{run_name}'"
    )
    found = client.search_runs([exp_id], filt, max_results=1)
    return found[0] if found else None


def _log_machine(run, machine: tuple[Path, Path]) -> None:
    """The machine as an MLflow model with its dataset, as training logs it; a file that cannot
    be read leaves the run without it (said on stderr), never stops the replay."""
    import sys

    from tapmachine.io import data
    from tapmachine.io.modelfile import ModelFile

    model_file, dataset_file = machine
    try:
        ds = data.load_dataset(dataset_file)
        n_train = ModelFile.load(model_file).spec.get("n_train")  # the rows training used
    except Exception as err:  # noqa: BLE001 - the metrics and files are replayed regardless
        print(f"model {model_file} not logged: {err}", file=sys.stderr)
        return
    rows = ds.x_train[:n_train] if n_train else ds.x_train
    run.log_machine(model_file, rows, dataset_file, ds.name)


def _is_training_run(client, run_id: str, exp_id: str, name: str, run_name: str) -> bool:
    """Whether ``run_id`` is a training run of this model and config run in this store: an
    active FINISHED run named ``name`` in experiment ``exp_id`` tagged ``tapmachine.run_name``
    = ``run_name`` (any such run, so a derived run of an earlier training of the same model
    keeps its link). An id the store does not know is not."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return False
        raise
    return (
        run.info.experiment_id == exp_id
        and run.info.run_name == name
        and run.info.status == "FINISHED"
        and run.info.lifecycle_stage == "active"
        and run.data.tags.get("tapmachine.run_name") == run_name
    )


def _link(client, found, label: str, tag: str, run_id: str, is_training_run) -> str | None:
    """Point a present derived run's ``tag`` (``model_run_id``, a figure's ``train_run.<model>``
    or ``denoise_run.<label>``) at its run ``run_id``: replaced where it names no run of that
    name and config run in this store ("corrected": a store rebuilt, a run replayed anew);
    ``model_run_id`` also filled where it is missing ("retagged"; a figure's live run has no
    ``train_run.<model>`` where it had no id to give, e.g. the UCD tables, and is left so).
    Only this tag of the derived run is written; the run it names is only read."""
    current = found.data.tags.get(tag)
    if current in (None, "", "None"):
        if tag != MODEL_TAG:
            return None
        kind = "retagged"
    elif current == run_id or is_training_run(current):
        return None
    else:
        kind = "corrected"
    client.set_tag(found.info.run_id, tag, run_id)
    was = "" if kind == "retagged" else f" (was {current}, no such run here)"
    print(f"{kind:<8} {label}: {tag} = {run_id}{was}")
    return kind


def replay(results, store, manifest=None, data=None, run_name=None) -> dict[str, int]:
    """Replay ``results`` into the store (``$MLFLOW_TRACKING_URI`` or ``store``/mlflow.db).

    Returns {"replayed": n, "present": m, "retagged": k, "corrected": c} (k: ``model_run_id``
    tags that present derived runs lacked; c: links to a training run, ``model_run_id`` or a
    figure's ``train_run.<model>``, that named a run that is not a training run of that model
    and config run in this store). Raises TrackError if the store fails.
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
    counts = {"replayed": 0, "present": 0, "retagged": 0, "corrected": 0}
    # (experiment, run name) -> id in this store, for the model_run_id tags of derived runs
    run_ids: dict[tuple[str, str], str] = {}
    checked: dict[tuple[str, tuple[str, str]], bool] = {}  # (run id, model) -> training run?

    def is_training_run(run_id: str, model: tuple[str, str]) -> bool:
        if (run_id, model) not in checked:
            exp = info["experiments"][model[0]]
            checked[run_id, model] = _is_training_run(client, run_id, exp, model[1], run_name)
        return checked[run_id, model]

    for item in items(results, Path(data) if data else None):
        exp_id = info["experiments"][item.experiment]
        label = f"{item.experiment}/{item.name}"
        # tag -> (the training run's id in this store, its (experiment, run name))
        links = {t: (run_ids[m], m) for t, m in item.model_links().items() if m in run_ids}
        found = _present(client, exp_id, item.name, run_name)
        if found is not None:
            key = (item.experiment, item.name)
            run_ids[key] = found.info.run_id
            # Of several training runs of a model, the one that wrote its model.pt, if here.
            recorded = item.recorded_id
            if recorded not in (None, found.info.run_id) and is_training_run(recorded, key):
                run_ids[key] = recorded
            counts["present"] += 1
            print(f"present  {label}")
            for tag, (run_id, model) in links.items():
                check = functools.partial(is_training_run, model=model)
                kind = _link(client, found, label, tag, run_id, check)
                if kind is not None:
                    counts[kind] += 1
            continue
        tags = {**item.tags, "tapmachine.run_name": run_name, "tapmachine.replayed": "true"}
        tags.update({tag: run_id for tag, (run_id, _) in links.items()})
        for tag, group in item.link_groups.items():  # as live: "" for a run the store lacks
            ids = {key: run_ids.get(m, "") for key, m in group.items()}
            tags[tag] = json.dumps(ids, sort_keys=True)
        with tracking.start_run(manifest, item.experiment, item.name, item.params, tags) as run:
            for step, values in sorted(item.steps.items(), key=lambda kv: kv[0] or 0):
                run.log_metrics(values, step=step)
            for art in item.artifacts:
                path, folder = art if isinstance(art, tuple) else (art, None)
                run.log_artifact(path, folder)
            if item.machine is not None:
                _log_machine(run, item.machine)
        if tracking.disabled_reason(uri):
            raise TrackError(f"replaying {label}: {tracking.disabled_reason(uri)}")
        run_ids[(item.experiment, item.name)] = run.run_id
        counts["replayed"] += 1
        print(f"replayed {label}")
    return counts


def invocation_start(store, manifest, run_name: str) -> Path | None:
    """Snakefile ``onstart``: this invocation's record of parent runs
    (``tracking.open_invocation``: a parent opens in an experiment with its first run)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    name = f"snakemake {run_name} {stamp}"
    record = tracking.open_invocation(store, manifest, name)
    if record is not None:
        print(f"tapmachine: MLflow parent runs '{name}' open in each experiment this run uses")
    return record


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
        f"  runs missing in MLflow? replay the files: tapmachine track --results {results}"
    )
    text = "\n".join(lines)
    print(text)
    return text


def _cmd_track(args) -> None:
    counts = replay(args.results, args.store, args.manifest, args.data, args.run_name)
    links = "".join(f", {counts[k]} {k}" for k in ("retagged", "corrected") if counts[k])
    print(
        f"tapmachine track: {counts['replayed']} runs replayed, {counts['present']} already "
        f"in the store{links} ({tracking.default_tracking_uri(args.store)})"
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
