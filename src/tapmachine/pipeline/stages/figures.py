"""``tapmachine figure <name>``: draw one figure, write PNG/PDF/CSV and record them as a run
(the commands that read figure CSVs back are in ``pipeline.stages.claims``).

``FIGURES`` is the one table of figure commands: each one's options, the call of its module's
``make`` and the module; the ``figure`` command's parsers are built from it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from tapmachine.figures.common import FigureResult
from tapmachine.io.schema import schema_default
from tapmachine.pipeline.stages.common import set_threads
from tapmachine.pipeline.tracking.records import RunRecord, read_record, record_path


def _fig3(m, a):
    return m.make(a.metrics, a.model_files, a.exact, a.palette)


def _fig4(m, a):
    return m.make(a.model_files, a.data, a.n_images, a.per_group, a.spread, a.palette)


def _palette_arg(f) -> None:
    f.add_argument(
        "--palette",
        nargs="*",
        default=[],
        help="model names in the order that gives them their colours (Figs. 3 and 4 alike)",
    )


def _fig5(m, a):
    return m.make(a.solutions, a.slices, a.per_model)


def _fig6(m, a):
    return m.make(a.solutions, a.embedding, a.n_neighbors, a.seed)


def _fig7(m, a):
    return m.make(
        a.solutions, a.data, a.digits, a.n_images, a.embedding, a.n_neighbors, a.seed, a.per_model
    )


def _fig12(m, a):
    return m.make(a.scores, a.model_file)


def _likelihood_table(m, a):
    return m.make(a.scores, a.model_files, not a.no_reference, a.data)


def _ucd_fig1(m, a):
    return m.make(a.steps)


def _ucd_samples(m, a):
    return m.samples(a.models, a.data, a.seed, device=a.device)


def _ucd_completion(m, a):
    return m.completion(a.models, a.data, a.seed, device=a.device)


def _ucd_table1(m, a):
    return m.table1(a.scores)


def _ucd_table2(m, a):
    return m.table2(a.scores)


def _fig8(m, a):
    return m.make(a.tap, a.baselines, a.model_files, a.labels)


def _fig9(m, a):
    return m.make(a.tap, a.baselines, a.model_files, a.ps, a.labels, a.classifier, a.data)


def _fig_denoise_real(m, a):
    return m.make(a.results, a.model_file)


def _fig10(m, a):
    return m.make(a.curves, a.model_files, a.timing, a.last_rows, epoch=a.epoch)


def _fig11(m, a):
    return m.make(a.curves, a.model_files)


def _solutions_args(f) -> None:
    f.add_argument(
        "--solutions", nargs="+", required=True, help="harvest .npz files (a column per model)"
    )


def _per_model_arg(f, keys: str) -> None:
    f.add_argument(
        "--per-model",
        type=json.loads,
        default=None,
        help=f"JSON: model -> its own {keys} (config figures.<fig>.per_model)",
    )


def _fig3_args(f) -> None:
    f.add_argument("--metrics", nargs="+", required=True, help="metrics.csv of each model")
    f.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    f.add_argument(
        "--exact", nargs="*", default=[], help="exact curves (tapmachine exact-curve CSVs)"
    )
    _palette_arg(f)


def _fig4_args(f) -> None:
    fig = functools.partial(schema_default, "figures", "fig4")
    f.add_argument("--model-files", nargs="+", required=True)
    f.add_argument("--data", nargs="+", required=True, help="dataset of each model, same order")
    f.add_argument("--n-images", type=int, default=fig("n_images"))
    f.add_argument("--per-group", type=int, default=fig("per_group"))
    f.add_argument("--spread", default=fig("spread"), choices=["raw", "peak"], help="l_0.1 measure")
    _palette_arg(f)


def _fig5_args(f) -> None:
    _solutions_args(f)
    f.add_argument("--slices", nargs="*", type=int, default=None, help="histogram epochs")
    _per_model_arg(f, "slices")


def _embedding_args(name: str):
    def add(f) -> None:
        fig = functools.partial(schema_default, "figures", name)
        _solutions_args(f)
        if name == "fig7":
            f.add_argument("--data", nargs="+", required=True, help="the models' datasets (.npz)")
            f.add_argument("--digits", nargs="*", type=int, default=None, help="labels (all)")
            f.add_argument("--n-images", type=int, default=None)
            _per_model_arg(f, "digits, n_images")
        f.add_argument("--embedding", default=fig("embedding"), choices=["isomap", "umap"])
        f.add_argument("--n-neighbors", type=int, default=fig("n_neighbors"))
        f.add_argument("--seed", type=int, default=schema_default("seed"))

    return add


def _fig12_args(f) -> None:
    f.add_argument("--scores", required=True, help="scores.csv of `tapmachine score --epochs`")
    f.add_argument("--model-file", required=True, help="the model's model.pt")


def _table_args(f) -> None:
    f.add_argument("--scores", nargs="+", required=True, help="final.csv of each model")
    f.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    f.add_argument("--no-reference", action="store_true", help="omit the published row")
    f.add_argument("--data", nargs="+", default=None, help="dataset .npz per model (binarisation)")


def _ucd_fig1_args(f) -> None:
    f.add_argument("--steps", nargs="+", required=True, help="CSVs of `tapmachine ucd steps`")


def _dbm_figure_args(data_required: bool):
    def add(f) -> None:
        f.add_argument("--models", nargs="+", required=True, help="DBM model.pt files")
        help_ = "dataset .npz per model" + ("" if data_required else " (copies)")
        f.add_argument("--data", nargs="+", required=data_required, default=None, help=help_)
        f.add_argument("--seed", type=int, default=schema_default("seed"))
        f.add_argument("--device", default=schema_default("device"), help="cpu or cuda[:N]")

    return add


def _ucd_table_args(f) -> None:
    f.add_argument("--scores", nargs="+", required=True, help="score JSONs of `ucd score`")


def _denoise_bsc_args(f) -> None:
    f.add_argument("--tap", nargs="+", required=True, help="npz of `denoise bsc`, per model")
    f.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    f.add_argument("--baselines", required=True, help="npz of `denoise baselines`")
    f.add_argument("--labels", nargs="+", default=None, help="method of each --tap file")


def _fig9_args(f) -> None:
    _denoise_bsc_args(f)
    f.add_argument("--ps", nargs="*", type=float, default=None, help="p shown (default: all)")
    f.add_argument("--classifier", default=None, help="MNIST classifier (`ucd classifier`)")
    f.add_argument("--data", default=None, help="dataset .npz the digits came from (labels)")


def _fig_denoise_real_args(f) -> None:
    f.add_argument("--results", required=True, help="npz of `denoise real`")
    f.add_argument("--model-file", required=True)


def _fig10_args(f) -> None:
    f.add_argument("--curves", nargs="+", required=True, help="deep-curve CSVs (pl)")
    f.add_argument(
        "--epoch", type=int, default=None, help="compare at this epoch (default: each curve's last)"
    )
    f.add_argument(
        "--last-rows",
        nargs="+",
        default=None,
        help="deep-curve --last-rows files, same order (the outlier's paired standard error)",
    )
    f.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    f.add_argument("--timing", required=True, help="deep-timing CSV")


def _fig11_args(f) -> None:
    f.add_argument("--curves", nargs="+", required=True, help="deep-curve CSVs (tap)")
    f.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")


@dataclasses.dataclass(frozen=True)
class Figure:
    """One ``tapmachine figure`` command: its help line, the options it adds (besides the output
    files and ``--tracking`` every figure takes), the call of its module's ``make`` with the
    parsed arguments, the module under ``tapmachine.figures`` (default: the figure's name) and
    whether it takes ``--threads``."""

    help: str
    arguments: Callable
    make: Callable
    module: str | None = None
    threads: bool = False


#: Every figure command, by name: the one table the ``figure`` command is built from.
FIGURES = {
    "fig3": Figure("TAP log-likelihood per epoch", _fig3_args, _fig3, threads=True),
    "fig4": Figure(
        "receptive fields ranked by spread and activation", _fig4_args, _fig4, threads=True
    ),
    "fig5": Figure(
        "free energies and counts of TAP solutions per epoch", _fig5_args, _fig5, threads=True
    ),
    "fig6": Figure(
        "embedding of TAP solutions over training", _embedding_args("fig6"), _fig6, threads=True
    ),
    "fig7": Figure(
        "embedding of initialisations and their TAP solutions",
        _embedding_args("fig7"),
        _fig7,
        threads=True,
    ),
    "fig12": Figure("TAP vs AIS vs pseudo-likelihood per epoch (App. F)", _fig12_args, _fig12),
    "likelihood_table": Figure(
        "AIS test log-likelihood: TAP vs CD / PCD", _table_args, _likelihood_table
    ),
    "ucd_fig1": Figure("second paper, Fig. 1: tau + T vs dimension", _ucd_fig1_args, _ucd_fig1),
    "ucd_samples": Figure(
        "second paper, Fig. 2: samples, UCD-LMI vs PCD",
        _dbm_figure_args(False),
        _ucd_samples,
        "ucd_dbm",
    ),
    "ucd_completion": Figure(
        "second paper, Fig. 3: lower halves completed",
        _dbm_figure_args(True),
        _ucd_completion,
        "ucd_dbm",
    ),
    "ucd_table1": Figure(
        "second paper, Table 1 (classifier FID) + TAP LL", _ucd_table_args, _ucd_table1, "ucd_dbm"
    ),
    "ucd_table2": Figure(
        "second paper, Table 2: ablation (classifier FID)", _ucd_table_args, _ucd_table2, "ucd_dbm"
    ),
    "fig8": Figure("mean MCC vs flip probability (Fig. 8)", _denoise_bsc_args, _fig8, threads=True),
    "fig9": Figure("one digit denoised at several p (Fig. 9)", _fig9_args, _fig9, threads=True),
    "fig_denoise_real": Figure(
        "Gaussian-channel MSE / PSNR", _fig_denoise_real_args, _fig_denoise_real, threads=True
    ),
    "fig10": Figure("adaTAP vs TAP: pseudo-likelihood and timing", _fig10_args, _fig10),
    "fig11": Figure("deep TAP machines: train/test TAP likelihood", _fig11_args, _fig11),
}


def add_figure_command(subparsers) -> None:
    """``tapmachine figure <name>``, one subcommand per entry of ``FIGURES``."""
    s = subparsers.add_parser("figure", help="draw one figure (fig3 ... fig12, tables, UCD-LMI)")
    figs = s.add_subparsers(dest="figure", required=True)
    for name, figure in FIGURES.items():
        f = figs.add_parser(name, help=figure.help)
        figure.arguments(f)
        f.add_argument("--png", required=True)
        f.add_argument("--pdf", required=True)
        f.add_argument("--csv", required=True)
        f.add_argument("--tracking", default=None)
        if figure.threads:
            f.add_argument("--threads", type=int, default=1)
        f.set_defaults(func=draw)


def draw(args) -> None:
    """Draw ``args.figure``, save PNG/PDF/CSV, record them as its own run (``figure_record``)."""
    from tapmachine.figures import common
    from tapmachine.pipeline.tracking.recorder import publish

    set_threads(getattr(args, "threads", 1))
    if getattr(args, "embedding", None) == "umap" and not os.environ.get("NUMBA_CACHE_DIR"):
        cache = Path("results/cache/numba").resolve()
        cache.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(cache)
    figure = FIGURES[args.figure]
    module = importlib.import_module(f"tapmachine.figures.{figure.module or args.figure}")
    result = figure.make(module, args)
    paths = common.save(result, args.png, args.pdf, args.csv)
    outputs = {Path(p).resolve() for p in (args.png, args.pdf, args.csv)}
    inputs = [p for p in _paths(vars(args)) if Path(p).resolve() not in outputs]
    publish(args.tracking, figure_record(args.figure, result, paths, inputs), args.csv)
    claims = result.table[result.table["kind"] == "claim"]
    columns = [c for c in ("claim", "model", "epoch", "value", "detail") if c in claims]
    print(claims[columns].to_string(index=False))
    print(f"wrote {', '.join(str(p) for p in paths)}")


def _paths(values: dict) -> list[str]:
    """The arguments naming existing files, in order."""
    out = []
    for value in values.values():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v and Path(v).is_file():
                out.append(v)
    return out


def figure_record(name: str, result: FigureResult, paths: list[Path], inputs=()) -> RunRecord:
    """The record of figure ``name``: run ``name`` of experiment "figures", the claims as
    metrics (``claim_metrics``), the three files as artifacts, and links to the runs it was
    drawn from (``figure_links`` of the records beside ``inputs``)."""
    tags = {"figure": name, "models": ",".join(m.name for m in result.models)}
    for m in result.models:
        if m.substitute:
            tags[f"substitute.{m.name}"] = m.substitute
    record = RunRecord("figures", name, figure_params(result), tags, artifacts=list(paths))
    sources = [(Path(p), read_record(record_path(p))) for p in inputs if record_path(p).exists()]
    record.links, record.link_groups = figure_links([m.name for m in result.models], sources)
    record.metrics = claim_metrics(result.table)
    return record


def figure_links(models: list[str], sources) -> tuple[dict, dict]:
    """A figure's links from the records of the files it read, ``sources`` ((file, record)):
    ``train_run.<model>`` per model drawn (the run of a training record, or the run a derived
    record names as its ``model_run_id``), ``harvest_runs.<model>`` (Figs. 5-7, epoch -> harvest
    run) and ``denoise_run.<folder>`` (Figs. 8-9, fig_denoise_real; the npz file's folder)."""
    links, groups = {}, {}
    for path, source in sources:
        tags = source.tags
        if "model" not in tags:
            if source.experiment == "denoise":
                links[f"denoise_run.{path.parent.name}"] = source.link()
            continue
        labels = [tags["model"]]
        if "dataset" in tags:
            labels.append(f"{tags['dataset']}/{tags['model']}")
        model = next((m for m in models if m in labels), None)
        if model is None:
            continue
        train = source.links.get("model_run_id", source.link())
        links[f"train_run.{model}"] = tuple(train)
        if source.experiment == "harvest":
            group = groups.setdefault(f"harvest_runs.{model}", {})
            group[tags["epoch"]] = source.link()
        elif source.experiment == "denoise":
            links[f"denoise_run.{path.parent.name}"] = source.link()
    return links, groups


def figure_params(result: FigureResult) -> dict:
    """The params of a figure's run: the models drawn and the figure's own ``params``."""
    return {"models": [m.name for m in result.models], **result.params}


def claim_metrics(table) -> dict[int | None, dict[str, float]]:
    """The numeric claim rows of a figure table as MLflow metrics, grouped by step.

    The metric is ``claim[.model]``; a row's epoch is its step (None where it has none), not part
    of the name. Rows whose value is not a finite number are left out.
    """
    steps: dict[int | None, dict[str, float]] = {}
    if "kind" not in table:
        return steps
    for _, row in table[table["kind"] == "claim"].iterrows():
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
        missing = epoch is None or (isinstance(epoch, float) and math.isnan(epoch))
        steps.setdefault(None if missing else int(epoch), {})[_metric_key(key)] = value
    return steps


def _metric_key(key: str) -> str:
    """MLflow metric names allow alphanumerics, _ - . / and spaces."""
    return "".join(ch if ch.isalnum() or ch in "_-./ " else "_" for ch in key)[:250]


def register(subparsers) -> None:
    add_figure_command(subparsers)
