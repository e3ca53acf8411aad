"""Tables drawn again from their own CSVs: the second paper's Tables 1-2 (``ucd_table1``,
``ucd_table2``), the first paper's likelihood table (``likelihood_table``) and its Figs. 3 and 12
(``fig3``, ``fig12``: each module's ``from_table`` reads back what its ``draw`` draws).

A table's CSV keeps, in its drawn rows, every field of the inputs it was drawn from: the score
JSON of each DBM (Tables 1-2: its fields are the table's columns, and the floor rows that
``ucd_dbm.tables`` adds are told apart by their model name) or the row ``likelihood_table.make``
builds from each model's ``final.csv`` and ``model.pt``, or the curves of Fig. 3 (per model) and
Fig. 12 (per split) with what their titles and claim rows read from the models and the scoring
settings. ``inputs`` reads them back, ``redraw`` draws the table with the current code, and
``claim_differences`` compares the claim rows it computes with those of the CSV: the same inputs
give the same verdicts, so a difference in a value or a verdict means the CSV lacks what the
table reads, or the code judges differently.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from tapmachine.figures import fig3, fig12, likelihood_table
from tapmachine.figures.common import FigureError, FigureResult, require_columns
from tapmachine.figures.ucd_dbm import tables

__all__ = [
    "TABLES",
    "TABLE_COLUMNS",
    "UCD_REQUIRED",
    "claim_differences",
    "inputs",
    "redraw",
    "read_table",
    "table_name",
    "verdict_changes",
]

#: The columns a figure table adds to its drawn rows (``common.table``, ``common.claim``): not
#: fields of the inputs it was drawn from.
TABLE_COLUMNS = ("kind", "claim", "epoch", "value", "detail", "held")

#: The score fields Tables 1-2 cannot be drawn without (the others, ``sizes``, ``ais_ll``,
#: ``fid_floor``, tau and T, are optional there too).
UCD_REQUIRED = ("dataset", "model", "method", "classifier_fid", "classifier_accuracy", "tap_ll")

#: The likelihood table's count columns: integers in ``make``'s rows, floats in its CSV (the
#: published row leaves them blank).
_COUNTS = ("sampling_steps", "hidden_units", "n_train", "epochs", "updates", "n_test_images")


def read_table(csv) -> pd.DataFrame:
    """A figure's CSV, checked to be a figure table (a ``kind`` column with drawn rows)."""
    path = Path(csv)
    if not path.is_file():
        raise FigureError(f"{path} not found")
    table = pd.read_csv(path)
    if "kind" not in table or not (table["kind"] == "drawn").any():
        raise FigureError(f"{path}: not a figure table (no drawn rows in a kind column)")
    return table


def table_name(csv) -> str:
    """The table a CSV holds, from its file name as the workflow writes it (``ucd_table1.csv``,
    ``ucd_table2.csv``, ``likelihood_table.csv``)."""
    stem = Path(csv).stem
    if stem not in TABLES:
        raise FigureError(
            f"{csv}: no table named {stem!r} to redraw (one of {', '.join(TABLES)}; "
            "name it with --table)"
        )
    return stem


def _ucd_scores(figure_table: pd.DataFrame) -> pd.DataFrame:
    """The score rows (one per DBM, the fields of its score JSON) a Table 1 or 2 CSV was drawn
    from: its drawn rows without the floor rows (``tables.FLOOR_MODEL``) and without the columns
    the table adds (``TABLE_COLUMNS``, ``tables.AIS_LABEL``: a copy of ``ais_ll``)."""
    drawn = figure_table[figure_table["kind"] == "drawn"]
    require_columns(drawn, UCD_REQUIRED)
    scores = drawn[drawn["model"] != tables.FLOOR_MODEL]
    if scores.empty:
        raise FigureError("the table has no DBM rows (only floor rows)")
    scores = scores.drop(columns=[c for c in TABLE_COLUMNS if c in scores])
    if "ais_ll" not in scores and tables.AIS_LABEL in scores:
        scores = scores.rename(columns={tables.AIS_LABEL: "ais_ll"})
    return scores.drop(columns=[tables.AIS_LABEL], errors="ignore").reset_index(drop=True)


def _integral(value):
    """A count read back from a CSV as float (500.0) as the integer it was (500)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _likelihood_rows(figure_table: pd.DataFrame) -> tuple[list[dict], bool]:
    """The computed models' rows of a likelihood table (``likelihood_table.make``'s, before the
    published row) and whether it drew the published row."""
    drawn = figure_table[figure_table["kind"] == "drawn"]
    require_columns(drawn, ("computed",))
    computed = drawn[drawn["computed"] == 1].drop(columns=[c for c in TABLE_COLUMNS if c in drawn])
    if computed.empty:
        raise FigureError("the table has no computed rows")
    rows = []
    for row in computed.to_dict("records"):
        row = {k: _integral(v) if k in _COUNTS or k == "computed" else v for k, v in row.items()}
        if row.get("reference") != row.get("reference"):  # blank in the CSV: "" in make's rows
            row["reference"] = ""
        rows.append(row)
    return rows, bool((drawn["computed"] == 0).any())


def inputs(figure_table: pd.DataFrame, name: str):
    """What table ``name`` (a key of ``TABLES``) is drawn from, read back from its CSV
    (``figure_table``): Tables 1-2, the score rows (a DataFrame, one row per DBM); the
    likelihood table, its computed rows and whether the published row was drawn; Figs. 3 and
    12, the arguments of their ``draw`` (``fig3.from_table``, ``fig12.from_table``)."""
    if name not in TABLES:
        raise FigureError(f"no table named {name!r} to redraw (one of {', '.join(TABLES)})")
    return TABLES[name][0](figure_table)


def redraw(figure_table: pd.DataFrame, name: str) -> FigureResult:
    """Table ``name`` drawn by the current code from its CSV alone (``inputs``)."""
    got = inputs(figure_table, name)
    draw = TABLES[name][1]
    return draw(*got) if isinstance(got, tuple) else draw(got)


def _claim_rows(figure_table: pd.DataFrame) -> dict:
    """(claim, model, epoch, n-th such row) -> (value, held) of a table's claim rows."""
    rows = figure_table[figure_table["kind"] == "claim"]
    out, seen = {}, {}
    for r in rows.to_dict("records"):
        key = tuple(_key_part(r.get(c)) for c in ("claim", "model", "epoch"))
        seen[key] = seen.get(key, 0) + 1
        held = r.get("held")
        out[(*key, seen[key])] = (r.get("value"), "" if _blank(held) else str(held))
    return out


def _key_part(value) -> str:
    """A claim row's claim, model or epoch as text; an epoch read back as 3.0 is 3."""
    return "" if _blank(value) else str(_integral(value))


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


#: Relative difference within which two claim values are the same: a value fitted from the
#: drawn numbers (Fig. 3's least-squares slopes) can differ in its last bits between machines
#: and numpy builds, which sum in other orders (1e-15 relative, measured on the committed
#: paper-size Fig. 3).
SAME_VALUE_RTOL = 1e-9


def _same_value(a, b) -> bool:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=SAME_VALUE_RTOL, abs_tol=0.0)


def claim_differences(
    old: pd.DataFrame, new: pd.DataFrame, verdicts: bool = True
) -> tuple[list[str], list[str]]:
    """The claim rows of two tables compared, keyed by claim, model and epoch: (rows in both
    whose value or, with ``verdicts``, verdict differ, rows in only one of them), each a line of
    text. Values must be equal to ``SAME_VALUE_RTOL`` (NaN equals NaN): a redraw computes them
    from the same numbers in the same way. Without ``verdicts`` a row whose value is the same
    and whose verdict the current code gives otherwise (a committed run judged again) is not a
    difference; ``verdict_changes`` lists them."""
    a, b = _claim_rows(old), _claim_rows(new)
    changed = []
    for key in a.keys() & b.keys():
        (va, ha), (vb, hb) = a[key], b[key]
        if not _same_value(va, vb) or (verdicts and ha != hb):
            changed.append(f"{_label(key)}: value {va!r} -> {vb!r}, verdict {ha!r} -> {hb!r}")
    only = [f"only in the CSV: {_label(k)}" for k in a.keys() - b.keys()]
    only += [f"only in the redraw: {_label(k)}" for k in b.keys() - a.keys()]
    return sorted(changed), sorted(only)


def verdict_changes(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """The claim rows in both tables with the same value and another verdict, each a line of
    text: what the current code judges otherwise than the code that wrote ``old``."""
    a, b = _claim_rows(old), _claim_rows(new)
    return sorted(
        f"{_label(key)}: verdict {a[key][1]!r} -> {b[key][1]!r} (value {a[key][0]!r})"
        for key in a.keys() & b.keys()
        if _same_value(a[key][0], b[key][0]) and a[key][1] != b[key][1]
    )


def _label(key) -> str:
    claim, model, epoch, n = key
    text = claim + (f" [{model}]" if model else "") + (f" epoch {epoch}" if epoch else "")
    return text + (f" (#{n})" if n > 1 else "")


#: Each table that can be redrawn: how its inputs are read back from its CSV, and the function
#: that draws it from them.
TABLES = {
    "ucd_table1": (_ucd_scores, tables.table1_from_scores),
    "ucd_table2": (_ucd_scores, tables.table2_from_scores),
    "likelihood_table": (_likelihood_rows, likelihood_table.from_rows),
    "fig3": (fig3.from_table, fig3.draw),
    "fig12": (fig12.from_table, fig12.draw),
}
