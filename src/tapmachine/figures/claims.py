"""The claims report: every figure's claim rows of one run, as one markdown document.

Each figure's CSV (``results/<run>/figures/<fig>.csv``, written by ``common.save``) ends with its
claim rows (``kind == "claim"``: ``claim``, ``model``, ``epoch``, ``value``, ``detail``, ``held``).
``collect`` gathers them from a figures folder; ``to_markdown`` sets each figure's rows beside the
paper's claim (``PAPER_CLAIMS``, from docs/claims.md) in a table with the
measured value and the verdict, after a summary of held / not held per figure. Rows without a
verdict are context numbers (sizes, counts), listed too. ``tapmachine claims`` writes the report
(``stages.figures``); docs/results.md is built from it for the default and the paper run.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from tapmachine.figures.common import FigureError

__all__ = [
    "PAPER_CLAIMS",
    "ROW_KEY",
    "collect",
    "row_labels",
    "side_by_side",
    "to_markdown",
    "replace_section",
    "wall_times",
    "wall_times_markdown",
    "write_report",
]

#: The paper's claim each figure tests (docs/claims.md).
PAPER_CLAIMS = {
    "fig3": "TAP log-likelihood per unit rises fast, then at a near-constant slope after about "
    "epoch 20",
    "fig4": "localised and stroke-like fields on MNIST; more localisation with larger Nh",
    "fig5": "count starts at 1 and grows; unique solutions stay under 10% of initialisations at "
    "Nh = 100; two significant modes of the free-energy distribution at all training epochs on "
    "binary MNIST; the mean free energy rises early, then gradually declines",
    "fig6": "solutions start correlated, then spread; free energy follows position",
    "fig7": "solutions act as attractors inside dense regions of the data (judged against the mean "
    "image, held-out images and shuffled labels)",
    "fig8": "OPE and TAP recover the signal at p = 0, 1-NN not unless the digit is a training "
    "image; TAP beats OPE for Nh in {25, 50, 100}; TAP tracks 1-NN as p -> 0.5; Nh = 500 "
    "degrades at larger p",
    "fig9": "digit structure kept by Nh <= 100 as p grows, Nh = 500 caught in spurious minima "
    "(judged by an MNIST classifier over every denoised digit)",
    "fig10": "all comparable except adaTAP with 3 iterations; adaTAP orders of magnitude slower "
    "per iteration",
    "fig11": "both curves rise; the gap shows generalisation",
    "fig12": "TAP, AIS and pseudo-likelihood increase together over training",
    "likelihood_table": "TAP-trained RBM's AIS test log-likelihood vs CD-1, CD-25, PCD-1 and the "
    "published CD-25 (-86.34 nats)",
    "ucd_fig1": "Gibbs grows exponentially with dimension; MH + LMI has tau = 1 for d >= 25 and a "
    "small, slowly growing T",
    "ucd_samples": "UCD-LMI samples are digit/clothing-like; PCD without pretraining fails",
    "ucd_completion": "completions close to, not identical with, the truth",
    "ucd_table1": "FID of samples (here: a feature network trained on MNIST, not Inception)",
    "ucd_table2": "the unbiased gradient matters most",
}

COLUMNS = ("figure", "claim", "model", "epoch", "value", "detail", "held")

#: Figures whose claim rows ``collect(..., rejudge=True)`` computes again from their CSV: by
#: their module's ``rejudge``, and the tables ``figures.redraw`` draws again (``redraw.TABLES``).
REJUDGED = ("fig3", "fig4", "fig5")


def collect(figures_dir: str | os.PathLike, rejudge: bool = False):
    """The claim rows of every figure CSV directly under ``figures_dir``, one DataFrame.

    Columns ``COLUMNS`` (``figure`` is the CSV's stem), figures in name order, rows in file order.
    A CSV without a ``kind`` column (not a figure table) is skipped; a folder without any figure
    CSV is an error (the run has not drawn its figures). With ``rejudge``, a figure whose module
    has a ``rejudge`` function (``REJUDGED``) or a table ``figures.redraw`` draws again has its
    claim rows computed again by the current code from the CSV's own drawn rows: the verdicts of
    a committed run whose inputs are gone, as the code now words them.
    """
    import importlib

    import matplotlib.pyplot as plt
    import pandas as pd

    from tapmachine.figures import redraw

    folder = Path(figures_dir)
    if not folder.is_dir():
        raise FigureError(f"{folder} is not a folder: draw the run's figures first")
    frames = []
    for path in sorted(folder.glob("*.csv")):
        table = pd.read_csv(path)
        if "kind" not in table:
            continue
        if rejudge and path.stem in REJUDGED:
            module = importlib.import_module(f"tapmachine.figures.{path.stem}")
            table = module.rejudge(table)
        elif rejudge and path.stem in redraw.TABLES:
            result = redraw.redraw(table, path.stem)
            plt.close(result.figure)
            table = result.table
        rows = table[table["kind"] == "claim"].copy()
        rows.insert(0, "figure", path.stem)
        for col in COLUMNS:
            if col not in rows:
                rows[col] = None
        frames.append(rows[list(COLUMNS)])
    if not frames:
        raise FigureError(f"no figure CSV (with a kind column) in {folder}")
    rows = pd.concat(frames, ignore_index=True)
    rows["held"] = [
        held if not _blank(held) else _verdict_in_text(detail)
        for held, detail in zip(rows["held"], rows["detail"], strict=True)
    ]
    return rows


#: A claim row's identity across runs of one config. One claim of one model can have several
#: rows: per epoch (Figs. 5-7), and told apart only by their text and order (Fig. 4's Spearman
#: rows per dataset, Fig. 9's shares per p): ``nth`` counts them in file order.
ROW_KEY = ("figure", "claim", "model", "epoch", "nth")


def side_by_side(runs: dict):
    """The claim rows of several runs, ``{label: collect(...)}``, one row per claim row
    (``ROW_KEY``; ``model`` and ``epoch`` blank where a row has none) with each run's
    ``value <label>``, ``held <label>`` and ``detail <label>``: the first run's rows in its
    order, then the rows only later runs have. A row a run lacks is blank there."""
    wide = None
    for label, rows in runs.items():
        rows = rows.copy()
        rows["model"] = rows["model"].fillna("").astype(str)
        rows["epoch"] = [_cell(e) for e in rows["epoch"]]
        rows["nth"] = rows.groupby(["figure", "claim", "model", "epoch"]).cumcount()
        part = rows[[*ROW_KEY, "value", "held", "detail"]].rename(
            columns={c: f"{c} {label}" for c in ("value", "held", "detail")}
        )
        wide = part if wide is None else wide.merge(part, on=list(ROW_KEY), how="outer", sort=False)
    return wide.reset_index(drop=True)


def row_labels(table, labels) -> list[str]:
    """What tells each claim row of ``side_by_side``'s ``table`` from the others of its claim
    and model: its epoch, and where several rows share claim, model and epoch, the first clause
    of its text (the first of ``labels``' runs that has the row)."""
    shared = table.duplicated(["figure", "claim", "model", "epoch"], keep=False)
    out = []
    for (_, row), several in zip(table.iterrows(), shared, strict=True):
        parts = [f"epoch {row['epoch']}"] if row["epoch"] != "" else []
        if several:
            text = next((row[f"detail {k}"] for k in labels if not _blank(row[f"detail {k}"])), "")
            parts.append(re.split(r"[:;,]", str(text), maxsplit=1)[0])
        out.append(", ".join(parts))
    return out


def _verdict_in_text(detail) -> str | None:
    """'held' / 'not held' where a claim row states its verdict at the start of its text only
    (e.g. fig10's "not held: final PL ...", ucd_fig1's "held: slope ..."), else None."""
    match = re.match(r"(not held|held)\b", str(detail)) if not _blank(detail) else None
    return match.group(1) if match else None


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v) == ""


def _cell(v) -> str:
    """A value as markdown table text: numbers to 4 significant digits, '|' escaped."""
    if _blank(v):
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int | float):
        if isinstance(v, float) and not math.isfinite(v):
            return "n/a" if math.isnan(v) else str(v)
        if float(v).is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}"
    try:
        return _cell(float(v))
    except (TypeError, ValueError):
        return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(claims, title: str | None = None, level: int = 2) -> str:
    """A markdown report of ``collect``'s rows: a summary per figure, then each figure's rows.

    ``level``: the heading level of ``title`` (figures get one level below).
    """
    h = "#" * level
    out = [f"{h} {title}", ""] if title else []
    out += [
        "| Figure | Paper's claim | Held | Not held | Context rows |",
        "|---|---|---|---|---|",
    ]
    figures = list(dict.fromkeys(claims["figure"]))
    for fig in figures:
        rows = claims[claims["figure"] == fig]
        held = int((rows["held"] == "held").sum())
        not_held = int((rows["held"] == "not held").sum())
        context = len(rows) - held - not_held
        out.append(
            f"| {fig} | {_cell(PAPER_CLAIMS.get(fig, ''))} | {held} | {not_held} | {context} |"
        )
    for fig in figures:
        rows = claims[claims["figure"] == fig]
        out += ["", f"{h}# {fig}", ""]
        if fig in PAPER_CLAIMS:
            out += [f"Paper: {PAPER_CLAIMS[fig]}.", ""]
        out += [
            "| Claim row | Model | Epoch | Measured | What it tests / paper's value | Held |",
            "|---|---|---|---|---|---|",
        ]
        for _, r in rows.iterrows():
            value = "n/a" if _blank(r["value"]) else r["value"]  # not measurable (NaN)
            cells = [r["claim"], r["model"], r["epoch"], value, r["detail"], r["held"]]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(out) + "\n"


def wall_times(
    benchmarks_dir: str | os.PathLike,
    models_dir: str | os.PathLike | None = None,
    logs_dir: str | os.PathLike | None = None,
    dbm_dir: str | os.PathLike | None = None,
):
    """Wall and CPU time of each job of a run, from its Snakemake benchmark files.

    ``benchmarks_dir``: the run's ``benchmarks/`` folder (``<stage>/<job>.tsv``, Snakemake's
    columns ``s``, ``max_rss``, ``cpu_time``, ...); rows ``stage``, ``job``, ``seconds``,
    ``cpu_seconds``, ``max_rss_mb`` (the first repeat of each file), ``resumed``, ``exact``,
    sorted by stage and job.

    A training job that was stopped and started again resumes from its last checkpoint, and its
    benchmark file times only the last start. With ``models_dir`` (the run's ``models/``) such a
    job counts its earlier starts too, from its ``metrics.csv``:

    - with ``logs_dir`` (the run's ``logs/``, ``<stage>/<job>.log``), whose log names the epoch
      its last start resumed from (``resumed_epoch``) and the seconds of the next epoch trained
      before it (``resumed_within``): the ``epoch_seconds`` of the epochs up to it, those
      seconds and the benchmark. This is exact, up to the work each interrupted start did after
      its last kept state (which the next start did again), and includes a last start's
      evaluation of earlier epochs again.
    - otherwise, where its epochs sum to more ``epoch_seconds`` than the benchmark: that sum,
      marked not ``exact`` (it misses the time a start spent evaluating earlier epochs again).

    Its CPU time adds ``epoch_cpu_seconds`` in the same way when every epoch counted recorded
    one (older checkpoints did not), else it is NaN. A scoring job that resumes (Fig. 12's
    ``likelihood/score_epochs_<model>``, the exact curve's ``likelihood/exact_curve_<model>``)
    counts, with ``models_dir`` and ``logs_dir``, the epochs its last start's log names as kept
    from earlier starts, from their rows in the run's ``likelihood/<model>/`` (``seconds``,
    ``cpu_seconds``; ``_resumed_scoring``); a harvest (``harvest/<model>/epoch_<e>``), with
    ``logs_dir``, the seconds of the chunks of starts its log names as kept
    (``_resumed_harvest``). A DBM training job of the second paper
    (``ucd/dbm/train_<dataset>_<model>``) is counted alike with ``dbm_dir`` (the run's
    ``ucd/dbm/``): its epochs' times are the history of ``<dataset>/<model>/model.pt``.

    ``cpu_time`` is a lower bound: Snakemake samples a job's processes every 0.5 s for its first
    30 s and every 30 s after (``snakemake.benchmark.BENCHMARK_INTERVAL``), so it misses what a
    job used after its last sample, up to 30 CPU-seconds a job. ``seconds`` (``s``) is exact.
    """
    import pandas as pd

    folder = Path(benchmarks_dir)
    if not folder.is_dir():
        raise FigureError(f"{folder} is not a folder of Snakemake benchmark files")
    rows = []
    for path in sorted(folder.rglob("*.tsv")):
        t = pd.read_csv(path, sep="\t")
        if "s" not in t or t.empty:
            continue
        rel = path.relative_to(folder)
        row = {
            "stage": rel.parts[0] if len(rel.parts) > 1 else "",
            "job": str(rel.with_suffix("")),
            "seconds": float(t["s"].iloc[0]),
            "cpu_seconds": float(t["cpu_time"].iloc[0]) if "cpu_time" in t else math.nan,
            "max_rss_mb": float(t["max_rss"].iloc[0]) if "max_rss" in t else math.nan,
            "resumed": False,
            "exact": True,
        }
        epochs = None
        if models_dir is not None and row["stage"] == "train" and len(rel.parts) == 2:
            epochs = _epoch_times(Path(models_dir) / rel.stem / "metrics.csv")
        elif (
            dbm_dir is not None
            and rel.parts[:2] == ("ucd", "dbm")
            and rel.stem.startswith("train_")
        ):
            epochs = _dbm_epoch_times(Path(dbm_dir), rel.stem)
        if epochs is not None:
            log = None if logs_dir is None else Path(logs_dir) / rel.with_suffix(".log")
            row.update(_resumed_training(epochs, row, log))
        elif models_dir is not None and logs_dir is not None and row["stage"] == "likelihood":
            scored = _scored_rows(Path(models_dir).parent / "likelihood", rel.stem)
            if scored is not None:
                row.update(_resumed_scoring(scored, row, Path(logs_dir) / rel.with_suffix(".log")))
        elif logs_dir is not None and row["stage"] == "harvest":
            row.update(_resumed_harvest(row, Path(logs_dir) / rel.with_suffix(".log")))
        rows.append(row)
    columns = ["stage", "job", "seconds", "cpu_seconds", "max_rss_mb", "resumed", "exact"]
    return pd.DataFrame(rows, columns=columns)


#: The resuming scoring jobs (``likelihood/<kind>_<model>``): the file of their per-epoch rows
#: under the run's ``likelihood/<model>/``, and the columns of a row's CPU seconds (the exact
#: curve's AIS column only where it scored AIS).
_SCORED_ROWS = {
    "score_epochs": ("scores.csv", ("cpu_seconds",)),
    "exact_curve": ("exact.csv", ("cpu_seconds", "ais_cpu_seconds")),
}


def _scored_rows(likelihood_dir: Path, job: str):
    """(rows, CPU columns) of the resuming scoring job ``job`` (``_SCORED_ROWS``), or None."""
    import pandas as pd

    for kind, (name, cpu_columns) in _SCORED_ROWS.items():
        if job.startswith(f"{kind}_"):
            path = likelihood_dir / job.removeprefix(f"{kind}_") / name
            return (pd.read_csv(path), cpu_columns) if path.is_file() else None
    return None


def _resumed_scoring(scored, row: dict, log: Path) -> dict:
    """A resuming scoring job's times over all its starts (``wall_times``): its last start's
    benchmark plus the rows its log says were kept from earlier starts (``runlog.kept_epochs``),
    each with its own seconds. A row without wall seconds (rows kept by older code) adds its
    CPU seconds as the least wall time it took, and the total is marked not exact; the CPU total
    is NaN where a kept row recorded no CPU seconds."""
    from tapmachine.io.runlog import kept_epochs

    rows, cpu_columns = scored
    if not log.is_file():
        return {}
    earlier = rows[rows["epoch"].isin(kept_epochs(log.read_text(errors="replace")))]
    if earlier.empty:
        return {}
    main, *extra = cpu_columns
    if main in earlier and not earlier[main].isna().any():
        cpu = float(earlier[main].sum())
        cpu += sum(float(earlier[c].fillna(0.0).sum()) for c in extra if c in earlier)
    else:
        cpu = math.nan
    wall_known = "seconds" in earlier and not earlier["seconds"].isna().any()
    wall = float(earlier["seconds"].sum()) if wall_known else cpu
    return {
        "seconds": row["seconds"] + (0.0 if math.isnan(wall) else wall),
        "cpu_seconds": row["cpu_seconds"] + cpu,
        "resumed": True,
        "exact": wall_known and not math.isnan(cpu),
    }


def _resumed_harvest(row: dict, log: Path) -> dict:
    """A harvest's times over all its starts (``wall_times``): its last start's benchmark plus
    the seconds of the chunks of starts its log says it kept from earlier starts
    (``runlog.kept_chunk_seconds``)."""
    from tapmachine.io.runlog import kept_chunk_seconds

    if not log.is_file():
        return {}
    wall, cpu, chunks = kept_chunk_seconds(log.read_text(errors="replace"))
    if not chunks:
        return {}
    return {
        "seconds": row["seconds"] + wall,
        "cpu_seconds": row["cpu_seconds"] + cpu,
        "resumed": True,
        "exact": True,
    }


def _epoch_times(metrics_csv: Path):
    """A TAP training job's per-epoch rows (``metrics.csv``), or None."""
    import pandas as pd

    if not metrics_csv.is_file():
        return None
    epochs = pd.read_csv(metrics_csv)
    return epochs if "epoch_seconds" in epochs else None


def _dbm_epoch_times(dbm_dir: Path, job: str):
    """A DBM training job's per-epoch rows: the history of the model file whose
    ``<dataset>/<model>`` makes the job name ``train_<dataset>_<model>`` (both may hold
    underscores, so the folders are matched, not the name split), or None."""
    import pandas as pd

    from tapmachine.io.modelfile import ModelFile

    for model_pt in sorted(dbm_dir.glob("*/*/model.pt")):
        if job == f"train_{model_pt.parent.parent.name}_{model_pt.parent.name}":
            epochs = pd.DataFrame(ModelFile.load(model_pt).history)
            return epochs if "epoch_seconds" in epochs else None
    return None


def _resumed_training(epochs, row: dict, log: Path | None) -> dict:
    """A training job's times over all its starts (``wall_times``), from its per-epoch rows
    ``epochs`` (``epoch``, ``epoch_seconds``, optionally ``epoch_cpu_seconds``): the epochs
    done before its last start, the part of the next one trained before it (named in the log),
    and the last start's benchmark."""
    if log is not None and log.is_file():
        from tapmachine.io.runlog import resumed_epoch, resumed_within

        text = log.read_text(errors="replace")
        earlier = epochs[epochs["epoch"] <= resumed_epoch(text)]
        part_wall, part_cpu = resumed_within(text)
        if earlier.empty and part_wall == 0.0:
            return {}
        wall, cpu_time, exact = row["seconds"] + part_wall, row["cpu_seconds"] + part_cpu, True
    elif float(epochs["epoch_seconds"].sum()) > row["seconds"]:
        earlier, wall, cpu_time, exact = epochs, 0.0, 0.0, False
    else:
        return {}
    cpu = earlier.get("epoch_cpu_seconds")
    complete = cpu is not None and not cpu.isna().any()
    return {
        "seconds": float(earlier["epoch_seconds"].sum()) + wall,
        "cpu_seconds": float(cpu.sum()) + cpu_time if complete else math.nan,
        "resumed": True,
        "exact": exact,
    }


def wall_times_markdown(times, title: str | None = None, level: int = 3) -> str:
    """A per-stage summary (jobs, total wall and CPU seconds) and the ten longest jobs of
    ``wall_times``; resumed training jobs are marked and explained."""
    h = "#" * level
    out = [f"{h} {title}", ""] if title else []
    out += ["| Stage | Jobs | Wall time, sum (s) | CPU time, sum (s) |", "|---|---|---|---|"]

    def cpu_sum(part):
        return "n/a" if part["cpu_seconds"].isna().any() else round(part["cpu_seconds"].sum(), 1)

    for stage, part in times.groupby("stage", sort=True):
        wall = round(part["seconds"].sum(), 1)
        out.append(f"| {_cell(stage)} | {len(part)} | {_cell(wall)} | {_cell(cpu_sum(part))} |")
    total = round(times["seconds"].sum(), 1)
    out.append(f"| total | {len(times)} | {_cell(total)} | {_cell(cpu_sum(times))} |")
    out += ["", "Longest jobs:", "", "| Job | Wall time (s) | CPU time (s) | Max RSS (MB) |"]
    out.append("|---|---|---|---|")
    for _, r in times.sort_values("seconds", ascending=False).head(10).iterrows():
        job = r["job"]
        if r["resumed"]:
            job += " (resumed)" if r["exact"] else " (resumed, at least)"
        cpu = "n/a" if _blank(r["cpu_seconds"]) else r["cpu_seconds"]
        out.append(
            f"| {_cell(job)} | {_cell(r['seconds'])} | {_cell(cpu)} | {_cell(r['max_rss_mb'])} |"
        )
    out += [
        "",
        "CPU time is what Snakemake's benchmark sampled: a job's processes every 0.5 s for its "
        "first 30 s, then every 30 s, so it misses up to 30 CPU-seconds of each job after its "
        "last sample (a lower bound; wall times are exact).",
    ]
    if times["resumed"].any():
        out += [
            "",
            "A training job marked resumed ran over several starts (it resumes from its last "
            "epoch checkpoint, or part-way through an epoch), and its benchmark file times only "
            "the last start. Its times add the `epoch_seconds` (and `epoch_cpu_seconds`) of the "
            "epochs its earlier starts trained (from `metrics.csv`, or a DBM's `model.pt` "
            "history) and the seconds of an epoch they trained part of, read from its log; "
            "its CPU time is n/a where epochs from before `epoch_cpu_seconds` was recorded are "
            "among them. Its maximum RSS is the last start's.",
        ]
    if (times["resumed"] & times["stage"].isin(["likelihood", "harvest"])).any():
        out += [
            "",
            "A scoring job or harvest marked resumed (Fig. 12's per-epoch scores, the exact "
            "curve; Figs. 5-7's solutions) kept the rows of the epochs, or the chunks of starts, "
            "that its earlier starts finished, which its last start's log names; its times add "
            "their seconds.",
        ]
    if (times["resumed"] & ~times["exact"]).any():
        out += [
            "",
            "Marked 'at least': a training job without its log, the sum of all its epochs' "
            "times, which misses the time a start spent evaluating earlier epochs again; a "
            "scoring job whose kept rows recorded no wall time, their CPU time.",
        ]
    return "\n".join(out) + "\n"


def replace_section(document: str, section: str, content: str) -> str:
    """``document`` with the text between ``<!-- claims:SECTION -->`` and
    ``<!-- /claims:SECTION -->`` replaced by ``content`` (the markers stay); both markers must be
    there, once each, in that order."""
    start, end = f"<!-- claims:{section} -->", f"<!-- /claims:{section} -->"
    i, j = document.find(start), document.find(end)
    if document.count(start) != 1 or document.count(end) != 1 or j < i:
        raise FigureError(f"the document needs one {start} ... {end} pair to fill")
    return document[: i + len(start)] + "\n" + content.rstrip("\n") + "\n" + document[j:]


def write_report(
    figures_dir: str | os.PathLike,
    out: str | os.PathLike,
    title: str | None = None,
    level: int = 2,
    benchmarks_dir: str | os.PathLike | None = None,
    section: str | None = None,
    models_dir: str | os.PathLike | None = None,
    logs_dir: str | os.PathLike | None = None,
    rejudge: bool = False,
    dbm_dir: str | os.PathLike | None = None,
) -> Path:
    """``to_markdown(collect(figures_dir))`` written atomically to ``out``; with
    ``benchmarks_dir`` the run's job wall times follow (``wall_times_markdown``; with
    ``models_dir`` and ``dbm_dir``, resumed training jobs count their earlier starts, exactly
    with ``logs_dir``: ``wall_times``). With
    ``section``, ``out`` must exist and only its ``<!-- claims:SECTION -->`` part is replaced
    (``replace_section``), so docs/results.md keeps its prose around each run's tables.
    ``rejudge``: see ``collect``."""
    from tapmachine.io.files import atomic_write

    text = to_markdown(collect(figures_dir, rejudge), title, level)
    if benchmarks_dir is not None:
        times = wall_times(benchmarks_dir, models_dir, logs_dir, dbm_dir)
        text += "\n" + wall_times_markdown(
            times, "Job wall times (Snakemake benchmark files)", level + 1
        )
    out = Path(out)
    if section is not None:
        if not out.exists():
            raise FigureError(f"{out} not found: --section fills a part of an existing file")
        text = replace_section(out.read_text(), section, text)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda fh: fh.write(text.encode()))
    return out
