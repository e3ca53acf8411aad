"""What every figure module shares: one style, Agg figures, atomic PNG/PDF/CSV output, titles,
claims.

A figure function returns a ``FigureResult``: the matplotlib figure, one table (``pandas``)
with what the figure draws (``kind`` = "drawn") and the numbers behind the paper's claims
(``kind`` = "claim": ``claim``, ``value``, ``detail``), and the models it drew. ``save`` writes
the three files atomically; the figure stage (``pipeline.stages.figures``) records them as a run.

Every figure is drawn and saved in one style (``tapmachine.mplstyle``, through ``style``; a
figure function is decorated with ``styled``), sized for a journal: one column
(``COLUMN`` inches) or, for figures of several panels, the page's two (``PAGE``). Its title is
at most two lines; what a title used to carry (run notes, legends of line styles) is in the
figure's CSV and its report caption (workflow/report). A legend of several entries sits outside
the data: below its panel (``legend_below``) or below the figure
(``fig.legend(loc="outside lower center")``), so that no data lies under it whatever the data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tapmachine.core.errors import TapmachineError
from tapmachine.io.files import atomic_write

__all__ = [
    "COLUMN",
    "PAGE",
    "STYLE",
    "FigureError",
    "FigureResult",
    "MissingColumns",
    "blank",
    "markdown_cell",
    "ModelInfo",
    "new_figure",
    "model_info",
    "require_columns",
    "claim",
    "table",
    "describe",
    "dataset_label",
    "legend_below",
    "model_colours",
    "substitute_claims",
    "save",
    "style",
    "styled",
    "wrap_suptitle",
]

#: The figures' style file, and the widths it is sized for (inches): one journal column, and the
#: page's two columns with the gap between them.
STYLE = Path(__file__).with_name("tapmachine.mplstyle")
COLUMN = 3.4
PAGE = 7.0


class FigureError(TapmachineError):
    """A figure cannot be drawn from its inputs (missing, inconsistent or empty files)."""


class MissingColumns(FigureError):
    """A figure table (its CSV) whose drawn rows lack columns that drawing it again from the CSV
    reads (``figures.redraw``): written before its figure carried them."""


def require_columns(drawn, columns) -> None:
    """Raise ``MissingColumns`` naming those of ``columns`` that a figure table's ``drawn`` rows
    lack (nothing when they have them all)."""
    missing = sorted(set(columns) - set(drawn))
    if missing:
        raise MissingColumns(f"the table's drawn rows lack {missing}: it cannot be redrawn")


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


@contextlib.contextmanager
def style():
    """Matplotlib's settings of ``STYLE`` for the duration of the block (then restored)."""
    import matplotlib

    with matplotlib.rc_context(fname=STYLE):
        yield


def styled(make):
    """``make`` (a figure function) run in ``style``: its artists take the style's sizes."""

    @functools.wraps(make)
    def drawn_in_style(*args, **kwargs):
        with style():
            return make(*args, **kwargs)

    return drawn_in_style


def new_figure(width: float, height: float):
    """A matplotlib Figure on an Agg canvas (no pyplot global state), ``width`` x ``height``
    inches (``COLUMN`` or ``PAGE`` wide)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def legend_below(ax, handles=None, labels=None, *, ncols: int = 2, gap: float = 2.0):
    """``ax``'s legend centred under its x axis (tick labels and label), ``gap`` points below it,
    in ``ncols`` columns: outside the data, whatever the data (``handles`` and ``labels``: the
    axes' own when None).

    The x axis's depth is measured when this is called, in points (it does not change as the
    layout moves or resizes the axes): call it once the axis's label, scale and tick labels are
    set. The layout (constrained) makes room for the legend below the axes.
    """
    from matplotlib.transforms import ScaledTranslation

    root = ax.get_figure(root=True)
    extent = ax.xaxis.get_tightbbox(root.canvas.get_renderer())
    depth = 0.0 if extent is None else max(0.0, ax.bbox.y0 - extent.y0) * 72 / root.dpi
    below = ScaledTranslation(0, -(depth + gap) / 72, root.dpi_scale_trans)
    args = () if handles is None else (handles, labels)
    return ax.legend(
        *args,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=ax.transAxes + below,
        ncols=ncols,
        borderaxespad=0.0,
    )


def model_info(model_file) -> ModelInfo:
    """The ModelInfo of a trained ``model.pt``."""
    model = load_model_file(model_file)
    return ModelInfo(
        name=model.name,
        dataset=model.dataset,
        substitute=str(model.substitute or ""),
        train_run_id=str(model.mlflow_run_id or ""),
        sizes=model.sizes,
    )


def load_model_file(model_file):
    """The ModelFile at ``model_file``; a FigureError if it is missing or unreadable."""
    from tapmachine.io.modelfile import ModelFile, ModelFileError

    path = Path(model_file)
    if not path.exists():
        raise FigureError(f"{path} not found: train the model first")
    try:
        return ModelFile.load(path)
    except ModelFileError as err:
        raise FigureError(str(err)) from err


def describe(info: ModelInfo) -> str:
    """'model on dataset', the dataset marked when it is a substitute (``dataset_label``), for
    titles."""
    return f"{info.name} on {dataset_label(info.dataset, info.substitute)}"


def dataset_label(dataset: str, substitute: str) -> str:
    """The dataset's name, with "(substitute)" when the data stand in for the paper's: short
    enough for a panel title; the substitute's description is in the CSV
    (``substitute_claims``) and the report's caption."""
    return f"{dataset} (substitute)" if substitute else dataset


def substitute_claims(infos: Iterable[ModelInfo]) -> list[dict]:
    """A context row per model trained on substitute data (``substitute_data``: the dataset and
    the substitute's description, which titles only mark as "(substitute)")."""
    return [
        claim(
            "substitute_data",
            math.nan,
            info.name,
            f"{info.dataset} is a substitute for the paper's data: {info.substitute}",
        )
        for info in infos
        if info.substitute
    ]


def model_colours(names: Iterable[str]) -> dict[str, str]:
    """Model name -> its colour: the style's colour cycle (``STYLE``'s ``axes.prop_cycle``) in the
    order of ``names``, repeated names taking their first colour.

    Figures that draw the same models (Figs. 3 and 4) are given the same ``names`` (their
    ``palette``), so that a model keeps its colour from one figure to the next; every model of a
    figure has its own colour while the names are no more than the cycle's colours.
    """
    import matplotlib

    with style():
        cycle = [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]]
    names = list(dict.fromkeys(names))
    return {name: cycle[i % len(cycle)] for i, name in enumerate(names)}


def claim(
    name: str, value, model: str = "", detail: str = "", epoch=None, held: bool | None = None
) -> dict:
    """A row of the claims part of a figure's table.

    ``held`` is the verdict on the paper's claim that this number tests ("held" / "not held"
    in the ``held`` column); None for numbers that are context, not a test.
    """
    if isinstance(value, bool | np.bool_):
        value = float(value)
    verdict = "" if held is None else ("held" if bool(held) else "not held")
    return {
        "kind": "claim",
        "claim": name,
        "model": model,
        "epoch": epoch,
        "value": value,
        "detail": detail,
        "held": verdict,
    }


#: The sizes behind the first paper's Figs. 3 and 5-7 (Table 1, Sec. VII.2).
PAPER_EPOCHS = 100
PAPER_INITIALISATIONS = 10000


def size_note(epochs: int | None = None, initialisations: int | None = None) -> str:
    """A title line saying the figure is below paper size (the paper's 100 epochs, 10,000
    initialisations), or "" at paper size.

    The line states the size only: which claims hold at reduced size, only at paper size or at
    neither is measured (docs/results.md), and a figure whose claims need more than size says so
    in its own title (Fig. 8: training's TAP iterations).
    """
    short = []
    if epochs is not None and epochs < PAPER_EPOCHS:
        short.append(f"{epochs} of {PAPER_EPOCHS} epochs")
    if initialisations is not None and initialisations < PAPER_INITIALISATIONS:
        short.append(f"{initialisations:,} of {PAPER_INITIALISATIONS:,} initialisations")
    if not short:
        return ""
    return f"REDUCED SIZE ({', '.join(short)})"


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


def wrap_suptitle(fig, margin: float = 0.97) -> None:
    """Re-wrap the figure's title so that each line fits ``margin`` of the figure's width.

    Titles carry run notes ("REDUCED SIZE ...", substitutes, gaps) and grow past a one-panel
    figure's edge, where the saved image would cut them off. Each of the title's lines is
    refilled at one character count, narrowed (from the rendered width) until all fit.
    """
    import textwrap

    title = fig._suptitle
    if title is None or not title.get_text():
        return
    renderer = fig.canvas.get_renderer()
    limit = margin * fig.bbox.width
    lines = title.get_text().split("\n")
    chars = max(len(line) for line in lines)
    for _ in range(5):  # character widths vary: narrow the fill until the rendered lines fit
        width = title.get_window_extent(renderer).width
        if width <= limit or chars <= 20:
            return
        chars = max(20, min(chars - 1, int(chars * limit / width)))
        title.set_text("\n".join(textwrap.fill(line, chars) for line in lines))


def save(result: FigureResult, png, pdf, csv) -> list[Path]:
    """Write the figure as PNG and PDF (in ``style``; no PDF when ``pdf`` is None) and its table
    as CSV (each atomically); the paths written.

    The title is first wrapped to the figure's width (``wrap_suptitle``)."""
    images = [(Path(png), "png")] + ([] if pdf is None else [(Path(pdf), "pdf")])
    wrap_suptitle(result.figure)
    written = []
    try:
        with style():
            for path, kind in images:
                atomic_write(path, lambda fh, kind=kind: result.figure.savefig(fh, format=kind))
                written.append(path)
        atomic_write(csv, lambda fh: fh.write(result.table.to_csv(index=False).encode()))
        written.append(Path(csv))
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return written


def blank(v) -> bool:
    """Whether a table value is empty: None, NaN or empty text."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v) == ""


def markdown_cell(v) -> str:
    """A value as markdown table text: numbers to 4 significant digits, '|' escaped."""
    if blank(v):
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
        return markdown_cell(float(v))
    except (TypeError, ValueError):
        return str(v).replace("|", "\\|").replace("\n", " ")
