"""Every figure drawn with the names a real run prints: the longest model and dataset names of
the shipped configs and the faces substitute as its data code describes it. The legibility check
(tests/conftest.py) runs on each figure drawn here; the tests add what a reader of the real
figure needs from those names."""

import long_names
import pandas as pd
import pytest
import tiny_harvest
from long_names import DEFAULT_FIG3, FACES, renamed_model, renamed_solutions

from tapmachine.figures import common, fig3, fig4, fig5, fig6, fig7


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_harvest.build(tmp_path_factory.mktemp("long"), epochs=(1, 4, tiny_harvest.EPOCHS))


@pytest.fixture(scope="module")
def models(run, tmp_path_factory):
    """The tiny model under the names of the default run's Fig. 3 (three datasets)."""
    folder = tmp_path_factory.mktemp("renamed")
    return [renamed_model(run["model"], folder, *names) for names in DEFAULT_FIG3]


def test_fig3_panels_of_three_datasets_name_the_substitute_in_short(run, models):
    result = fig3.make([run["metrics"]] * len(models), models)
    titles = [ax.get_title() for ax in result.figure.axes if ax.get_title()]
    assert titles == ["binary_mnist", "real_mnist", "real_faces (substitute)"]
    drawn = result.table[result.table["kind"] == "drawn"]
    faces = drawn[drawn["model"] == FACES[0]]
    assert set(faces["substitute"]) == {FACES[2]}, "the CSV carries the full description"
    assert set(drawn[drawn["model"] != FACES[0]]["substitute"].fillna("")) == {""}


def test_fig4_names_the_substitute_in_short(run, models):
    result = fig4.make(models, [run["data"]] * len(models), n_images=100, per_group=4)
    title = result.figure.get_suptitle()
    assert "real_faces (substitute)" in title and FACES[2] not in title
    row = result.table[result.table["claim"] == "substitute_data"]
    assert list(row["model"]) == [FACES[0]] and FACES[2] in row["detail"].iloc[0]


@pytest.mark.parametrize("names", [long_names.BINARY, FACES], ids=["binary", "faces"])
def test_figs_5_to_7_with_real_names(run, tmp_path, names):
    solutions = renamed_solutions(run["solutions"], tmp_path, *names)
    results = [
        fig5.make(solutions),
        fig6.make(solutions, "isomap", 5, 0),
        fig7.make(solutions, run["data"], None, 100, "isomap", 5, 0),
    ]
    for result in results:
        assert names[0] in result.figure.get_suptitle()
        drawn = result.table[result.table["kind"] == "drawn"]
        assert set(drawn.get("substitute", pd.Series([""]))) == {names[2]}


def test_dataset_label_is_short_and_describe_names_the_model():
    assert common.dataset_label("real_faces", FACES[2]) == "real_faces (substitute)"
    assert common.dataset_label("binary_mnist", "") == "binary_mnist"
    info = common.ModelInfo(name=FACES[0], dataset=FACES[1], substitute=FACES[2])
    assert common.describe(info) == "faces_h256 on real_faces (substitute)"
    (row,) = common.substitute_claims([info, common.ModelInfo("bmnist_h25", "binary_mnist")])
    assert row["claim"] == "substitute_data" and row["model"] == FACES[0]
    assert pd.isna(row["value"]) and FACES[2] in row["detail"]


def _line_colours(fig) -> dict[str, str]:
    """Label -> colour of every labelled curve of the figure's panels."""
    from matplotlib.colors import to_hex

    return {
        line.get_label(): to_hex(line.get_color())
        for ax in fig.axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_every_model_has_its_own_colour_and_keeps_it_in_fig4(run, models):
    """The default run's Fig. 3 draws each dataset in its own panel: every model still has a
    colour no other model has, and Fig. 4, given the same palette and fewer models, colours each
    model's row labels as Fig. 3 colours its curve."""
    names = [n for n, _, _ in DEFAULT_FIG3]
    three = fig3.make([run["metrics"]] * len(models), models, palette=names)
    colours = _line_colours(three.figure)
    assert set(colours) == set(names)
    assert len(set(colours.values())) == len(names)
    assert colours == common.model_colours(names)
    subset = [models[0], models[2], models[3]]  # Fig. 4 of the default run leaves a model out
    four = fig4.make(subset, [run["data"]] * 3, n_images=100, per_group=4, palette=names)
    from matplotlib.colors import to_hex

    labels = {
        ax.get_ylabel().split("\n")[0]: to_hex(ax.yaxis.label.get_color())
        for ax in four.figure.axes
        if ax.get_ylabel().split("\n")[0] in names  # not the colour bar's
    }
    assert labels == {n: colours[n] for n in (names[0], names[2], names[3])}
    alone = _line_colours(fig3.make([run["metrics"]] * 2, models[2:]).figure)
    assert len(set(alone.values())) == 2, "without a palette, the models drawn are the palette"


def test_model_colours_come_from_the_style_in_order():
    import matplotlib

    with common.style():
        cycle = [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]]
    assert len(cycle) == len(set(cycle)) == 10
    got = common.model_colours(["b", "a", "b", "c"])
    assert got == {"b": cycle[0], "a": cycle[1], "c": cycle[2]}
    many = common.model_colours([f"m{i}" for i in range(12)])
    assert many["m10"] == cycle[0]
