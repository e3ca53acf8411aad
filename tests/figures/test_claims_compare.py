"""A run's claims before and after a change, row by row (``figures.claims_compare``)."""

import pandas as pd

from tapmachine.figures import claims_compare
from tapmachine.pipeline.cli import main


def _figures(folder, rows, figure="fig5"):
    """A figures folder with one figure CSV holding the claim rows ``rows``."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(
        [{"kind": "drawn", "claim": None, "model": "m", "value": 0.0, "held": None}]
        + [{"kind": "claim", "epoch": None, "detail": None, **r} for r in rows]
    )
    table.to_csv(folder / f"{figure}.csv", index=False)
    return folder


def _row(claim, value, held, model="m", epoch=None, detail=None):
    return {
        "claim": claim,
        "model": model,
        "value": value,
        "held": held,
        "epoch": epoch,
        "detail": detail,
    }


def test_compare_names_how_each_verdict_moved_row_by_row(tmp_path):
    """Rows of one claim and model at several epochs, and several rows told apart only by their
    text (Fig. 4's per dataset), are compared row by row, not collapsed into their first."""
    before = _figures(
        tmp_path / "before",
        [
            _row("grows", 1.0, "held", epoch=1),
            _row("grows", 2.0, "held", epoch=5),
            _row("spearman", -1.0, "held", model="", detail="dataset binary_mnist, ..."),
            _row("spearman", 0.2, "not held", model="", detail="dataset real_mnist, ..."),
            _row("two_modes", 0.0, "not held"),
            _row("old_row", 3.0, "held"),
            _row("n_images", 100, None),
        ],
    )
    after = _figures(
        tmp_path / "after",
        [
            _row("grows", 1.5, "held", epoch=1),
            _row("grows", -0.5, "not held", epoch=5),
            _row("spearman", -0.8, "held", model="", detail="dataset binary_mnist, ..."),
            _row("spearman", -0.6, "held", model="", detail="dataset real_mnist, ..."),
            _row("two_modes", 1.0, "held"),
            _row("new_row", 4.0, "not held"),
            _row("n_images", 100, None),
        ],
    )
    table = claims_compare.compare(before, after).set_index(["claim", "model", "epoch", "nth"])
    assert table.loc[("grows", "m", "1", 0), "change"] == "held"
    assert table.loc[("grows", "m", "5", 0), "change"] == "held -> not held"
    assert table.loc[("spearman", "", "", 0), "change"] == "held"
    assert table.loc[("spearman", "", "", 1), "change"] == "not held -> held"
    assert table.loc[("two_modes", "m", "", 0), "change"] == "not held -> held"
    assert table.loc[("old_row", "m", "", 0), "change"] == "gone"
    assert table.loc[("new_row", "m", "", 0), "change"] == "new"
    assert table.loc[("n_images", "m", "", 0), "change"] == ""  # context: no verdict either side

    text = claims_compare.compare_markdown(
        claims_compare.compare(before, after), "Change", names=("Alg. 1", "newton_sor")
    )
    # held in both, not held in both, now held, no longer held, other
    assert "| fig5 | 2 | 0 | 2 | 1 | 2 |" in text
    assert "| Figure | Claim row | Model | Row | Alg. 1 | newton_sor | Change |" in text
    assert "| fig5 | grows | m | epoch 5 | 2 (held) | -0.5 (not held) | held -> not held |" in text
    assert "| fig5 | spearman |  | dataset real_mnist | 0.2 (not held) | -0.6 (held) |" in text
    assert "n_images" not in text


def test_change_and_its_kind():
    assert claims_compare.change(None, float("nan")) == ""
    assert claims_compare.change("held", None) == "held -> no verdict"
    assert claims_compare.change(None, "held", in_before=False) == "new"
    assert claims_compare.kind("no verdict -> held") == "other"
    assert claims_compare.kind("not held -> held") == "now held"
    assert claims_compare.kind("held -> no verdict") == "no longer held"


def test_claims_compare_command_writes_the_report(tmp_path):
    _figures(tmp_path / "old" / "figures", [_row("c", 0.1, "held")])
    _figures(tmp_path / "new" / "figures", [_row("c", -0.1, "not held")])
    out, csv = tmp_path / "compare.md", tmp_path / "compare.csv"
    args = ["claims-compare", "--before", str(tmp_path / "old"), "--after", str(tmp_path / "new")]
    assert main(args + ["--out", str(out), "--csv", str(csv)]) == 0
    assert "| Figure | Claim row | Model | Row | old | new | Change |" in out.read_text()
    assert (
        "| fig5 | c | m |  | 0.1 (held) | -0.1 (not held) | held -> not held |" in out.read_text()
    )
    assert pd.read_csv(csv)["change"].tolist() == ["held -> not held"]
