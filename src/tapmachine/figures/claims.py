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

import os
import re
from pathlib import Path

from tapmachine.figures.common import FigureError, blank, markdown_cell
from tapmachine.figures.job_times import wall_times, wall_times_markdown

__all__ = [
    "PAPER_CLAIMS",
    "ROW_KEY",
    "collect",
    "row_labels",
    "side_by_side",
    "to_markdown",
    "replace_section",
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
    a committed run whose inputs are gone, as the code now words them; a table whose drawn rows
    lack what its redraw reads (``common.MissingColumns``: a CSV written before they carried it,
    e.g. a Fig. 12 without its scoring settings) keeps its rows as written.
    """
    import importlib

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
            table = _redrawn(table, path.stem)
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
        held if not blank(held) else _verdict_in_text(detail)
        for held, detail in zip(rows["held"], rows["detail"], strict=True)
    ]
    return rows


def _redrawn(figure_table, name: str):
    """Table ``name`` as ``figures.redraw`` draws it again from its CSV (``figure_table``), or the
    CSV as it is, said on stderr, when its drawn rows lack what the redraw reads
    (``MissingColumns``)."""
    import sys

    import matplotlib.pyplot as plt

    from tapmachine.figures import redraw
    from tapmachine.figures.common import MissingColumns

    try:
        result = redraw.redraw(figure_table, name)
    except MissingColumns as missing:
        print(f"{name}: claim rows kept as written, not judged again ({missing})", file=sys.stderr)
        return figure_table
    plt.close(result.figure)
    return result.table


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
        rows["epoch"] = [markdown_cell(e) for e in rows["epoch"]]
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
            text = next((row[f"detail {k}"] for k in labels if not blank(row[f"detail {k}"])), "")
            parts.append(re.split(r"[:;,]", str(text), maxsplit=1)[0])
        out.append(", ".join(parts))
    return out


def _verdict_in_text(detail) -> str | None:
    """'held' / 'not held' where a claim row states its verdict at the start of its text only
    (e.g. fig10's "not held: final PL ...", ucd_fig1's "held: slope ..."), else None."""
    match = re.match(r"(not held|held)\b", str(detail)) if not blank(detail) else None
    return match.group(1) if match else None


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
        claim = markdown_cell(PAPER_CLAIMS.get(fig, ""))
        out.append(f"| {fig} | {claim} | {held} | {not_held} | {context} |")
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
            value = "n/a" if blank(r["value"]) else r["value"]  # not measurable (NaN)
            cells = [r["claim"], r["model"], r["epoch"], value, r["detail"], r["held"]]
            out.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
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
