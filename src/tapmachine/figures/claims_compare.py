"""The claims of one config's run before and after a change, row by row.

A change of the code or of a setting (a solver, a step rule, a size) is judged by what it does
to the verdicts: ``compare`` sets the claim rows of two runs side by side
(``claims.side_by_side`` on ``collect`` of each run's ``figures/``) and names, per claim row,
how its verdict moved (``change``): kept (``held`` / ``not held``), turned (``held -> not held``,
``not held -> held``), gained or lost (a row one run has no verdict for, or lacks). A committed
run whose inputs are gone is judged by the current code with ``rejudge`` (``claims.collect``), so
that both sides are worded and thresholded alike.
"""

from __future__ import annotations

import os

from tapmachine.figures.claims import collect, row_labels, side_by_side
from tapmachine.figures.common import blank, markdown_cell

__all__ = ["KINDS", "LABELS", "change", "compare", "compare_markdown", "kind"]

#: The two runs' labels in the table's columns.
LABELS = ("before", "after")


def change(before, after, in_before: bool = True, in_after: bool = True) -> str:
    """How a claim row's verdict moved: '' for a context row (no verdict in either run),
    'new' / 'gone' for a row only one run has, the verdict where both runs give the same one,
    else 'B -> A' with 'no verdict' for a blank side."""
    b = "" if blank(before) else str(before)
    a = "" if blank(after) else str(after)
    if not (b or a):
        return ""
    if not in_before:
        return "new"
    if not in_after:
        return "gone"
    if a == b:
        return a
    return f"{b or 'no verdict'} -> {a or 'no verdict'}"


def compare(before: str | os.PathLike, after: str | os.PathLike, rejudge: bool = False):
    """The claim rows of the runs whose figures are in ``before`` and ``after`` (folders of
    figure CSVs), one row per claim row (``claims.ROW_KEY``), with each run's ``value``,
    ``held`` and ``detail`` and the row's ``change``. ``rejudge``: both runs' Figs. 3-5 and
    tables judged again by the current code (``claims.collect``)."""
    table = side_by_side({"before": collect(before, rejudge), "after": collect(after, rejudge)})
    present = {k: table[f"value {k}"].notna() | table[f"detail {k}"].notna() for k in LABELS}
    table["change"] = [
        change(b, a, pb, pa)
        for b, a, pb, pa in zip(
            table["held before"],
            table["held after"],
            present["before"],
            present["after"],
            strict=True,
        )
    ]
    return table


#: The summary's columns: how a verdict row's ``change`` counts.
KINDS = ("held in both", "not held in both", "now held", "no longer held", "other")


def kind(change_text: str) -> str:
    """Which of ``KINDS`` a verdict row's ``change`` is ('other': a row one run lacks or has no
    verdict for)."""
    if change_text in ("held", "not held"):
        return f"{change_text} in both"
    if change_text == "not held -> held":
        return "now held"
    if change_text.startswith("held ->"):
        return "no longer held"
    return "other"


def compare_markdown(
    table, title: str | None = None, level: int = 2, names: tuple[str, str] = LABELS
) -> str:
    """``compare``'s table as markdown: per figure, how many verdict rows kept or turned their
    verdict, then every verdict row with both runs' values and verdicts and its change.
    ``names``: the two runs as the column headers say them."""
    h = "#" * level
    out = [f"{h} {title}", ""] if title else []
    judged = table[table["change"] != ""]
    out += ["| Figure | " + " | ".join(KINDS) + " |", "|---|" + "---|" * len(KINDS)]
    for fig in dict.fromkeys(judged["figure"]):
        kinds = [kind(c) for c in judged.loc[judged["figure"] == fig, "change"]]
        counts = [kinds.count(k) for k in KINDS]
        out.append(f"| {fig} | " + " | ".join(map(str, counts)) + " |")
    before, after = names
    out += [
        "",
        f"| Figure | Claim row | Model | Row | {before} | {after} | Change |",
        "|---|---|---|---|---|---|---|",
    ]
    which = row_labels(table, LABELS)  # over every row: a context row can share a claim
    for i, r in judged.iterrows():
        row = which[i]
        sides = [
            f"{markdown_cell(r[f'value {k}'])} ({markdown_cell(r[f'held {k}']) or '-'})"
            for k in LABELS
        ]
        cells = [r["figure"], r["claim"], r["model"], row, *sides, r["change"]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
