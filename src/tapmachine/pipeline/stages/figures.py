"""``tapmachine figure <name>``: draw one figure, write PNG/PDF/CSV and record them as a run.

``FIGURES`` maps each figure to the call of its ``make``; the parsers name the same figures.
"""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path

from tapmachine.figures.common import FigureResult
from tapmachine.pipeline.records import RunRecord, read_record, record_path
from tapmachine.pipeline.stages.common import set_threads


def _fig3(m, a):
    return m.make(a.metrics, a.model_files, a.exact)


def _fig4(m, a):
    return m.make(a.model_files, a.data, a.n_images, a.per_group, a.spread)


def _fig5(m, a):
    return m.make(a.solutions, a.slices)


def _fig6(m, a):
    return m.make(a.solutions, a.embedding, a.n_neighbors, a.seed)


def _fig7(m, a):
    return m.make(a.solutions, a.data, a.digits, a.n_images, a.embedding, a.n_neighbors, a.seed)


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


#: figure name -> call of its module's make with the parsed arguments; the module is
#: tapmachine.figures.<name> unless MODULES names another.
def _fig8(m, a):
    return m.make(a.tap, a.baselines, a.model_files, a.labels)


def _fig9(m, a):
    return m.make(a.tap, a.baselines, a.model_files, a.ps, a.labels, a.classifier, a.data)


def _fig_denoise_real(m, a):
    return m.make(a.results, a.model_file)


#: figure name -> (module under tapmachine.figures, call of its make with the parsed arguments)
FIGURES = {
    "fig3": _fig3,
    "fig4": _fig4,
    "fig5": _fig5,
    "fig6": _fig6,
    "fig7": _fig7,
    "fig12": _fig12,
    "likelihood_table": _likelihood_table,
    "ucd_fig1": _ucd_fig1,
    "ucd_samples": _ucd_samples,
    "ucd_completion": _ucd_completion,
    "ucd_table1": _ucd_table1,
    "ucd_table2": _ucd_table2,
    "fig8": _fig8,  # parsers in stages.denoise
    "fig9": _fig9,
    "fig_denoise_real": _fig_denoise_real,
}

#: figures drawn by a module of another name (the DBM figures of the second paper share one)
MODULES = {f: "ucd_dbm" for f in ("ucd_samples", "ucd_completion", "ucd_table1", "ucd_table2")}


def draw(args) -> None:
    """Draw ``args.figure``, save PNG/PDF/CSV, record them as its own run (``figure_record``)."""
    from tapmachine.figures import common
    from tapmachine.pipeline.recorder import publish

    set_threads(getattr(args, "threads", 1))
    if getattr(args, "embedding", None) == "umap" and not os.environ.get("NUMBA_CACHE_DIR"):
        cache = Path("results/cache/numba").resolve()
        cache.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(cache)
    module = importlib.import_module(f"tapmachine.figures.{MODULES.get(args.figure, args.figure)}")
    result = FIGURES[args.figure](module, args)
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


def claims_report(args) -> None:
    """``tapmachine claims``: the claim rows of a run's figure CSVs as one markdown report."""
    from tapmachine.figures import claims

    folder = Path(args.results)
    if (folder / "figures").is_dir():
        folder = folder / "figures"
    # resumed training jobs count all their epochs
    models, dbms = folder.parent / "models", folder.parent / "ucd" / "dbm"
    out = claims.write_report(
        folder,
        args.out,
        args.title,
        args.level,
        args.benchmarks,
        args.section,
        models if models.is_dir() else None,
        args.logs,
        args.rejudge,
        dbms if dbms.is_dir() else None,
    )
    print(f"wrote {out} (claim rows of {folder})")


def register(subparsers) -> None:
    c = subparsers.add_parser(
        "claims", help="every figure's claim rows of a run (held / not held) as markdown"
    )
    c.add_argument(
        "--results", required=True, help="a run's results folder (results/<run>) or its figures/"
    )
    c.add_argument("--out", required=True, help="markdown file to write")
    c.add_argument("--title", default=None, help="heading of the report")
    c.add_argument("--level", type=int, default=2, help="heading level of the title")
    c.add_argument(
        "--benchmarks", default=None, help="the run's benchmarks/ folder: add job wall times"
    )
    c.add_argument(
        "--logs",
        default=None,
        help="the run's logs/ folder: a resumed training job's log names the epoch its last "
        "start resumed from, so its wall time counts its earlier starts exactly",
    )
    c.add_argument(
        "--section",
        default=None,
        help="replace only the part between <!-- claims:SECTION --> and <!-- /claims:SECTION -->"
        " of --out (e.g. docs/results.md)",
    )
    c.add_argument(
        "--rejudge",
        action="store_true",
        help="compute the claim rows of fig3, fig4 and fig5 again from their CSVs' drawn rows "
        "(the current verdicts of a run whose inputs are gone, e.g. docs/results/paper)",
    )
    c.set_defaults(func=claims_report)
    import functools

    from tapmachine.pipeline.configuration import schema_default

    fig = functools.partial(schema_default, "figures")
    seed = schema_default("seed")
    s = subparsers.add_parser("figure", help="draw one figure (fig3 ... fig7, fig12, table)")
    figs = s.add_subparsers(dest="figure", required=True)
    f3 = figs.add_parser("fig3", help="TAP log-likelihood per epoch")
    f3.add_argument("--metrics", nargs="+", required=True, help="metrics.csv of each model")
    f3.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    f3.add_argument(
        "--exact", nargs="*", default=[], help="exact curves (tapmachine exact-curve CSVs)"
    )
    f4 = figs.add_parser("fig4", help="receptive fields ranked by spread and activation")
    f4.add_argument("--model-files", nargs="+", required=True)
    f4.add_argument("--data", nargs="+", required=True, help="dataset of each model, same order")
    f4.add_argument("--n-images", type=int, default=fig("fig4", "n_images"))
    f4.add_argument("--per-group", type=int, default=fig("fig4", "per_group"))
    f4.add_argument(
        "--spread", default=fig("fig4", "spread"), choices=["raw", "peak"], help="l_0.1 measure"
    )
    f5 = figs.add_parser("fig5", help="free energies and counts of TAP solutions per epoch")
    f5.add_argument("--solutions", nargs="+", required=True, help="harvest .npz files")
    f5.add_argument("--slices", nargs="*", type=int, default=None, help="histogram epochs")
    f6 = figs.add_parser("fig6", help="embedding of TAP solutions over training")
    f6.add_argument("--solutions", nargs="+", required=True)
    f7 = figs.add_parser("fig7", help="embedding of initialisations and their TAP solutions")
    f7.add_argument("--solutions", nargs="+", required=True)
    f7.add_argument("--data", required=True, help="the model's dataset (.npz)")
    f7.add_argument("--digits", nargs="*", type=int, default=None, help="labels (default: all)")
    f7.add_argument("--n-images", type=int, default=None)
    for name, f in (("fig6", f6), ("fig7", f7)):
        f.add_argument("--embedding", default=fig(name, "embedding"), choices=["isomap", "umap"])
        f.add_argument("--n-neighbors", type=int, default=fig(name, "n_neighbors"))
        f.add_argument("--seed", type=int, default=seed)
    f12 = figs.add_parser("fig12", help="TAP vs AIS vs pseudo-likelihood per epoch (App. F)")
    f12.add_argument("--scores", required=True, help="scores.csv of `tapmachine score --epochs`")
    f12.add_argument("--model-file", required=True, help="the model's model.pt")
    tab = figs.add_parser("likelihood_table", help="AIS test log-likelihood: TAP vs CD / PCD")
    tab.add_argument("--scores", nargs="+", required=True, help="final.csv of each model")
    tab.add_argument("--model-files", nargs="+", required=True, help="model.pt, same order")
    tab.add_argument("--no-reference", action="store_true", help="omit the published row")
    tab.add_argument(
        "--data", nargs="+", default=None, help="dataset .npz per model (binarisation)"
    )
    u1 = figs.add_parser("ucd_fig1", help="second paper, Fig. 1: tau + T vs dimension")
    u1.add_argument("--steps", nargs="+", required=True, help="CSVs of `tapmachine ucd steps`")
    us = figs.add_parser("ucd_samples", help="second paper, Fig. 2: samples, UCD-LMI vs PCD")
    us.add_argument("--models", nargs="+", required=True, help="DBM model.pt files")
    us.add_argument("--data", nargs="+", default=None, help="dataset .npz per model (copies)")
    uc = figs.add_parser("ucd_completion", help="second paper, Fig. 3: lower halves completed")
    uc.add_argument("--models", nargs="+", required=True, help="DBM model.pt files")
    uc.add_argument("--data", nargs="+", required=True, help="dataset .npz per model")
    ut1 = figs.add_parser("ucd_table1", help="second paper, Table 1 (classifier FID) + TAP LL")
    ut2 = figs.add_parser("ucd_table2", help="second paper, Table 2: ablation (classifier FID)")
    for f in (ut1, ut2):
        f.add_argument("--scores", nargs="+", required=True, help="score JSONs of `ucd score`")
    for f in (us, uc):
        f.add_argument("--seed", type=int, default=seed)
        f.add_argument("--device", default=schema_default("device"), help="cpu or cuda[:N]")
    for f in (f3, f4, f5, f6, f7, f12, tab, u1, us, uc, ut1, ut2):
        f.add_argument("--png", required=True)
        f.add_argument("--pdf", required=True)
        f.add_argument("--csv", required=True)
        f.add_argument("--tracking", default=None)
        f.set_defaults(func=draw)
    for f in (f3, f4, f5, f6, f7):
        f.add_argument("--threads", type=int, default=1)
