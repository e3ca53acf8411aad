"""The UCD stage: config section ucd.fig1, `tapmachine ucd steps`, and the Fig. 1 module."""

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tapmachine.figures import ucd_fig1
from tapmachine.figures.common import FigureError
from tapmachine.io.schema import SCHEMA_FILE as SCHEMA
from tapmachine.pipeline.cli import main
from tapmachine.pipeline.configuration import ConfigError, load_config, validate
from tapmachine.pipeline.stages.ucd import STEP_FIELDS, UCDError, run_steps

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def default():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_shipped_configs_have_the_ucd_section():
    for name in ("config.yaml", "workflow/config/paper.yaml"):
        config = validate(load_config([ROOT / name], default=ROOT / "config.yaml"), SCHEMA)
        fig1 = config["ucd"]["fig1"]
        assert {1, 25, 50, 100, 200} <= set(fig1["dims"]) and fig1["reps"] >= 100
        assert fig1["methods"] == ["gibbs", "gibbs_lmi", "mh", "mh_lmi"]


def test_ucd_defaults_are_filled(default):
    config = copy.deepcopy(default)
    del config["ucd"]
    fig1 = validate(config, SCHEMA)["ucd"]["fig1"]
    assert fig1["dims"] == [1, 5, 10, 25, 50, 100, 200]
    assert fig1["cap"] == 1000 and fig1["units"] == "spin" and fig1["bias"] == "logistic"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("dims", [1, 0, 5], "ucd.fig1.dims[1]: 0 is less than the minimum of 1"),
        ("dims", [1, 2.5], "ucd.fig1.dims[1]: 2.5 is not of type 'integer'"),
        ("dims", [], "ucd.fig1.dims: [] should be non-empty"),
        ("reps", 0, "ucd.fig1.reps: 0 is less than the minimum of 1"),
        ("reps", "many", "ucd.fig1.reps: 'many' is not of type 'integer'"),
        ("cap", 0, "ucd.fig1.cap: 0 is less than the minimum of 1"),
        ("methods", ["gibbs", "hmc"], "ucd.fig1.methods[1]: 'hmc' is not one of"),
        ("units", "ising", "ucd.fig1.units: 'ising' is not one of"),
        ("gain", 0, "ucd.fig1.gain: 0 is less than or equal to the minimum of 0"),
        ("repetitions", 5, "ucd.fig1: Additional properties are not allowed ('repetitions'"),
    ],
)
def test_bad_ucd_values_name_the_key(default, key, value, expected):
    config = copy.deepcopy(default)
    config["ucd"]["fig1"][key] = value
    with pytest.raises(ConfigError) as info:
        validate(config, SCHEMA)
    assert expected in str(info.value)


def test_run_steps_writes_long_form_rows(tmp_path):
    out = tmp_path / "mh_lmi.csv"
    rows = run_steps("mh_lmi", [2, 30], 16, 100, 1000, "spin", "logistic", 1.0, 3, out)
    df = pd.read_csv(out)
    assert list(df.columns) == STEP_FIELDS and len(df) == len(rows) == 32
    assert (df["T"] >= 1).all() and (df["tau"] >= 1).all()
    # a correction term needs the chains to meet after the first step
    assert (df.loc[df["corrected"] == 1, "tau"] > 1).all()
    assert set(df["search_capped"]) <= {0, 1}
    again = tmp_path / "again.csv"
    run_steps("mh_lmi", [2, 30], 16, 100, 1000, "spin", "logistic", 1.0, 3, again)
    assert out.read_text() == again.read_text(), "same seed, same numbers"


def test_run_steps_rejects_bad_input_before_writing(tmp_path):
    out = tmp_path / "x.csv"
    with pytest.raises(UCDError, match="method"):
        run_steps("hmc", [2], 4, 10, 10, "spin", "logistic", 1.0, 0, out)
    with pytest.raises(UCDError, match="dims"):
        run_steps("mh", [0], 4, 10, 10, "spin", "logistic", 1.0, 0, out)
    with pytest.raises(UCDError, match="cap"):
        run_steps("mh", [2], 4, 0, 10, "spin", "logistic", 1.0, 0, out)
    assert not out.exists()


def test_cli_rejects_a_non_positive_dimension(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["ucd", "steps", "--method", "mh", "--dims", "0", "--out", str(tmp_path / "x.csv")])
    assert info.value.code == 2
    assert "0 is not a positive integer" in capsys.readouterr().err


def _synthetic(tmp_path):
    """Steps files with known answers: Gibbs tau ~ e^{d/10}, MH+LMI tau = 1 and T = d^0.5."""
    paths = []
    for method in ("gibbs", "mh_lmi"):
        rows = []
        for d in (5, 10, 25, 50):
            for rep in range(4):
                if method == "gibbs":
                    tau, steps = round(np.exp(d / 10)) + rep - 1, 0
                else:
                    tau, steps = (1 if d >= 25 else 1 + rep % 2), round(d**0.5)
                rows.append([d, method, rep, tau, steps, 0, int(tau > 1), 0])
        path = tmp_path / f"{method}.csv"
        pd.DataFrame(rows, columns=STEP_FIELDS).to_csv(path, index=False)
        paths.append(path)
    return paths


def test_a_linear_rise_is_not_called_exponential(tmp_path):
    """Gibbs steps growing as 8 d (rising at every d, positive log slope) are a straight line:
    the exponential verdict must say not held; the same points as e^{d/10} say held."""
    for law, verdict in ((lambda d: 8 * d, "not held"), (lambda d: np.exp(d / 10), "held")):
        rows = [
            [d, "gibbs", rep, round(law(d)) + rep, 0, 0, 1, 0]
            for d in (5, 10, 25, 50)
            for rep in range(4)
        ]
        path = tmp_path / f"gibbs_{verdict.replace(' ', '_')}.csv"
        pd.DataFrame(rows, columns=STEP_FIELDS).to_csv(path, index=False)
        table = ucd_fig1.make([path]).table
        row = table[(table["kind"] == "claim") & (table["claim"] == "grows_exponentially")]
        assert row["held"].tolist() == [verdict], row["detail"].tolist()


def test_figure_claims_from_known_steps(tmp_path):
    result = ucd_fig1.make(_synthetic(tmp_path))
    table = result.table
    claims = table[table["kind"] == "claim"].set_index(["claim", "model"])["value"]
    assert claims[("log_growth_per_dim", "gibbs")] == pytest.approx(0.1, abs=0.01)
    assert claims[("grows_exponentially", "gibbs")] == 1.0
    held = table[table["kind"] == "claim"].set_index(["claim", "model"])["held"]
    assert held[("grows_exponentially", "gibbs")] == "held"
    assert held[("tau_one_fraction_d_ge_25", "mh_lmi")] == "held"
    assert held[("T_growth_exponent", "mh_lmi")] == "held"
    assert claims[("tau_one_fraction_d_ge_25", "mh_lmi")] == 1.0
    assert claims[("T_growth_exponent", "mh_lmi")] == pytest.approx(0.5, abs=0.05)
    assert claims[("mean_tau_plus_T.d5", "mh_lmi")] == pytest.approx(1.5 + 2)
    drawn = table[table["kind"] == "drawn"]
    assert len(drawn) == 32 and set(ucd_fig1.COLUMNS) <= set(drawn.columns)


def test_figure_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"d": [1], "method": ["mh"]}).to_csv(bad, index=False)
    with pytest.raises(FigureError, match="missing columns"):
        ucd_fig1.make([bad])
    with pytest.raises(FigureError, match="not found"):
        ucd_fig1.make([tmp_path / "none.csv"])
    paths = _synthetic(tmp_path)
    with pytest.raises(FigureError, match="repeat"):
        ucd_fig1.make([paths[0], paths[0]])
