"""Every figure drawn with the names a real run prints: the longest model and dataset names of
the shipped configs and the faces substitute as its data code describes it. The legibility check
(tests/conftest.py) runs on each figure drawn here; the tests add what a reader of the real
figure needs from those names."""

import long_names
import pandas as pd
import pytest
import tiny_harvest
from long_names import DEFAULT_FIG3, FACES, renamed_dataset, renamed_model, renamed_solutions

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
        fig7.make(
            solutions, renamed_dataset(run["data"], tmp_path, names[1]), None, 100, "isomap", 5, 0
        ),
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


def test_figs_8_and_9_with_the_configs_longest_method_label(run, tmp_path):
    """Fig. 9 writes each method beside its row: "tap_nh500_noiseaug" is longer than the row is
    high, and written up the row it ran past the figure's edge."""
    from tapmachine.figures import fig8, fig9
    from tapmachine.pipeline.stages import denoise as stage

    model = renamed_model(run["model"], tmp_path, *long_names.BINARY)
    s = stage.bsc_settings('{"ps": [0.0, 0.1, 0.3, 0.5], "n_images": 20, "fig9_image": 3}')
    stage.run_bsc(model, run["data"], s, tmp_path / "b.csv", tmp_path / "b.npz")
    stage.run_baselines(run["data"], s, tmp_path / "o.csv", tmp_path / "o.npz")
    label = "tap_nh500_noiseaug"
    eight = fig8.make([tmp_path / "b.npz"], tmp_path / "o.npz", [model], [label])
    assert label in set(eight.table["method"].dropna())
    nine = fig9.make([tmp_path / "b.npz"], tmp_path / "o.npz", [model], [0.1, 0.5], [label])
    assert label in {ax.get_ylabel() for ax in nine.figure.axes}


def test_figs_10_to_12_and_the_likelihood_table_with_real_names(run, tmp_path):
    import torch

    from tapmachine.core.machine import BoltzmannMachine
    from tapmachine.core.priors import Bernoulli
    from tapmachine.figures import fig10, fig11, fig12, likelihood_table
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.tap_paper import likelihood

    name, dataset, _ = long_names.LIKE_FOR_LIKE
    model = renamed_model(run["model"], tmp_path, name, dataset, FACES[2])
    e = pd.Series(range(1, 5))
    base = -150 + 8 * e.map(float).map(__import__("math").log)
    scores = {"model": name, "epoch": e, "log_z_ais": -base, "log_z_ais_stderr": 0.1}
    scores.update(log_z_tap=-base, ais_n_betas=1451, ais_description="S&M, 1451 betas", pl_sites=9)
    for split in ("test", "train"):
        scores.update(
            {
                f"tap_ll_{split}": base + 5,
                f"tap_ll_per_unit_{split}": (base + 5) / 44,
                f"ais_ll_{split}": base,
                f"ais_ll_{split}_lower": base - 0.3,
                f"ais_ll_{split}_upper": base + 0.3,
                f"pl_{split}": base + 10,
                f"n_{split}_images": 20,
            }
        )
    pd.DataFrame(scores).to_csv(tmp_path / "scores.csv", index=False)
    twelve = fig12.make(tmp_path / "scores.csv", model)
    assert f"{name} on {dataset} (substitute)" in twelve.figure.get_suptitle()

    settings = likelihood.ScoreSettings(
        ais_runs=20, n_betas=100, pl_sites=4, n_train=0, n_test=None, tap_inits=20
    )
    likelihood.score_model(model, run["data"], tmp_path / "final.csv", settings, seed=3)
    cd = pd.read_csv(tmp_path / "final.csv").assign(method="cd", sampling_steps=25)
    cd.to_csv(tmp_path / "cd.csv", index=False)
    table = likelihood_table.make([tmp_path / "final.csv", tmp_path / "cd.csv"], [model, model])
    assert {"TAP", "CD-25"} <= set(table.table["method_label"].dropna())

    fig10_models, curves = [], []
    for inference, its in (("tap", 3), ("adatap", 3), ("adatap", 100)):
        fig10_models.append(
            renamed_model(run["model"], tmp_path, f"bmnist_fig10_{inference}{its}", "binary_mnist")
        )
        curves.append(tmp_path / f"{inference}{its}.csv")
        pd.DataFrame({"epoch": [1, 2, 3], "pl": [-12.0, -11.0, -10.0], "pl_stderr": 0.1}).assign(
            inference=inference, train_iterations=its
        ).to_csv(curves[-1], index=False)
    timing = tmp_path / "timing.csv"
    pd.DataFrame(
        {"batch_size": [1, 100], "tap_seconds": [1e-4, 1e-3], "adatap_seconds": [1e-2, 2.0]}
    ).assign(ratio=lambda d: d.adatap_seconds / d.tap_seconds, n_visible=36, n_hidden=8).assign(
        threads=1, dtype="float32"
    ).to_csv(timing, index=False)
    fig10.make(curves, fig10_models, timing)

    deep, deep_curves = [], []
    for deep_name, sizes in (("bmnist_dbm2", (36, 8, 4)), ("bmnist_dbm3", (36, 8, 4, 2))):
        machine = BoltzmannMachine(
            tuple(Bernoulli(torch.zeros(n)) for n in sizes),
            tuple(torch.zeros(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)),
        )
        path = tmp_path / deep_name / "model.pt"
        path.parent.mkdir()
        ModelFile.from_machine(machine, deep_name, dataset="binary_mnist").save(path)
        deep.append(path)
        deep_curves.append(tmp_path / f"{deep_name}.csv")
        pd.DataFrame({"epoch": [1, 2, 3], "tap_ll_train": [-0.3, -0.29, -0.28]}).assign(
            tap_ll_test=lambda d: d.tap_ll_train - 0.01,
            tap_ll_train_stderr=0.01,
            tap_ll_test_stderr=0.01,
        ).to_csv(deep_curves[-1], index=False)
    fig11.make(deep_curves, deep)
