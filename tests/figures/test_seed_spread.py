"""The claims of several seeds side by side (``figures.seed_spread``)."""

import math

import pandas as pd
import pytest

from tapmachine.figures import seed_spread
from tapmachine.figures.common import FigureError


def _run(folder, rows):
    """A figures folder with one figure CSV (fig8) holding the claim rows ``rows``."""
    folder.mkdir(parents=True)
    table = pd.DataFrame(
        [{"kind": "drawn", "claim": None, "model": "m", "value": 0.0, "held": None}]
        + [{"kind": "claim", **r} for r in rows]
    )
    table.to_csv(folder / "fig8.csv", index=False)
    return folder


def test_spread_gives_each_rows_values_and_its_verdict_over_seeds(tmp_path):
    rows = {
        1: [
            {"claim": "tap_beats_ope", "model": "nh25", "value": 0.10, "held": "held"},
            {"claim": "tap_beats_ope", "model": "nh500", "value": -0.02, "held": "not held"},
            {"claim": "n_images", "model": "", "value": 1000, "held": None},
        ],
        2: [
            {"claim": "tap_beats_ope", "model": "nh25", "value": 0.14, "held": "held"},
            {"claim": "tap_beats_ope", "model": "nh500", "value": 0.01, "held": "held"},
            {"claim": "n_images", "model": "", "value": 1000, "held": None},
        ],
        3: [
            {"claim": "tap_beats_ope", "model": "nh25", "value": 0.12, "held": "held"},
            {"claim": "tap_beats_ope", "model": "nh500", "value": -0.03, "held": "not held"},
        ],
    }
    runs = {str(s): _run(tmp_path / f"seed{s}", r) for s, r in rows.items()}
    table = seed_spread.spread(runs).set_index(["claim", "model"])
    nh25 = table.loc[("tap_beats_ope", "nh25")]
    assert nh25["verdict"] == "held on every seed" and nh25["n"] == 3
    assert nh25["mean"] == pytest.approx(0.12) and nh25["std"] == pytest.approx(0.02)
    assert (nh25["min"], nh25["max"]) == (pytest.approx(0.10), pytest.approx(0.14))
    assert table.loc[("tap_beats_ope", "nh500"), "verdict"] == "split"
    context = table.loc[("n_images", "")]
    assert context["verdict"] == "" and context["n"] == 2 and math.isnan(context["value 3"])
    text = seed_spread.spread_markdown(seed_spread.spread(runs), "Seeds")
    assert "| fig8 | 1 | 0 | 1 |" in text
    assert "| fig8 | tap_beats_ope | nh25 | 0.1 (held) | 0.14 (held) | 0.12 (held) |" in text
    assert "n_images" not in text  # context rows are not judged over seeds


def test_verdict_over_seeds():
    assert seed_spread.verdict_over_seeds(["not held", "not held"]) == "not held on any seed"
    assert seed_spread.verdict_over_seeds(["held", float("nan")]) == "split"
    assert seed_spread.verdict_over_seeds([None, float("nan")]) == ""


def test_one_run_is_no_spread(tmp_path):
    run = _run(tmp_path / "a", [{"claim": "c", "model": "", "value": 1, "held": "held"}])
    with pytest.raises(FigureError, match="at least 2 runs"):
        seed_spread.spread({"a": run})


def test_claims_spread_command_writes_the_report(tmp_path):
    from tapmachine.pipeline.cli import main

    for s, v in ((1, 0.1), (2, -0.1)):
        row = {"claim": "c", "model": "m", "value": v, "held": "held" if v > 0 else "not held"}
        _run(tmp_path / f"seed{s}" / "figures", [row])
    out, csv = tmp_path / "spread.md", tmp_path / "spread.csv"
    args = ["claims-spread", "--results", str(tmp_path / "seed1"), str(tmp_path / "seed2")]
    assert main(args + ["--out", str(out), "--csv", str(csv)]) == 0
    assert "| fig8 | c | m | 0.1 (held) | -0.1 (not held) |" in out.read_text()
    assert pd.read_csv(csv)["verdict"].tolist() == ["split"]


def test_spread_keeps_every_row_of_a_claim_per_epoch_and_per_text(tmp_path):
    """One claim of one model at two epochs, and two rows told apart only by their text (Fig.
    4's Spearman rows per dataset), stay apart over the seeds; the Row column names them."""

    def rows(shift):
        return [
            {"claim": "grows", "model": "m", "epoch": 1, "value": 1 + shift, "held": "held"},
            {"claim": "grows", "model": "m", "epoch": 5, "value": 2 + shift, "held": "held"},
            {"claim": "rho", "model": "", "value": -1, "held": "held", "detail": "dataset a, x"},
            {
                "claim": "rho",
                "model": "",
                "value": shift,
                "held": "not held",
                "detail": "dataset b",
            },
        ]

    runs = {str(s): _run(tmp_path / f"seed{s}", rows(s / 10)) for s in (1, 2)}
    table = seed_spread.spread(runs)
    assert len(table) == 4
    grows = table[table["claim"] == "grows"].set_index("epoch")
    assert grows.loc["5", "mean"] == pytest.approx(2.15)
    text = seed_spread.spread_markdown(table)
    assert "| fig8 | grows | m | epoch 5 | 2.1 (held) | 2.2 (held) |" in text
    assert "| fig8 | rho |  | dataset b | 0.1 (not held) | 0.2 (not held) |" in text
