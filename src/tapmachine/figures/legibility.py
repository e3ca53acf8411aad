"""Whether a figure reads at its printed size: what a reader would find wrong with it.

``problems`` draws the figure once, recording every piece of text drawn (titles, axis labels,
tick labels, legends, annotations, table cells; multi-line texts as one box each), and reports,
from the renderer's extents:

- two pieces of text whose boxes intersect by more than ``TOLERANCE`` points each way;
- text that reaches past the figure's edge (cut off in the saved image);
- a title (the figure's or a panel's) of more than ``MAX_TITLE_LINES`` lines;
- text smaller than ``MIN_POINTS``, or a figure wider than ``MAX_WIDTH`` inches (two journal
  columns): printed at the journal's size, its text would be too small to read;
- a legend over data: inside the legend's box, less ``TOLERANCE``, and inside the clip box of
  the axes that draws it, lies a line's vertex or part of one of its segments (a segment that
  crosses the box between two vertices outside it counts: segment and box are intersected
  exactly, in pixels), of lines, error bars and caps and reference lines, a scatter point, or
  part of a filled area (bands of ``fill_between``, histogram bars). Bands count: they are the
  spread the figure reports, and a legend on a band hides what the reader is asked to read off
  it. Images do not (no figure puts a legend on an image);
- two axes (colour bars among them) whose boxes intersect by more than ``TOLERANCE`` points each
  way, except twins (``twinx``/``twiny``: one position by design) and an inset with the axes it
  was placed in and their twins (``Axes.inset_axes``: the parent's ``child_axes``).

The figure is drawn as ``common.save`` draws it: after its title is wrapped to its width, at
the dpi of the saved PNG (text extents do not scale exactly with the dpi).
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = [
    "MAX_TITLE_LINES",
    "MAX_WIDTH",
    "MIN_POINTS",
    "TOLERANCE",
    "drawn_texts",
    "problems",
]

MAX_TITLE_LINES = 2
#: Two journal columns of 3.4 in and the gap between them.
MAX_WIDTH = 7.0
MIN_POINTS = 5.0
#: Points by which two boxes may touch: glyph boxes carry some padding.
TOLERANCE = 0.5


@contextlib.contextmanager
def _drawn(fig, dpi: float | None = None):
    """Draw ``fig`` at ``dpi`` (default: its own); yield (renderer, the texts drawn, by id), with
    the figure still at that dpi, so that every extent measured inside the block is the drawn
    one.

    A text is recorded when its own ``draw`` runs while visible and not blank: a renderer's
    ``draw_text`` would name only single-line texts (matplotlib passes a multi-line text's lines
    without their artist).
    """
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.text import Text

    seen: dict[int, object] = {}
    kept, draw = fig.dpi, Text.draw
    fig.dpi = dpi or kept
    renderer = RendererAgg(fig.bbox.width, fig.bbox.height, fig.dpi)

    def recorded(text, drawing):
        if drawing is renderer and text.get_visible() and text.get_text().strip():
            seen.setdefault(id(text), text)
        return draw(text, drawing)

    try:
        Text.draw = recorded
        try:
            fig.draw(renderer)
        finally:
            Text.draw = draw
        yield renderer, seen
    finally:
        fig.dpi = kept


def _texts(renderer, seen) -> list:
    return [(t, t.get_window_extent(renderer)) for t in seen.values()]


def drawn_texts(fig, dpi: float | None = None) -> list:
    """(text artist, its window extent in pixels at ``dpi``, default the figure's) for every
    non-empty text the figure draws, in drawing order; hidden texts, texts of hidden axes and
    tick labels outside the view are not drawn."""
    with _drawn(fig, dpi) as (renderer, seen):
        return _texts(renderer, seen)


def _name(text) -> str:
    words = " ".join(text.get_text().split())
    return repr(words if len(words) <= 40 else words[:37] + "...")


def _titles(fig) -> list:
    titles = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        titles += [ax.title, ax._left_title, ax._right_title]
    return [t for t in titles if t.get_visible() and t.get_text().strip()]


def _all_axes(fig) -> list:
    """Every visible axes of the figure (its subfigures' too) and, after each, its insets."""
    out = []

    def add(ax):
        if ax.get_visible():
            out.append(ax)
            for child in ax.child_axes:
                add(child)

    for ax in fig.axes:
        add(ax)
    return out


def _axes_name(ax) -> str:
    """How a report names an axes: a colour bar by its label, a panel by its title, else by its
    y or x label."""
    if getattr(ax, "_colorbar", None) is not None:
        label = ax.yaxis.label if ax.get_ylabel().strip() else ax.xaxis.label
        return f"colour bar {_name(label)}" if label.get_text().strip() else "colour bar"
    for text in (ax.title, ax._left_title, ax._right_title, ax.yaxis.label, ax.xaxis.label):
        if text.get_text().strip():
            return f"axes {_name(text)}"
    return "unlabelled axes"


def _legends(fig) -> list:
    """Every visible legend: the axes' and the figure's (and its subfigures')."""
    found = [ax.get_legend() for ax in _all_axes(fig)]
    figures = [fig]
    while figures:
        f = figures.pop()
        found += f.legends
        figures += list(f.subfigs)
    return [leg for leg in found if leg is not None and leg.get_visible()]


def _segments_enter(points, box, joined: bool) -> bool:
    """Whether any of ``points`` (n x 2, pixels; NaN breaks a line) lies in ``box`` or, where
    ``joined``, any straight segment between consecutive points passes through it (exactly:
    the segment clipped to the box's x and y slabs, as Liang and Barsky clip)."""
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    finite = np.isfinite(points).all(axis=1)
    p = points[finite]
    inside = (p[:, 0] >= box.x0) & (p[:, 0] <= box.x1) & (p[:, 1] >= box.y0) & (p[:, 1] <= box.y1)
    if inside.any():
        return True
    if not joined or len(points) < 2:
        return False
    keep = finite[:-1] & finite[1:]
    a, b = points[:-1][keep], points[1:][keep]
    lo, hi = np.zeros(len(a)), np.ones(len(a))
    for k, (low, high) in enumerate(((box.x0, box.x1), (box.y0, box.y1))):
        d = b[:, k] - a[:, k]
        flat = d == 0
        with np.errstate(divide="ignore", invalid="ignore"):
            t0 = (low - a[:, k]) / d
            t1 = (high - a[:, k]) / d
        enter, leave = np.minimum(t0, t1), np.maximum(t0, t1)
        outside = flat & ((a[:, k] < low) | (a[:, k] > high))
        lo = np.where(flat, lo, np.maximum(lo, enter))
        hi = np.where(flat, hi, np.minimum(hi, leave))
        hi = np.where(outside, -1.0, hi)
    return bool((lo <= hi).any())


def _area_enters(path, box) -> bool:
    """Whether the filled ``path`` (pixels) meets ``box``: an edge crosses it, or the box lies
    inside the area."""
    for polygon in path.to_polygons(closed_only=False):
        if _segments_enter(np.vstack([polygon, polygon[:1]]), box, joined=True):
            return True
    return path.contains_point(((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2))


def _artist_name(artist, ax) -> str:
    label = str(artist.get_label() or "")
    if label and not label.startswith("_"):
        return repr(label if len(label) <= 40 else label[:37] + "...")
    return f"data of {_axes_name(ax)}"


def _data_in(ax, box) -> list[str]:
    """Names of the data of ``ax`` drawn inside ``box`` (pixels), each once."""
    from matplotlib.cbook import STEP_LOOKUP_MAP
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import Bbox

    hits = []
    for artist in [*ax.lines, *ax.collections, *ax.patches]:
        if not artist.get_visible():
            continue
        region = box
        clip = artist.get_clip_box() if artist.get_clip_on() else None
        if clip is not None:
            region = Bbox.intersection(box, clip)
            if region is None:
                continue
        if isinstance(artist, Line2D):  # curves, markers, error bar caps, reference lines
            x, y = artist.get_xydata().T
            x, y = STEP_LOOKUP_MAP[artist.get_drawstyle()](x, y)
            points = artist.get_transform().transform(np.column_stack([x, y]))
            joined = artist.get_linestyle() not in ("None", "", " ", "none")
            marked = artist.get_marker() not in (None, "None", "", " ", "none")
            hit = (joined or marked) and _segments_enter(points, region, joined)
        elif isinstance(artist, PathCollection):  # scatter: its points are its offsets
            offsets = artist.get_offsets()
            hit = len(offsets) > 0 and _segments_enter(
                artist.get_offset_transform().transform(offsets), region, joined=False
            )
        elif isinstance(artist, LineCollection):  # error bars, vlines, hlines
            transform = artist.get_transform()
            hit = any(
                _segments_enter(transform.transform(p.vertices), region, joined=True)
                for p in artist.get_paths()
            )
        elif isinstance(artist, PolyCollection | Patch):  # bands, bars
            paths = (
                artist.get_paths() if isinstance(artist, PolyCollection) else [artist.get_path()]
            )
            to_pixels = artist.get_transform().transform_path
            hit = any(_area_enters(to_pixels(p), region) for p in paths)
        else:
            hit = False
        if hit:
            hits.append(_artist_name(artist, ax))
    return list(dict.fromkeys(hits))


def _shrunk(box, by: float):
    from matplotlib.transforms import Bbox

    return Bbox.from_extents(box.x0 + by, box.y0 + by, box.x1 - by, box.y1 - by)


def _covered(fig, renderer, tolerance: float) -> list[tuple]:
    found = []
    axes = _all_axes(fig)
    for legend in _legends(fig):
        box = _shrunk(legend.get_window_extent(renderer), tolerance)
        if box.width <= 0 or box.height <= 0:
            continue
        for ax in axes:
            if ax.bbox.overlaps(box):
                names = _data_in(ax, box)
                if names:
                    found.append((legend, ax, names))
    return found


def _legend_name(legend) -> str:
    texts = [legend.get_title(), *legend.get_texts()]
    named = next((t for t in texts if t.get_text().strip()), None)
    return f"legend {_name(named)}" if named is not None else "legend"


def _by_design(a, b) -> bool:
    """Whether ``a`` and ``b`` overlap by design: twins, or one an inset of the other (or of one
    of its twins)."""
    group = a._twinned_axes
    if group.joined(a, b):
        return True
    return any(b in t.child_axes for t in group.get_siblings(a)) or any(
        a in t.child_axes for t in group.get_siblings(b)
    )


def _overlapping_axes(fig, tolerance: float) -> list[str]:
    found = []
    axes = _all_axes(fig)
    for i, a in enumerate(axes):
        for b in axes[i + 1 :]:
            if _by_design(a, b):
                continue
            wide = min(a.bbox.x1, b.bbox.x1) - max(a.bbox.x0, b.bbox.x0)
            high = min(a.bbox.y1, b.bbox.y1) - max(a.bbox.y0, b.bbox.y0)
            if wide > tolerance and high > tolerance:
                found.append(f"overlapping axes: {_axes_name(a)} and {_axes_name(b)}")
    return found


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
    with _drawn(fig, dpi) as (renderer, seen):
        texts = _texts(renderer, seen)
        covering = _covered(fig, renderer, tolerance)
        axes_over_axes = _overlapping_axes(fig, tolerance)
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
    for legend, ax, names in covering:
        found.append(
            f"legend over data: {_legend_name(legend)} covers {', '.join(names)} "
            f"in {_axes_name(ax)}"
        )
    return found + axes_over_axes
