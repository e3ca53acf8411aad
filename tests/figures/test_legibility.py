"""The check every figure a test draws goes through (tests/conftest.py): it finds overlapping
text, text cut off at the edge, long titles and figures too wide to print, and passes a clean
figure."""

import numpy as np

from tapmachine.figures import common, legibility


def _figure(width=common.COLUMN, height=2.4):
    with common.style():
        fig = common.new_figure(width, height)
        ax = fig.subplots()
        ax.plot([0, 1], [0, 1], label="a line")
        ax.set_xlabel("epoch")
        ax.set_ylabel("log-likelihood")
    return fig, ax


def test_a_clean_figure_has_no_problems():
    fig, ax = _figure()
    fig.suptitle("Fig. 0: a short title\nand its second line")
    ax.legend()
    assert legibility.problems(fig) == []
    drawn = {t.get_text() for t, _ in legibility.drawn_texts(fig)}
    assert {"epoch", "log-likelihood", "a line"} <= drawn


def test_overlapping_text_is_found():
    fig, ax = _figure()
    ax.text(0.5, 0.5, "first note", transform=ax.transAxes)
    ax.text(0.52, 0.5, "second note", transform=ax.transAxes)
    found = legibility.problems(fig)
    assert found == ["overlapping text: 'first note' and 'second note'"]


def test_a_text_of_two_lines_is_measured_too():
    """matplotlib draws a multi-line text line by line without naming its artist; the check
    still finds it under another text."""
    fig, ax = _figure()
    ax.text(0.5, 0.5, "first line\nsecond line", transform=ax.transAxes, va="center")
    ax.text(0.52, 0.5, "a note", transform=ax.transAxes, va="center")
    found = legibility.problems(fig)
    assert found == ["overlapping text: 'first line second line' and 'a note'"]


def test_a_title_past_two_lines_and_text_past_the_edge_are_found():
    fig, ax = _figure()
    ax.set_title("one\ntwo\nthree")
    ax.text(1.3, 0.5, "outside", transform=ax.transAxes)
    found = legibility.problems(fig)
    assert "title of 3 lines: 'one two three'" in found
    assert "text past the figure's edge: 'outside'" in found


def test_a_wrapped_suptitle_counts_its_wrapped_lines():
    fig, _ = _figure()
    fig.suptitle("a title that says far more than one column of a journal can hold " * 2)
    assert any(p.startswith("title of ") for p in legibility.problems(fig))


def test_too_wide_or_too_small_is_found():
    fig, ax = _figure(width=legibility.MAX_WIDTH + 1)
    ax.set_title("tiny", fontsize=4)
    found = legibility.problems(fig)
    assert f"figure {legibility.MAX_WIDTH + 1:.2f} in wide, more than two columns (7.0 in)" in found
    assert "4 pt text: 'tiny'" in found


def test_hidden_text_is_not_drawn():
    fig, ax = _figure()
    ax.text(0.5, 0.5, "hidden", transform=ax.transAxes, visible=False)
    ax.text(0.52, 0.5, "shown", transform=ax.transAxes)
    assert legibility.problems(fig) == []


def _covers(fig) -> list[str]:
    return [p for p in legibility.problems(fig) if p.startswith("legend over data")]


def test_a_legend_on_a_line_between_its_vertices_is_found():
    fig, ax = _figure()  # the line's two vertices are the axes' corners, far from the legend
    ax.legend(loc="center")
    assert _covers(fig) == [
        "legend over data: legend 'a line' covers 'a line' in axes 'log-likelihood'"
    ]


def test_a_legend_below_the_axes_or_in_a_free_corner_covers_nothing():
    fig, ax = _figure()
    fig.legend(loc="outside lower center")
    assert legibility.problems(fig) == []
    fig, ax = _figure()
    ax.legend(loc="upper left")  # the diagonal runs from lower left to upper right
    assert legibility.problems(fig) == []


def test_scatter_points_error_bars_and_bands_under_a_legend_are_found():
    with common.style():
        fig = common.new_figure(common.COLUMN, 2.4)
        points, bars, band, clear = fig.subplots(1, 4)
        points.scatter([0, 0.5, 1], [0, 0.5, 1], label="points")
        points.plot([0, 1], [0.5, 0.5], "o", label="marks")  # markers only, either side of it
        bars.errorbar([0.5], [0.0], yerr=[[0.0], [1.0]], fmt="none", label="bar")
        bars.plot([0, 1], [0, 0], label="floor")
        band.fill_between([0, 1], [0.3, 0.3], [0.7, 0.7], label="band")
        band.plot([0, 1], [0, 0], [0, 1], [1, 1])
        clear.fill_between([0, 1], [0, 0], [0.2, 0.2], label="low band")
        clear.plot([0, 1], [1, 1], label="top")
        for ax, title in zip((points, bars, band, clear), "abcd", strict=True):
            ax.set_title(title)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.legend(loc="center", handlelength=0.5)
    found = _covers(fig)
    assert found == [
        "legend over data: legend 'points' covers 'points' in axes 'a'",
        "legend over data: legend 'floor' covers data of axes 'b' in axes 'b'",
        "legend over data: legend 'band' covers 'band' in axes 'c'",
    ]


def test_a_segment_meets_a_box_exactly_when_it_passes_through_it():
    from matplotlib.transforms import Bbox

    box = Bbox.from_extents(0, 0, 1, 1)
    meets = legibility._segments_enter
    assert meets([[-1, 0.5], [2, 0.5]], box, joined=True)  # straight through, no vertex inside
    assert meets([[-1, 1.5], [1.5, -1]], box, joined=True)  # across a corner
    assert not meets([[-1, 1.5], [2, 1.5]], box, joined=True)  # above it
    assert not meets([[-1, 0.6], [0.6, 2.0]], box, joined=True)  # past its upper left corner
    assert not meets([[-1, 0.5], [2, 0.5]], box, joined=False)  # markers only, both outside
    assert not meets([[-1, 0.5], [np.nan, np.nan], [2, 0.5]], box, joined=True)  # a gap
    assert meets([[0.5, 0.5]], box, joined=False)
    assert not meets([[0.5, 2], [0.5, 3]], box, joined=True)  # vertical, above
    assert meets([[0.5, -2], [0.5, 3]], box, joined=True)  # vertical, through


def test_axes_over_axes_are_found():
    fig, ax = _figure()
    fig.set_layout_engine("none")
    cax = fig.add_axes((0.8, 0.3, 0.05, 0.4))  # a colour bar placed by hand on the panel
    fig.colorbar(
        ax.imshow([[0, 1], [1, 0]], extent=(0, 1, 0, 1), aspect="auto"), cax=cax, label="w"
    )
    other = fig.add_axes((0.05, 0.05, 0.3, 0.3))
    other.set_title("other")
    found = [p for p in legibility.problems(fig) if p.startswith("overlapping axes")]
    assert found == [
        "overlapping axes: axes 'log-likelihood' and colour bar 'w'",
        "overlapping axes: axes 'log-likelihood' and axes 'other'",
    ]


def test_twins_insets_and_colour_bars_beside_the_axes_are_not_overlaps():
    fig, ax = _figure()
    ax.twinx().set_ylabel("count")
    ax.twiny()
    ax.inset_axes((0.6, 0.1, 0.3, 0.3)).set_title("inset", fontsize=5)
    fig.colorbar(ax.imshow([[0, 1], [1, 0]], extent=(0, 1, 0, 1), aspect="auto"), ax=ax, label="w")
    assert [p for p in legibility.problems(fig) if "axes" in p] == []
