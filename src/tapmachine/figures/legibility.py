"""Whether a figure reads at its printed size: what a reader would find wrong with its text.

``problems`` draws the figure once, with a renderer that records every piece of text it draws
(titles, axis labels, tick labels, legends, annotations, table cells), and reports, from the
renderer's text extents:

- two pieces of text whose boxes intersect by more than ``TOLERANCE`` pixels each way;
- text that reaches past the figure's edge (cut off in the saved image);
- a title (the figure's or a panel's) of more than ``MAX_TITLE_LINES`` lines;
- text smaller than ``MIN_POINTS``, or a figure wider than ``MAX_WIDTH`` inches (two journal
  columns): printed at the journal's size, its text would be too small to read.

The figure is drawn as ``common.save`` draws it: after its title is wrapped to its width, at
the dpi of the saved PNG (text extents do not scale exactly with the dpi).
"""

from __future__ import annotations

__all__ = ["MAX_TITLE_LINES", "MAX_WIDTH", "MIN_POINTS", "TOLERANCE", "drawn_texts", "problems"]

MAX_TITLE_LINES = 2
#: Two journal columns of 3.4 in and the gap between them.
MAX_WIDTH = 7.0
MIN_POINTS = 5.0
#: Points by which two boxes may touch: glyph boxes carry some padding.
TOLERANCE = 0.5


def drawn_texts(fig, dpi: float | None = None) -> list:
    """(text artist, its window extent in pixels at ``dpi``, default the figure's) for every
    non-empty text the figure draws, in drawing order; hidden texts, texts of hidden axes and
    tick labels outside the view are not drawn."""
    from matplotlib.backends.backend_agg import RendererAgg

    seen: dict[int, object] = {}

    class Recorder(RendererAgg):
        def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
            if mtext is not None and str(s).strip():
                seen.setdefault(id(mtext), mtext)
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)

    kept = fig.dpi
    fig.dpi = dpi or kept
    try:
        renderer = Recorder(fig.bbox.width, fig.bbox.height, fig.dpi)
        fig.draw(renderer)
        return [(t, t.get_window_extent(renderer)) for t in seen.values()]
    finally:
        fig.dpi = kept


def _name(text) -> str:
    words = " ".join(text.get_text().split())
    return repr(words if len(words) <= 40 else words[:37] + "...")


def _titles(fig) -> list:
    titles = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        titles += [ax.title, ax._left_title, ax._right_title]
    return [t for t in titles if t.get_visible() and t.get_text().strip()]


def problems(fig) -> list[str]:
    """What makes ``fig`` hard to read, one line each (empty: nothing found)."""
    from matplotlib import rc_params_from_file
    from matplotlib.transforms import Bbox

    from tapmachine.figures.common import STYLE, wrap_suptitle

    wrap_suptitle(fig)
    dpi = float(rc_params_from_file(STYLE, use_default_template=False)["savefig.dpi"])
    tolerance = TOLERANCE * dpi / 72
    found = []
    width = fig.get_figwidth()
    if width > MAX_WIDTH + 1e-9:
        found.append(f"figure {width:.2f} in wide, more than two columns ({MAX_WIDTH} in)")
    for title in _titles(fig):
        lines = title.get_text().strip().count("\n") + 1
        if lines > MAX_TITLE_LINES:
            found.append(f"title of {lines} lines: {_name(title)}")
    texts = drawn_texts(fig, dpi)
    edge = Bbox.from_bounds(0, 0, width * dpi, fig.get_figheight() * dpi)
    for text, box in texts:
        if text.get_fontsize() < MIN_POINTS:
            found.append(f"{text.get_fontsize():g} pt text: {_name(text)}")
        if (
            box.x0 < edge.x0 - tolerance
            or box.y0 < edge.y0 - tolerance
            or box.x1 > edge.x1 + tolerance
            or box.y1 > edge.y1 + tolerance
        ):
            found.append(f"text past the figure's edge: {_name(text)}")
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1 :]:
            wide = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            high = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if wide > tolerance and high > tolerance:
                found.append(f"overlapping text: {_name(a)} and {_name(b)}")
    return found
