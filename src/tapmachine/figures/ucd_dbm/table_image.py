"""A table of scores drawn as a figure (Tables 1-2 of the second paper): headers in words with
units, one number format per column."""

from __future__ import annotations

from tapmachine.figures.common import PAGE, new_figure

__all__ = ["HEADERS", "table_figure"]

#: Each drawn column's header (words and units) and its one number format.
HEADERS = {
    "dataset": ("Dataset", "{}"),
    "model": ("Model", "{}"),
    "method": ("Method", "{}"),
    "sizes": ("Layer sizes", "{}"),
    "classifier_fid": ("Classifier\nFID", "{:.1f}"),
    "classifier_accuracy": ("Classifier\naccuracy", "{:.3f}"),
    "tap_ll": ("TAP log-lik.\n(nats/unit)", "{:.4f}"),
    "ais_ll_lower_bound": ("AIS log-lik. bound\n(nats/image)", "{:.1f}"),
}


def _cell(value, fmt: str) -> str:
    """A table cell: NaN (no value: the floor row's likelihoods) as '-', numbers in ``fmt``."""
    if isinstance(value, float) and value != value:
        return "-"
    return fmt.format(value) if isinstance(value, int | float) else str(value)


def table_figure(df, columns, title):
    """The table as a figure, with ``HEADERS``' words and one precision per column (text
    columns left-aligned, numbers right-aligned)."""
    from matplotlib.table import Table

    fig = new_figure(PAGE, 0.3 * (len(df) + 1) + 0.5)
    ax = fig.subplots()
    ax.axis("off")
    cells = [
        [_cell(v, HEADERS[c][1]) for c, v in zip(columns, row, strict=True)]
        for row in df[columns].itertuples(index=False)
    ]
    t = Table(ax, bbox=(0, 0, 1, 1))
    for c, column in enumerate(columns):
        header, fmt = HEADERS[column]
        t.add_cell(0, c, width=1.0, height=1.0, text=header, loc="center")
        for r, row in enumerate(cells, start=1):
            t.add_cell(
                r, c, width=1.0, height=1.0, text=row[c], loc="left" if fmt == "{}" else "right"
            )
    ax.add_table(t)
    t.auto_set_font_size(False)
    t.auto_set_column_width(list(range(len(columns))))
    ax.set_title(title)
    return fig
