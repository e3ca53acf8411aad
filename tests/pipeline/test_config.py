"""The config schema and the checks that go with it, on good and bad configs; the overlays."""

import copy
import math
import re
from pathlib import Path

import pytest
import yaml
from full_configs import whole_config

from tapmachine.io.schema import SCHEMA_FILE as SCHEMA
from tapmachine.pipeline.configuration import (
    ConfigError,
    load_config,
    load_schema,
    merge,
    remove_nulled,
    schema_default,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ["workflow/config/paper.yaml", "workflow/config/ucd_cpu.yaml"]


def load(*names):
    """A shipped config as a run sees it: config.yaml, overlaid by ``names`` in their order
    (none if the name is config.yaml itself)."""
    overlays = [ROOT / name for name in names if name != "config.yaml"]
    return load_config(overlays, default=ROOT / "config.yaml", schema=SCHEMA)


@pytest.fixture(scope="module")
def default():
    return load("config.yaml")


@pytest.mark.parametrize("name", ["config.yaml", OVERLAYS[0]])
def test_shipped_configs_validate(name):
    config = validate(load(name), SCHEMA)
    assert config["models"], "a shipped config must declare models"
    # The default departs from the paper's 1e-8 (README, "Departures from the papers").
    paper = "paper" in name
    # Fig. 10 (App. D) compares fixed TAP / adaTAP iteration counts: its models keep them.
    fixed = set(config.get("deep", {}).get("fig10", {}).get("models", []))
    for label, model in config["models"].items():
        assert model["tap"]["tol"] == pytest.approx(1e-8 if paper else 1e-12)
        if paper and model["method"] == "tap" and label not in fixed:
            assert model["tap"]["train_iterations"] == "converge"


def test_defaults_are_filled(default):
    config = validate(copy.deepcopy(default), SCHEMA)
    model = config["models"]["bmnist_h25"]
    assert model["method"] == "tap"
    assert model["tap"] == {
        "damping": 0.5,
        "train_iterations": 3,
        "train_tol": 1e-8,
        "train_max_iter": 100,
        "train_unique": True,
        "tol": 1e-12,
        "max_iter": 500,
        "retry_damping": 0.95,
        "dedup_tol": 0.01,
        "solver": "newton_sor",  # the config's one key; every other is the schema's default
        "fuse": False,
        "cuda_graphs": True,
        "cuda_graph_sweeps": 10,
    }
    assert config["tracking"]["store"] == "results/mlflow"
    assert config["data"]["faces"]["cbcl_archive"] is None


#: The smallest model entry the schema accepts.
MINIMAL_MODEL = {
    "dataset": "mnist",
    "visible": {"prior": "bernoulli"},
    "hidden": [{"prior": "bernoulli", "units": 3}],
}


def test_minimal_config_gets_every_default():
    config = validate(
        {"models": {"m": copy.deepcopy(MINIMAL_MODEL)}},
        SCHEMA,
    )
    assert config["seed"] == 2026 and config["dtype"] == "float32"
    assert config["run"] == {"name": "default"}
    assert config["models"]["m"]["epochs"] == 100


def mutate(config, path, value):
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return config


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["models", "bmnist_h25", "epochs"],
            "ten",
            "models.bmnist_h25.epochs: 'ten' is not of type 'integer'",
        ),
        (
            ["models", "bmnist_h25", "hidden", 0, "units"],
            -5,
            "models.bmnist_h25.hidden[0].units: -5 is less than the minimum of 1",
        ),
        (
            ["models", "bmnist_h25", "batch_size"],
            0,
            "models.bmnist_h25.batch_size: 0 is less than the minimum of 1",
        ),
        (
            ["models", "bmnist_h25", "learning_rte"],
            0.1,
            "models.bmnist_h25: Additional properties are not allowed ('learning_rte'",
        ),
        (["seeds"], 1, "(top level): Additional properties are not allowed ('seeds'"),
        (
            ["models", "rmnist_h100", "visible", "prior"],
            "gaussian",
            "models.rmnist_h100.visible.prior: 'gaussian' is not one of",
        ),
        (["dtype"], "float16", "dtype: 'float16' is not one of"),
        (["run", "name"], "../elsewhere", "run.name: '../elsewhere' does not match"),
        (["run", "name"], "data", "run.name: 'data' should not be valid under"),
        (
            ["models", "bmnist_h25", "tap"],
            {"train_iterations": "forever"},
            "models.bmnist_h25.tap.train_iterations: 'forever'",
        ),
        (
            ["models", "rmnist_h100", "rho_step"],
            "fisher",
            "models.rmnist_h100.rho_step: 'fisher' is not one of",
        ),
        (
            ["models", "bmnist_h25", "dataset"],
            "cifar10",
            "models.bmnist_h25.dataset: 'cifar10' is not a dataset",
        ),
        (
            ["models", "bmnist_h25", "train_dataset"],
            "cifar10",
            "models.bmnist_h25.train_dataset: 'cifar10' is not a dataset",
        ),
        (
            ["models", "rmnist_h100", "resample"],
            "bernoulli",
            "models.rmnist_h100.resample: bernoulli draws binary rows, for bernoulli visible",
        ),
        (
            ["models", "bmnist_h25", "momentum"],
            {"initial": 0.5, "final": 0.9},
            "models.bmnist_h25.momentum: 'switch_epoch' is a required property",
        ),
        (
            ["data", "faces", "cbcl_archive"],
            "/no/such/faces.tar.gz",
            "data.faces.cbcl_archive: '/no/such/faces.tar.gz' does not exist",
        ),
        (
            ["data", "mnist", "path"],
            "/no/such/dir",
            "data.mnist.path: '/no/such/dir' does not exist",
        ),
        (
            ["models", "rmnist_h100", "learning_rate"],
            {"start": 1e-5, "end": 1e-2},
            "models.rmnist_h100.learning_rate: end 0.01 exceeds start",
        ),
        (
            ["models", "bmnist_h25", "sampling_steps"],
            {"start": 5, "end": 2, "every": 10},
            "models.bmnist_h25.sampling_steps: end 2 is below start 5",
        ),
        (
            ["models", "bmnist_h25", "learning_rate"],
            {"over_sampling_steps": 0.05, "end": 0.01},
            "models.bmnist_h25.learning_rate: ",
        ),
        (
            ["ucd", "dbm", "models", "ucd_lmi", "method"],
            "ucd",
            "ucd.dbm.models.ucd_lmi.method: 'ucd' is not one of",
        ),
        (
            ["ucd", "dbm", "ablation", "no_centering", "ucd", "centering"],
            "no",
            "ucd.dbm.ablation.no_centering.ucd.centering: 'no' is not of type 'boolean'",
        ),
        (
            ["models", "rmnist_h100", "tap", "relaxation"],
            2.0,
            "models.rmnist_h100.tap.relaxation: 2.0 is greater than or equal to the maximum",
        ),
        (
            ["ucd", "dbm", "fid_samples"],
            1,
            "ucd.dbm.fid_samples: 1 is less than the minimum of 2",
        ),
        (
            ["ucd", "dbm", "ais", "n_runs"],
            1,
            "ucd.dbm.ais.n_runs: 1 is less than the minimum of 2",
        ),
    ],
)
def test_bad_configs_name_key_and_value(default, path, value, expected):
    config = mutate(copy.deepcopy(default), path, value)
    with pytest.raises(ConfigError) as info:
        validate(config, SCHEMA)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_alg1_overlay_restores_the_papers_iteration_and_nothing_else():
    """paper.yaml trains converged TAP with newton_sor (a departure); paper_alg1.yaml after it
    gives every such model Alg. 1 (``damped``) back and changes no other setting."""
    paper = validate(load("workflow/config/paper.yaml"), SCHEMA)
    alg1 = validate(load("workflow/config/paper.yaml", "workflow/config/paper_alg1.yaml"), SCHEMA)
    converged = {
        label
        for label, model in paper["models"].items()
        if model["tap"]["train_iterations"] == "converge"
    }
    assert {
        label for label in converged if paper["models"][label]["tap"]["solver"] == "damped"
    } == set()
    assert {
        label for label in converged if alg1["models"][label]["tap"]["solver"] == "damped"
    } == converged
    for label in converged:
        alg1["models"][label]["tap"]["solver"] = "newton_sor"
    assert alg1 == paper


def test_plain_rho_overlay_restores_the_papers_step_on_every_gauss_bernoulli_model():
    """paper.yaml steps rho of every truncated Gauss-Bernoulli layer on its logit (a departure);
    paper_rho_plain.yaml after it gives each such model Alg. 2's plain step back and changes no
    other setting."""
    paper = validate(load("workflow/config/paper.yaml"), SCHEMA)
    plain = validate(
        load("workflow/config/paper.yaml", "workflow/config/paper_rho_plain.yaml"), SCHEMA
    )
    with_rho = {
        label
        for label, model in paper["models"].items()
        if model["visible"]["prior"] == "truncated_gauss_bernoulli"
        or any(layer["prior"] == "truncated_gauss_bernoulli" for layer in model["hidden"])
    }
    assert with_rho == {"rmnist_h100", "rmnist_h500"}
    assert {paper["models"][label]["rho_step"] for label in with_rho} == {"logit"}
    assert {plain["models"][label]["rho_step"] for label in with_rho} == {"plain"}
    for label in with_rho:
        plain["models"][label]["rho_step"] = "logit"
    assert plain == paper


def test_paper_config_has_its_own_results_directory():
    paper = validate(load("workflow/config/paper.yaml"), SCHEMA)
    default = validate(load("config.yaml"), SCHEMA)
    assert (paper["run"]["name"], default["run"]["name"]) == ("paper", "default")


def test_stochastic_binarisation_needs_its_seed(default):
    """A derived dataset binarised at random names its seed; without one the config fails."""
    config = copy.deepcopy(default)
    derived = config["data"]["derived"]
    derived["sbm"] = {"source": "mnist", "transforms": [{"name": "bernoulli", "seed": 2008}]}
    validate(copy.deepcopy(config), SCHEMA)
    derived["sbm"]["transforms"] = [{"name": "bernoulli"}]
    with pytest.raises(ConfigError, match=r"sbm\.transforms\[0\]"):
        validate(config, SCHEMA)


def test_own_data_files_are_datasets_a_model_can_name(default, tmp_path):
    """A file of data.files is a dataset of the data stage, with a default test split; a
    missing file, a name of another dataset, a test given both ways or a format it does not
    read fail the config."""
    (tmp_path / "mine.csv").write_text("a,b\n0,1\n")
    config = copy.deepcopy(default)
    config["data"]["files"] = {"mine": {"path": str(tmp_path / "mine.csv")}}
    config["models"]["mine_h8"] = {
        "dataset": "mine",
        "visible": {"prior": "spin"},
        "hidden": [{"prior": "bernoulli", "units": 8}],
    }
    entry = validate(copy.deepcopy(config), SCHEMA)["data"]["files"]["mine"]
    assert entry["test"] == {"fraction": 0.1, "seed": 0}
    assert (entry["array"], entry["labels"], entry["image_shape"]) == (None, None, None)
    bad = [
        ({"path": str(tmp_path / "gone.csv")}, "data.files.mine.path: '", "is not a file"),
        ({"path": str(tmp_path / "mine.txt")}, "data.files.mine.path: '", "does not match"),
        (
            {"path": str(tmp_path / "mine.csv"), "test": {"path": "t.csv", "fraction": 0.2}},
            "data.files.mine.test: ",
            "",
        ),
    ]
    for files_entry, where, what in bad:
        config["data"]["files"]["mine"] = files_entry
        with pytest.raises(ConfigError) as info:
            validate(copy.deepcopy(config), SCHEMA)
        assert f"config error at {where}" in str(info.value) and what in str(info.value)
    config["data"]["files"] = {"binary_mnist": {"path": str(tmp_path / "mine.csv")}}
    with pytest.raises(ConfigError, match=r"data.derived: \['binary_mnist'\] reuse the names"):
        validate(config, SCHEMA)


def test_ucd_cpu_config_is_the_hidden_equals_visible_demonstration():
    config = validate(load("workflow/config/ucd_cpu.yaml"), SCHEMA)
    dbm = config["ucd"]["dbm"]
    assert config["run"]["name"] == "ucd_cpu"
    assert set(dbm["datasets"]) == {"binary_mnist", "binary_fashion_mnist"}
    entries = {**dbm["models"], **dbm["ablation"]}
    assert {m["method"] for m in entries.values()} == {"ucd_lmi", "dbm_pcd", "centered_pcd"}
    assert all(m["hidden"] == [784, 784] for m in entries.values())
    assert len(dbm["ablation"]) == 4


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlays_give_the_whole_configs_they_replaced(name):
    """config.yaml overlaid by paper.yaml (ucd_cpu.yaml) is, defaults filled, the whole file that
    replaced config.yaml before the overlays (with the settings added since,
    ``full_configs.ADDED_SINCE``); and the overlay repeats no value config.yaml sets (it may
    restate a schema default: the paper's value of a departure)."""
    assert validate(load(name), SCHEMA) == validate(whole_config(name), SCHEMA)

    def repeated(overlay, base, path=""):
        for key, value in overlay.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                yield from repeated(value, base[key], f"{path}.{key}")
            elif key in base and base[key] == value:
                yield f"{path}.{key}"

    overlay = yaml.safe_load((ROOT / name).read_text())
    assert list(repeated(overlay, load("config.yaml"))) == []


def test_merge_updates_mappings_and_replaces_lists_as_snakemake():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": [1], "c": {"z": 1}}
    merged = merge(base, {"a": {"y": [3]}, "b": [2, 3], "c": None})
    assert merged == {"a": {"x": 1, "y": [3]}, "b": [2, 3], "c": None}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": [1], "c": {"z": 1}}


def test_null_removes_a_section_or_named_entry_never_a_setting():
    schema = load_schema(SCHEMA)
    config = merge(
        load("config.yaml"),
        {
            "deep": None,
            "ucd": {"fig1": None},
            "models": {"bmnist_h25": None, "bmnist_h50": {"n_train": None}},
            "denoise": {"fig8": {"models": {"tap_nh25": None}}, "real": {"model": None}},
            "data": {"derived": {"real_faces": None}, "faces": {"cbcl_archive": None}},
            "likelihood": {"fig12": {"ais": {"n_betas": None}}},
        },
    )
    remove_nulled(config, schema)
    assert "deep" not in config and "fig1" not in config["ucd"] and "dbm" in config["ucd"]
    assert "bmnist_h25" not in config["models"]
    assert config["models"]["bmnist_h50"]["n_train"] is None  # null = all images
    assert "tap_nh25" not in config["denoise"]["fig8"]["models"]
    assert config["denoise"]["real"]["model"] is None  # null = no fig_denoise_real
    assert "real_faces" not in config["data"]["derived"]
    assert config["data"]["faces"]["cbcl_archive"] is None
    assert config["likelihood"]["fig12"]["ais"]["n_betas"] is None
    # A null where a number belongs is not a removal: validate names it.
    config["models"]["bmnist_h50"]["epochs"] = None
    remove_nulled(config, schema)
    with pytest.raises(ConfigError, match=r"models\.bmnist_h50\.epochs: None is not of type"):
        validate(config, SCHEMA)


def test_every_schema_key_is_described():
    """Every property of the schema (of sections, named entries, list items and alternatives)
    says what it means, itself or in the definition it refers to."""
    schema = load_schema(SCHEMA)

    def resolve(node):
        while "$ref" in node and "description" not in node:
            target = schema
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    def undescribed(node, path):
        node = resolve(node)
        for key, child in node.get("properties", {}).items():
            if "description" not in resolve(child):
                yield f"{path}{key}"
            yield from undescribed(child, f"{path}{key}.")
        for part in ("additionalProperties", "items"):
            if isinstance(node.get(part), dict):
                yield from undescribed(node[part], f"{path}*.")
        for branch in node.get("oneOf", []):
            yield from undescribed(branch, path)

    assert list(undescribed(schema, "")) == []


def test_stage_options_read_their_defaults_from_the_schema():
    """A stage's command-line default is the schema's (the rules pass every value; one place)."""
    import argparse

    from tapmachine.pipeline.stages import denoise, ucd
    from tapmachine.tap_paper.harvest import HarvestSettings

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    ucd.register(sub)
    steps = parser.parse_args(["ucd", "steps", "--method", "mh", "--dims", "2", "--out", "x"])
    fig1 = {key: schema_default("ucd", "fig1", key) for key in ("reps", "cap", "search_cap")}
    assert {key: getattr(steps, key) for key in fig1} == fig1
    assert (steps.seed, steps.device) == (schema_default("seed"), schema_default("device"))
    score = ["ucd", "score", "--model", "m", "--classifier", "c", "--data", "d", "--out", "o"]
    score = parser.parse_args(score)
    assert score.ll_images == schema_default("ucd", "dbm", "ll_images")
    assert score.ais_betas == schema_default("ucd", "dbm", "ais", "n_betas")
    bare = HarvestSettings.from_spec({})  # a harvest job given no --spec
    assert (bare.tol, bare.max_iter) == (1e-12, 2000)
    assert bare.tol == schema_default("harvest", "any_model", "tol")
    assert denoise.REAL_DEFAULTS["max_iter"] == schema_default("denoise", "real", "max_iter")
    assert schema_default("likelihood", "table", "n_train") == 0  # its own, not fig12's 1000
    with pytest.raises(KeyError, match="models.m.dataset has no default"):
        schema_default("models", "m", "dataset")


def test_solver_settings_have_one_schema_definition(default):
    """Every block's TAP solver keys refer to $defs/tap_solver: a default written there (damping)
    fills every block that leaves the key out, a block's own default (denoise's tol) wins, and
    damping's default is written once in the schema."""
    from tapmachine.core import tap

    schema = load_schema(SCHEMA)
    solver = schema["$defs"]["tap_solver"]["properties"]
    assert set(solver) == {f for f in tap.SolverSettings.__dataclass_fields__}
    text = SCHEMA.read_text()
    assert text.count("damping: {type: number") == 1
    config = validate(
        {"models": {"m": copy.deepcopy(MINIMAL_MODEL)}, "harvest": {"m": {"epochs": [1]}}}, SCHEMA
    )
    damping = solver["damping"]["default"]
    assert config["models"]["m"]["tap"]["damping"] == damping
    assert config["harvest"]["m"]["damping"] == damping
    assert config["harvest"]["m"]["max_iter"] == 2000  # the harvest's own cap
    assert config["denoise"]["fig8"]["damping"] == damping
    assert config["denoise"]["fig8"]["tol"] == 1e-8 != solver["tol"]["default"]
    assert config["models"]["m"]["tap"]["tol"] == solver["tol"]["default"]
    # the settings classes build the same SolverSettings from their blocks
    from tapmachine.tap_paper.harvest import HarvestSettings
    from tapmachine.train import TrainSettings

    trained = TrainSettings.from_spec(config["models"]["m"]).solver_settings
    assert trained == tap.SolverSettings.of(config["models"]["m"]["tap"])
    harvested = HarvestSettings.from_spec(config["harvest"]["m"]).solver_settings
    assert harvested == trained.replace(max_iter=2000, fuse=False)


def test_figures_5_to_7_take_a_column_per_model_with_its_own_settings():
    """figures.fig5-7 list their models, one column each; per_model gives a column its own
    epochs, slices, digits or n_images over the figure's; each column is checked against its
    model's harvest, and per_model may name only models of `models`."""
    from tapmachine.pipeline.configuration import solution_columns

    models = {name: {**copy.deepcopy(MINIMAL_MODEL), "epochs": 20} for name in ("a", "b")}
    harvest = {"a": {"epochs": [1, 5, 20], "n_init": 500}, "b": {"epochs": [2, 20], "n_init": None}}

    def config(**fig7):
        spec = {"models": ["a", "b"], "epochs": [1, 20], "digits": [3], "n_images": 400, **fig7}
        return {"models": copy.deepcopy(models), "harvest": harvest, "figures": {"fig7": spec}}

    own = {"b": {"epochs": [2], "digits": None}}
    checked = validate(config(per_model=own), SCHEMA)
    assert solution_columns(checked["figures"]["fig7"]) == {
        "a": {
            "epochs": [1, 20],
            "digits": [3],
            "n_images": 400,
            "embedding": "isomap",
            "n_neighbors": 10,
        },
        "b": {
            "epochs": [2],
            "digits": None,
            "n_images": 400,
            "embedding": "isomap",
            "n_neighbors": 10,
        },
    }
    with pytest.raises(ConfigError, match=r"figures.fig7 \(b\): epochs \[1\] are not harvested"):
        validate(config(), SCHEMA)
    with pytest.raises(ConfigError, match=r"per_model: \['c'\] are not models of `models`"):
        validate(config(per_model={**own, "c": {"epochs": [1]}}), SCHEMA)
    # an entry for a model the figure does not draw (an overlay swapped it out) is unused
    unused = validate(config(models=["a"], per_model=own), SCHEMA)["figures"]["fig7"]
    assert list(solution_columns(unused)) == ["a"]
    with pytest.raises(ConfigError, match=r"figures.fig7 \(a\): n_images 600 exceeds"):
        validate(config(n_images=600, per_model=own), SCHEMA)
    with pytest.raises(ConfigError, match="'z' has no `harvest` entry"):
        validate(config(models=["a", "z"]), SCHEMA)
    fig5 = {"models": ["a", "b"], "per_model": {"b": {"slices": [2, 20]}}}
    assert validate({**config(per_model=own), "figures": {"fig5": fig5}}, SCHEMA)
    with pytest.raises(ConfigError, match=r"figures.fig5 \(a\): slices \[2\]"):
        validate({**config(), "figures": {"fig5": {"models": ["a", "b"], "slices": [2]}}}, SCHEMA)


def test_cd25_anchor_overlay_trains_rbm_m_recipe_beside_the_paper_table():
    """sm_cd25_anchor.yaml after paper.yaml: one more model, Salakhutdinov's rbm.m recipe (read
    into the training settings), scored on the stochastic binarisation with the table's other
    rows, and nothing else of paper.yaml changed."""
    from tapmachine.train import TrainSettings
    from tapmachine.train.update import learning_rate, sampling_steps_at

    paper = validate(load("workflow/config/paper.yaml"), SCHEMA)
    files = [ROOT / "workflow/config/paper.yaml", ROOT / "workflow/config/sm_cd25_anchor.yaml"]
    both = validate(load_config(files, default=ROOT / "config.yaml", schema=SCHEMA), SCHEMA)
    anchor = both["models"].pop("sm_cd25_h500")
    table = both["likelihood"]["table"].pop("models")
    assert table == [*paper["likelihood"]["table"].pop("models"), "sm_cd25_h500"]
    assert both == paper
    assert (anchor["dataset"], anchor["train_dataset"]) == ("stochastic_binary_mnist", "real_mnist")
    s = TrainSettings.from_spec(anchor)
    assert (s.method, s.batch_size, s.epochs) == ("cd", 100, 250)
    # rbm.m's anneal_lr: CD = ceil(epoch / 10), epsilon = 0.05 / CD, CD-25 over the last ten
    ks = [sampling_steps_at(s.sampling_steps, e) for e in range(1, s.epochs + 1)]
    assert ks == [-(-e // 10) for e in range(1, 251)] and ks[-10:] == [25] * 10
    assert learning_rate(s.learning_rate, 250, s.epochs, ks[-1]) == 0.05 / 25
    assert s.momentum == {"initial": 0.5, "final": 0.9, "switch_epoch": 5} and s.prior_momentum
    assert (s.l2, s.weight_init_std, s.visible_init, s.resample) == (
        0.0002,
        0.01,
        "neutral",
        "bernoulli",
    )


def test_the_cpu_overlay_leaves_out_two_trainings_and_compares_fig10_at_epoch_42():
    """paper_cpu.yaml after paper.yaml and the anchor: sbmnist_h500 and bmnist_h500_noiseaug are
    gone with every list that named them; Fig. 10's adaTAP models train the epochs the GPU run
    reached (adaTAP-3 as far as the comparison), the figure compares at epoch 42; the rest is
    paper.yaml's."""
    files = [ROOT / f"workflow/config/{f}.yaml" for f in ("paper", "sm_cd25_anchor")]
    full = validate(load_config(files, default=ROOT / "config.yaml", schema=SCHEMA), SCHEMA)
    files.append(ROOT / "workflow/config/paper_cpu.yaml")
    cpu = validate(load_config(files, default=ROOT / "config.yaml", schema=SCHEMA), SCHEMA)
    gone = {"sbmnist_h500", "bmnist_h500_noiseaug"}
    assert gone <= set(full["models"])
    expected = copy.deepcopy(full)
    for name in gone:
        del expected["models"][name]
    table = expected["likelihood"]["table"]
    table["models"] = [m for m in table["models"] if m not in gone]
    fig8 = expected["denoise"]["fig8"]
    fig8["models"] = {k: v for k, v in fig8["models"].items() if v not in gone}
    for name, epochs in (("adatap3", 42), ("adatap10", 43), ("adatap100", 42)):
        expected["models"][f"bmnist_fig10_{name}"]["epochs"] = epochs
    expected["deep"]["fig10"]["epoch"] = 42
    assert full["deep"]["fig10"]["epoch"] is None
    assert cpu == expected


def test_the_faces_substitute_overlay_scales_the_faces_epochs_by_the_update_ratio():
    """faces_substitute.yaml after paper.yaml: faces_h256 trains the substitute's 80 images for
    the paper's number of updates (500 epochs of 2,429 CBCL faces at batch 20 against 80 at 20:
    30 times the epochs) and is harvested, scored and drawn at 30 times the paper's epochs; nothing
    else changes."""
    files = [ROOT / "workflow/config/paper.yaml"]
    paper = validate(load_config(files, default=ROOT / "config.yaml", schema=SCHEMA), SCHEMA)
    files.append(ROOT / "workflow/config/faces_substitute.yaml")
    faces = validate(load_config(files, default=ROOT / "config.yaml", schema=SCHEMA), SCHEMA)
    batch = paper["models"]["faces_h256"]["batch_size"]
    scale = math.ceil(2429 / batch) // math.ceil(80 / batch)
    assert scale == 30
    expected = copy.deepcopy(paper)
    expected["models"]["faces_h256"]["epochs"] *= scale
    expected["models"]["faces_h256"]["checkpoint_every"] = scale  # the harvested epochs only
    expected["models"]["faces_h256"]["eval"]["every"] = scale  # one score per paper epoch
    harvest = expected["harvest"]["faces_h256"]
    harvest["epochs"] = [e * scale for e in harvest["epochs"]]
    for fig in ("fig6", "fig7"):
        own = expected["figures"][fig]["per_model"]["faces_h256"]
        own["epochs"] = [e * scale for e in own["epochs"]]
    assert faces == expected
    assert set(faces["figures"]["fig6"]["per_model"]["faces_h256"]["epochs"]) <= set(
        faces["harvest"]["faces_h256"]["epochs"]
    )


def test_jobs_read_only_checkpoints_that_checkpoint_every_keeps():
    """Harvests, Fig. 3's exact curve and Fig. 12's scores read checkpoints: each epoch they
    name must be trained and kept (multiples of checkpoint_every and the last epoch), else the
    config error names the key, the epochs and the rule."""
    model = {**copy.deepcopy(MINIMAL_MODEL), "epochs": 100, "checkpoint_every": 10}

    def config(harvest=(10, 100), exact=(20, 100), fig12=(30, 100)):
        tiny = {**copy.deepcopy(model), "hidden": [{"prior": "bernoulli", "units": 3}]}
        return {
            "models": {"a": tiny},
            "harvest": {"a": {"epochs": list(harvest)}},
            "figures": {
                "fig3": {"models": ["a"], "exact": {"models": ["a"], "epochs": list(exact)}}
            },
            "likelihood": {"fig12": {"model": "a", "epochs": list(fig12)}},
        }

    validate(config(), SCHEMA)
    for key, bad in (("harvest", (5, 10)), ("exact", (20, 95)), ("fig12", (1,))):
        where = {
            "harvest": r"harvest\.a\.epochs",
            "exact": r"figures\.fig3\.exact\.epochs",
            "fig12": r"likelihood\.fig12\.epochs",
        }[key]
        dropped = [e for e in bad if e % 10]
        with pytest.raises(
            ConfigError,
            match=rf"{where}: the checkpoints of {re.escape(str(dropped))} are not kept by "
            r"model 'a' \(checkpoint_every 10",
        ):
            validate(config(**{key: bad}), SCHEMA)
        with pytest.raises(
            ConfigError, match=rf"{where}: \[101\] exceed the 100 training epochs of model 'a'"
        ):
            validate(config(**{key: (*bad, 101)}), SCHEMA)
    # without the key every epoch is kept
    plain = config(harvest=(5,), exact=(7,), fig12=(1,))
    del plain["models"]["a"]["checkpoint_every"]
    validate(plain, SCHEMA)
    with pytest.raises(ConfigError, match=r"models\.a\.checkpoint_every: 0 is less than"):
        validate({**config(), "models": {"a": {**model, "checkpoint_every": 0}}}, SCHEMA)


@pytest.mark.parametrize(
    "overlay, dataset",
    [
        ("paper_binary_mnist.yaml", "binary_mnist"),
        ("paper_real_mnist.yaml", "real_mnist"),
        ("paper_faces.yaml", "real_faces"),
    ],
)
def test_one_dataset_overlays_draw_figs_3_to_7_of_that_dataset_only(overlay, dataset):
    """Each one-dataset overlay, after the paper-size run's files, keeps in Figs. 3-7 exactly the
    models of paper.yaml's lists that train on its dataset, and changes no model."""
    run = [
        "workflow/config/paper.yaml",
        "workflow/config/sm_cd25_anchor.yaml",
        "workflow/config/paper_cpu.yaml",
        "workflow/config/faces_substitute.yaml",
    ]
    whole = validate(load(*run), SCHEMA)
    one = validate(load(*run, f"workflow/config/{overlay}"), SCHEMA)
    assert one["models"] == whole["models"]
    for fig in ("fig3", "fig4", "fig5", "fig6", "fig7"):
        listed = whole["figures"][fig]["models"]
        kept = [m for m in listed if whole["models"][m]["dataset"] == dataset]
        assert one["figures"][fig]["models"] == kept, fig
    exact = (one["figures"]["fig3"].get("exact") or {}).get("models", [])
    assert all(one["models"][m]["dataset"] == dataset for m in exact)


def test_the_bmnist_h25_overlay_draws_fig3_of_that_model_with_its_exact_curve():
    """paper_bmnist_h25.yaml, after the paper-size run's files, keeps bmnist_h25 alone in Fig. 3
    with paper.yaml's exact curve and its AIS, and changes no model."""
    run = ["workflow/config/paper.yaml", "workflow/config/sm_cd25_anchor.yaml",
           "workflow/config/paper_cpu.yaml"]  # fmt: skip
    whole = validate(load(*run), SCHEMA)
    one = validate(load(*run, "workflow/config/paper_bmnist_h25.yaml"), SCHEMA)
    assert one["models"] == whole["models"]
    assert one["figures"]["fig3"]["models"] == ["bmnist_h25"]
    exact = one["figures"]["fig3"]["exact"]
    assert exact == whole["figures"]["fig3"]["exact"] and exact["models"] == ["bmnist_h25"]
    assert exact["ais"]["n_runs"] == 100
