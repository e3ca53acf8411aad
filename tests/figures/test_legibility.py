"""The check every figure a test draws goes through (tests/conftest.py): it finds overlapping
text, text cut off at the edge, long titles and figures too wide to print, and passes a clean
figure."""

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
