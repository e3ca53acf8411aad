"""The spread of a run's claims over seeds: the same targets run with several config seeds, their
claim rows set side by side.

A verdict that compares methods (TAP against the OPE, adaTAP against TAP, UCD-LMI against its
ablations) is one draw of the seed: initial weights, minibatch order, data subsets and samplers
all follow it. ``spread`` takes the claim rows of several runs of the same config that differ in
``seed`` (``collect`` on each run's ``figures/``, set side by side by ``claims.side_by_side``)
and gives, per claim row, the value of every
seed, their mean, standard deviation and range, and whether the verdict held on every seed, on
none, or on some (``verdict``: ``held on every seed`` / ``not held on any seed`` / ``split``).
"""

from __future__ import annotations

import math
import os

from tapmachine.figures.claims import collect, row_labels, side_by_side
from tapmachine.figures.common import FigureError, markdown_cell

__all__ = ["spread", "spread_markdown", "verdict_over_seeds"]


def verdict_over_seeds(verdicts) -> str:
    """'held on every seed', 'not held on any seed', 'split', or '' for context rows (no
    verdict on any seed). A seed on which the row has no verdict (not measurable there) makes
    a verdict row 'split'."""
    given = ["" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in verdicts]
    if not any(given):
        return ""
    if all(v == "held" for v in given):
        return "held on every seed"
    if all(v == "not held" for v in given):
        return "not held on any seed"
    return "split"


def spread(runs: dict[str, str | os.PathLike]):
    """One row per claim row (``claims.ROW_KEY``) of the runs ``{label: figures folder}``: the
    value, verdict and text of each run (``value <label>``, ``held <label>``, ``detail
    <label>``), then ``n`` (runs with a finite value), ``mean``, ``std`` (sample, over those
    runs), ``min``, ``max`` and ``verdict`` (``verdict_over_seeds``). Rows are in the first
    run's order; a row some run lacks has NaN there. Non-numeric values are carried but not
    summarised."""
    import numpy as np
    import pandas as pd

    if len(runs) < 2:
        raise FigureError(f"a spread over seeds needs at least 2 runs, got {len(runs)}")
    wide = side_by_side({label: collect(folder) for label, folder in runs.items()})
    labels = list(runs)
    values = wide[[f"value {k}" for k in labels]].apply(pd.to_numeric, errors="coerce")
    finite = values.where(np.isfinite(values))
    wide["n"] = finite.notna().sum(axis=1)
    wide["mean"] = finite.mean(axis=1)
    wide["std"] = finite.std(axis=1, ddof=1)
    wide["min"] = finite.min(axis=1)
    wide["max"] = finite.max(axis=1)
    wide["verdict"] = [
        verdict_over_seeds(r) for r in wide[[f"held {k}" for k in labels]].itertuples(index=False)
    ]
    return wide.reset_index(drop=True)


def spread_markdown(table, title: str | None = None, level: int = 2) -> str:
    """``spread``'s table as markdown: a count of the verdict rows that held on every seed, on
    none and split per figure, then every verdict row with its per-seed values and verdicts."""
    labels = [c.removeprefix("value ") for c in table.columns if c.startswith("value ")]
    h = "#" * level
    out = [f"{h} {title}", ""] if title else []
    out += [
        "| Figure | Held on every seed | Not held on any seed | Split |",
        "|---|---|---|---|",
    ]
    judged = table[table["verdict"] != ""]
    for fig in dict.fromkeys(judged["figure"]):
        rows = judged[judged["figure"] == fig]["verdict"]
        counts = [int((rows == v).sum()) for v in VERDICTS]
        out.append(f"| {fig} | " + " | ".join(map(str, counts)) + " |")
    which = row_labels(table, labels)  # over every row: a context row can share a claim
    shown = any(which[i] for i in judged.index)  # a Row column where a claim has several rows
    out += [
        "",
        "| Figure | Claim row | Model | "
        + ("Row | " if shown else "")
        + " | ".join(f"seed {k}" for k in labels)
        + " | Mean | Std | Verdict over seeds |",
        "|---|---|---|" + ("---|" if shown else "") + "---|" * len(labels) + "---|---|---|",
    ]
    for i, r in judged.iterrows():
        row = which[i]
        seeds = [
            f"{markdown_cell(r[f'value {k}'])} ({markdown_cell(r[f'held {k}']) or '-'})"
            for k in labels
        ]
        head = [r["figure"], r["claim"], r["model"], *([row] if shown else [])]
        cells = [*head, *seeds, r["mean"], r["std"], r["verdict"]]
        out.append(
            "| " + " | ".join(c if isinstance(c, str) else markdown_cell(c) for c in cells) + " |"
        )
    return "\n".join(out) + "\n"


#: The verdicts over seeds, in the order the summary counts them.
VERDICTS = ("held on every seed", "not held on any seed", "split")
