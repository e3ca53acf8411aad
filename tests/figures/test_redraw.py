"""Tables drawn again from their CSVs (``figures.redraw``, ``tapmachine redraw-table``): a table
made from tiny score files and redrawn from its CSV alone gives the same drawn and claim rows,
and a CSV whose claim rows the redraw does not reproduce is refused."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tiny_harvest

from tapmachine.figures import common, fig3, fig12, likelihood_table, redraw, ucd_dbm
from tapmachine.pipeline import cli

COMMITTED = Path(__file__).parents[2] / "docs" / "results" / "ucd_cpu"

COUPLING = dict(tau_mean_mean=1.0, tau_mean_min=1.0, tau_mean_max=1.0, tau_max=1.0)
COUPLING.update(T_mean_mean=7.25, T_mean_min=5.5, T_mean_max=9.125, T_max=31.0)


def _score_files(folder: Path) -> dict[str, list[Path]]:
    """Score JSONs as ``tapmachine ucd score`` writes them: Table 1's (two datasets, a floor,
    coupling times, a DBM without an AIS score) and Table 2's ablation."""
    folder.mkdir(parents=True, exist_ok=True)

    def write(dataset, model, method, fid, **extra):
        row = {"dataset": dataset, "model": model, "method": method, "spec": '{"cap": 10}'}
        row.update(sizes="784-50-50", classifier_fid=fid, classifier_accuracy=0.93)
        row.update(tap_ll=-0.1 - fid / 1000, ais_ll=-fid / 3, fid_floor=2.25)
        row.update(extra)
        path = folder / f"{dataset}_{model}.json"
        path.write_text(json.dumps(row))
        return path

    table1 = [
        write("binary_mnist", "ucd_lmi", "ucd_lmi", 41.5, **COUPLING),
        write("binary_mnist", "pcd", "dbm_pcd", 310.25),
        write("binary_mnist", "centered", "centered_pcd", 120.0, ais_ll=None),
        write("binary_fashion_mnist", "ucd_lmi", "ucd_lmi", 88.0, **COUPLING),
        write("binary_fashion_mnist", "pcd", "dbm_pcd", 70.5),
    ]
    table2 = [
        write("binary_mnist", "ucd_lmi", "ucd_lmi", 41.5, **COUPLING),
        write("binary_mnist", "no_unbiased", "dbm_pcd", 200.0),
        write("binary_mnist", "no_centering", "ucd_lmi", 39.0, **COUPLING),
    ]
    return {"ucd_table1": table1, "ucd_table2": table2}


@pytest.fixture
def drawn_tables(tmp_path):
    """Tables 1-2 drawn by the current code from tiny score files, saved as the workflow saves
    them: name -> (CSV path, score rows)."""
    out = {}
    for name, paths in _score_files(tmp_path / "scores").items():
        result = getattr(ucd_dbm, name.removeprefix("ucd_"))(paths)
        csv = tmp_path / "figures" / f"{name}.csv"
        common.save(result, csv.with_suffix(".png"), None, csv)
        out[name] = (csv, [json.loads(p.read_text()) for p in paths])
    return out


@pytest.mark.parametrize("name", ["ucd_table1", "ucd_table2"])
def test_a_ucd_table_redrawn_from_its_csv_is_the_same_table(drawn_tables, name):
    csv, rows = drawn_tables[name]
    table = redraw.read_table(csv)
    scores = redraw.inputs(table, name)
    # the score rows come back field for field, in the table's order (Table 1: by FID)
    expected = pd.DataFrame(rows)
    if name == "ucd_table1":
        expected = expected.sort_values(["dataset", "classifier_fid"]).reset_index(drop=True)
    assert sorted(scores.columns) == sorted(expected.columns)
    for column in expected:
        for got, want in zip(scores[column], expected[column], strict=True):
            assert got == want or (pd.isna(got) and pd.isna(want)), (column, got, want)
    again = redraw.redraw(table, name)
    assert again.table.to_csv(index=False) == csv.read_text()  # drawn and claim rows alike
    assert redraw.claim_differences(table, again.table) == ([], [])
    held = again.table["held"].fillna("")
    assert {"held", "not held"} <= set(held)  # the tiny tables give verdicts both ways


def test_table1_from_its_csv_keeps_the_floor_and_the_missing_ais_score(drawn_tables):
    csv, _ = drawn_tables["ucd_table1"]
    scores = redraw.inputs(redraw.read_table(csv), "ucd_table1")
    assert ucd_dbm.FLOOR_MODEL not in set(scores["model"])
    assert scores["fid_floor"].tolist() == [2.25] * 5
    centered = scores[scores["model"] == "centered"]
    assert math.isnan(centered["ais_ll"].iloc[0])
    claims = redraw.redraw(redraw.read_table(csv), "ucd_table1").table.set_index(["claim", "model"])
    # the fashion PCD DBM has the lower FID there: UCD-LMI best on MNIST only
    assert claims.loc[("ucd_lmi_best_fid", "binary_mnist"), "held"] == "held"
    assert claims.loc[("ucd_lmi_best_fid", "binary_fashion_mnist"), "held"] == "not held"
    assert claims.loc[("local_search_steps_T", "binary_mnist/ucd_lmi"), "value"] == 7.25


def test_a_table_whose_drawn_rows_lack_a_read_column_is_not_redrawn(drawn_tables):
    csv, _ = drawn_tables["ucd_table2"]
    table = redraw.read_table(csv).drop(columns=["classifier_accuracy"])
    with pytest.raises(common.MissingColumns, match="classifier_accuracy"):
        redraw.redraw(table, "ucd_table2")
    with pytest.raises(common.FigureError, match="no table named 'fig7'"):
        redraw.table_name(csv.with_name("fig7.csv"))


def test_claim_differences_find_a_changed_value_verdict_and_row():
    def table(rows):
        claims = [common.claim(*row) for row in rows]
        return common.table([{"x": 1.0}], claims)

    a = table([("c", 1.0, "m", "", None, True), ("d", math.nan, "m"), ("e", 2.0)])
    assert redraw.claim_differences(a, a.copy()) == ([], [])  # NaN equals NaN
    last_bits = table([("c", 1.0 + 4e-16, "m", "", None, True), ("d", math.nan, "m"), ("e", 2.0)])
    assert redraw.claim_differences(a, last_bits) == ([], [])  # another summation order
    fitted_otherwise = table([("c", 1.0 + 1e-6, "m", "", None, True), ("d", math.nan, "m")])
    assert redraw.claim_differences(a, fitted_otherwise)[0] == [
        "c [m]: value 1.0 -> 1.000001, verdict 'held' -> 'held'"
    ]
    b = table([("c", 1.0, "m", "", None, False), ("d", 0.5, "m"), ("f", 2.0)])
    changed, only = redraw.claim_differences(a, b)
    assert changed == [
        "c [m]: value 1.0 -> 1.0, verdict 'held' -> 'not held'",
        "d [m]: value nan -> 0.5, verdict '' -> ''",
    ]
    assert only == ["only in the CSV: e", "only in the redraw: f"]
    by_epoch = table([("g", 1.0, "m", "", 3)])
    in_memory = by_epoch.assign(epoch=pd.Series([None, 3], dtype=object))
    assert redraw.claim_differences(in_memory, by_epoch) == ([], [])  # epoch 3 is 3.0 from a CSV


def test_redraw_table_command_writes_png_and_csv_and_refuses_other_verdicts(
    drawn_tables, tmp_path, capsys
):
    csv, _ = drawn_tables["ucd_table2"]
    out = tmp_path / "redrawn"
    assert cli.main(["redraw-table", "--csv", str(csv), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ucd_table2.csv", "ucd_table2.png"]
    assert (out / "ucd_table2.csv").read_text() == csv.read_text()
    # a verdict the CSV states but its own numbers do not give: refused, nothing written
    table = pd.read_csv(csv)
    row = table.index[table["claim"] == "removal_worsens_fid"][0]
    table.loc[row, "held"] = "not held" if table.loc[row, "held"] == "held" else "held"
    forged = tmp_path / "forged" / "ucd_table2.csv"
    forged.parent.mkdir()
    table.to_csv(forged, index=False)
    elsewhere = tmp_path / "elsewhere"
    argv = ["redraw-table", "--csv", str(forged), "--out", str(elsewhere), "--pdf"]
    assert cli.main(argv) == 2
    assert "removal_worsens_fid" in capsys.readouterr().err
    assert not elsewhere.exists()
    # judged again: the current verdict is written and named; a value that differs still refused
    assert cli.main(argv + ["--rejudge"]) == 0
    assert "removal_worsens_fid" in capsys.readouterr().out
    assert (elsewhere / "ucd_table2.csv").read_text() == csv.read_text()
    table.loc[row, "value"] = float(table.loc[row, "value"]) + 1.0
    table.to_csv(forged, index=False)
    assert cli.main(argv + ["--rejudge"]) == 2
    assert "removal_worsens_fid" in capsys.readouterr().err
    renamed = tmp_path / "table.csv"
    renamed.write_text(csv.read_text())
    argv = ["redraw-table", "--csv", str(renamed), "--out", str(out), "--table", "ucd_table2"]
    assert cli.main(argv + ["--pdf"]) == 0
    assert (out / "table.pdf").stat().st_size > 0


def test_the_command_offers_every_table_redraw_knows():
    parser = cli._parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["redraw-table"]
    table = next(a for a in sub._actions if a.dest == "table")
    assert list(table.choices) == list(redraw.TABLES)


def _likelihood_rows():
    def row(model, method, steps, ll):
        return {
            "model": model,
            "method": method,
            "method_label": likelihood_table.method_label(method, steps),
            "sampling_steps": steps,
            "hidden_units": 20,
            "n_train": 300,
            "epochs": 4,
            "updates": 60,
            "ais_ll_test": ll,
            "ais_ll_test_lower": ll - 0.75,
            "ais_ll_test_upper": ll + 0.75,
            "ais_ll_test_stderr_images": 0.5,
            "log_z_ais": 40.0,
            "log_z_ais_stderr": 0.25,
            "tap_ll_test": ll + 3.0,
            "pl_test": ll + 5.0,
            "n_test_images": 100,
            "ais": "10 runs, 200 betas",
            "source": "computed here",
            "computed": 1,
            "dataset": "binary_mnist",
            "binarisation": "thresholded: pixel/255 > 0.5",
            "reference": "",
        }

    return [row("h20", "tap", None, -120.5), row("h20_cd25", "cd", 25, -121.0)]


@pytest.mark.parametrize("reference", [True, False])
def test_the_likelihood_table_redrawn_from_its_csv_is_the_same_table(tmp_path, reference):
    rows = _likelihood_rows()
    result = likelihood_table.from_rows(rows, reference)
    csv = tmp_path / "likelihood_table.csv"
    common.save(result, tmp_path / "likelihood_table.png", None, csv)
    table = redraw.read_table(csv)
    got, with_reference = redraw.inputs(table, "likelihood_table")
    assert with_reference is reference
    assert [r["n_train"] for r in got] == [300, 300] and isinstance(got[0]["n_train"], int)
    assert [r["method_label"] for r in got] == ["TAP", "CD-25"]
    again = redraw.redraw(table, "likelihood_table")
    assert again.table.to_csv(index=False) == csv.read_text()
    labels = [t.get_text() for t in again.figure.axes[0].get_yticklabels()]
    assert labels[0] == "TAP: h20\n300 img x 4 ep = 60 updates; thresholded"


@pytest.mark.parametrize("name", ["ucd_table1", "ucd_table2"])
def test_the_committed_demonstration_tables_redraw_to_their_own_csv(name):
    """docs/results/ucd_cpu: the current code, given the committed CSV alone, computes the same
    drawn and claim rows (its PNG is drawn by ``tapmachine redraw-table``)."""
    csv = COMMITTED / f"{name}.csv"
    table = redraw.read_table(csv)
    again = redraw.redraw(table, name)
    assert redraw.claim_differences(table, again.table) == ([], [])
    assert again.table.to_csv(index=False) == csv.read_text()


def test_claims_rejudge_judges_the_tables_again_from_their_csvs(drawn_tables):
    """A table CSV whose verdict an older rule wrote (here: turned over) reads as written, and
    with rejudge as the current code judges it from the CSV's drawn rows."""
    from tapmachine.figures import claims as claims_report

    csv, _ = drawn_tables["ucd_table2"]
    table = pd.read_csv(csv)
    judged = (table["kind"] == "claim") & table["held"].isin(["held", "not held"])
    row = (judged & table["model"].notna()).idxmax()
    truth = table.loc[row, "held"]
    table.loc[row, "held"] = "held" if truth == "not held" else "not held"
    table.to_csv(csv, index=False)
    claim, model = table.loc[row, "claim"], table.loc[row, "model"]

    def verdict(rows):
        rows = rows[rows["figure"] == "ucd_table2"]
        return rows[(rows["claim"] == claim) & (rows["model"] == model)]["held"].iloc[0]

    assert verdict(claims_report.collect(csv.parent)) != truth
    assert verdict(claims_report.collect(csv.parent, rejudge=True)) == truth


def test_fig3_redrawn_from_its_csv_draws_the_same_curves_and_verdicts(tmp_path):
    """Fig. 3 of a tiny trained model with an exact curve (AIS included), redrawn from its CSV
    alone: the same models, datasets, substitute and hidden units, the same drawn rows and claim
    rows; a CSV without the standard errors is refused."""
    run = tiny_harvest.build(
        tmp_path / "run", epochs=(tiny_harvest.EPOCHS,), n_init=20, substitute="made-up faces"
    )
    epochs = pd.read_csv(run["metrics"])["epoch"].to_numpy(int)
    chosen = [int(epochs[0]), int(epochs[-1])]
    exact_csv = tmp_path / "exact.csv"
    pd.DataFrame(
        {"model": "tiny", "epoch": chosen, "exact_ll": [-0.5, -0.25], "exact_ll_stderr": 0.01}
    ).assign(ais_z=[0.5, -1.5]).to_csv(exact_csv, index=False)
    made = fig3.make([run["metrics"]], [run["model"]], [exact_csv])
    csv = tmp_path / "figures" / "fig3.csv"
    common.save(made, csv.with_suffix(".png"), None, csv)
    table = redraw.read_table(csv)

    infos, curves, exact = fig3.from_table(table)
    assert [(i.name, i.dataset, i.substitute, i.sizes[1]) for i in infos] == [
        (m.name, m.dataset, m.substitute, m.sizes[1]) for m in made.models
    ]
    assert curves[0]["epoch"].tolist() == epochs.tolist()
    assert exact["tiny"]["epoch"].tolist() == chosen
    assert exact["tiny"]["ais_z"].tolist() == [0.5, -1.5]

    again = redraw.redraw(table, "fig3")
    assert redraw.claim_differences(table, again.table) == ([], [])
    assert {"exact_ll_increase_first_to_last", "ais_vs_exact"} <= set(again.table["claim"])
    drawn = [t[t["kind"] == "drawn"].reset_index(drop=True) for t in (made.table, again.table)]
    for column in ("epoch", "tap_ll", "tap_ll_stderr", "exact_ll", "ais_z", "hidden_units"):
        assert np.allclose(
            drawn[0][column].astype(float), drawn[1][column].astype(float), equal_nan=True
        ), column
    assert again.figure.get_suptitle() == made.figure.get_suptitle()

    out = tmp_path / "redrawn"
    assert cli.main(["redraw-table", "--csv", str(csv), "--out", str(out)]) == 0
    assert (out / "fig3.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(common.MissingColumns, match="tap_ll_stderr"):
        redraw.redraw(table.drop(columns=["tap_ll_stderr"]), "fig3")


def _fig12_scores(path: Path) -> Path:
    """A ``scores.csv`` of six epochs as ``tapmachine score --epochs`` writes it: the test split
    rises in all three measures; the training split's pseudo-likelihood wobbles (so that its
    measures do not rise together) and it has no per-unit TAP column."""
    e = np.arange(1, 7)
    base = -150.0 + 8.0 * np.log(e)
    rows = {
        "model": "tiny",
        "epoch": e,
        "log_z_ais": -base,
        "log_z_ais_stderr": 0.05 * e,
        "log_z_tap": 1.5 - base,
        "ais_n_betas": 1451,
        "ais_description": "Salakhutdinov, thinned schedule, 1451 betas, 100 runs",
        "pl_sites": 10,
        "pl_sites_drawn_for": "every block of images",
    }
    for split, shift in (("test", 0.0), ("train", 2.0)):
        rows[f"tap_ll_{split}"] = base + 5.0 + shift
        rows[f"ais_ll_{split}"] = base + shift
        rows[f"ais_ll_{split}_lower"] = base + shift - 0.3
        rows[f"ais_ll_{split}_upper"] = base + shift + 0.25
        rows[f"n_{split}_images"] = 40 if split == "test" else 60
    rows["pl_test"] = base + 10.0
    rows["pl_train"] = base[::-1] + 12.0 + np.cos(e)
    rows["tap_ll_per_unit_test"] = (base + 5.0) / 44
    pd.DataFrame(rows).iloc[::-1].to_csv(path, index=False)  # make sorts the epochs
    return path


@pytest.fixture(scope="module")
def fig12_drawn(tmp_path_factory):
    """Fig. 12 drawn by ``make`` from a tiny scores.csv and a tiny trained model on a substitute
    dataset, saved as the workflow saves it: (the result, its CSV)."""
    root = tmp_path_factory.mktemp("fig12")
    run = tiny_harvest.build(root / "run", epochs=(), substitute="made-up faces")
    made = fig12.make(_fig12_scores(root / "scores.csv"), run["model"])
    csv = root / "figures" / "fig12.csv"
    common.save(made, csv.with_suffix(".png"), None, csv)
    return made, csv


def test_fig12_redrawn_from_its_csv_draws_the_same_curves_and_verdicts(fig12_drawn, tmp_path):
    """Fig. 12 of a tiny model, redrawn from its CSV alone: the same model, dataset, substitute
    and visible units, the same scores per epoch, the same drawn rows, claim rows (verdicts both
    ways) and title."""
    made, csv = fig12_drawn
    table = redraw.read_table(csv)
    info, scores = fig12.from_table(table)
    (model,) = made.models
    assert (info.name, info.dataset, info.substitute) == ("tiny", "synth", "made-up faces")
    assert (info.name, info.dataset, info.substitute, info.sizes[0]) == (
        model.name,
        model.dataset,
        model.substitute,
        model.sizes[0],
    )
    written = pd.read_csv(csv.parent.parent / "scores.csv").sort_values("epoch", ignore_index=True)
    assert scores["epoch"].tolist() == [1, 2, 3, 4, 5, 6]
    assert set(written.columns) - set(scores.columns) == {"model"}  # which draw does not read
    for column in scores:
        got = scores[column]
        if column not in written:  # the training split's per-unit TAP: NaN, as make draws it
            assert column == "tap_ll_per_unit_train" and got.isna().all()
        elif column in ("ais_description", "pl_sites_drawn_for"):
            assert got.tolist() == written[column].tolist()
        else:
            assert np.allclose(got.astype(float), written[column].astype(float)), column
    assert made.params == {
        "scores_csv": str(csv.parent.parent / "scores.csv"),
        "ais": "Salakhutdinov, thinned schedule, 1451 betas, 100 runs",
        "pl_sites": 10,
    }

    again = redraw.redraw(table, "fig12")
    assert redraw.claim_differences(table, again.table) == ([], [])
    claims = again.table[again.table["kind"] == "claim"]
    held = dict(zip(claims["claim"], claims["held"].fillna(""), strict=True))
    assert (held["rise_together.test"], held["rise_together.train"]) == ("held", "not held")
    assert "substitute_data" in held
    detail = dict(zip(claims["claim"], claims["detail"], strict=True))["pl_sites"]
    assert "10 random sites of 36, drawn for every block of images" in detail
    drawn = [t[t["kind"] == "drawn"].reset_index(drop=True) for t in (made.table, again.table)]
    assert list(drawn[0].columns) == list(drawn[1].columns)
    for column in drawn[0]:
        made_column, redrawn = drawn[0][column], drawn[1][column]
        if pd.api.types.is_numeric_dtype(made_column):
            assert np.allclose(made_column, redrawn.astype(float), equal_nan=True), column
        else:
            assert made_column.fillna("").tolist() == redrawn.fillna("").tolist(), column
    assert again.figure.get_suptitle() == made.figure.get_suptitle()

    out = tmp_path / "redrawn"
    assert cli.main(["redraw-table", "--csv", str(csv), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fig12.csv", "fig12.png"]
    assert redraw.claim_differences(table, pd.read_csv(out / "fig12.csv")) == ([], [])


@pytest.mark.parametrize(
    "column", ["dataset", "ais_n_betas", "pl_sites", "pl_sites_drawn_for", "visible_units"]
)
def test_a_fig12_table_without_a_column_its_redraw_reads_is_refused(fig12_drawn, column):
    """A Fig. 12 CSV without a column ``from_table`` reads (as the committed paper-size one,
    written before the drawn rows carried the model and scoring settings) is refused by name."""
    _, csv = fig12_drawn
    older = redraw.read_table(csv).drop(columns=[column])
    with pytest.raises(common.MissingColumns, match=column):
        redraw.redraw(older, "fig12")


def test_claims_rejudge_keeps_a_fig12_written_before_its_settings_were_carried(
    fig12_drawn, tmp_path, capsys
):
    """``claims --rejudge``: a Fig. 12 CSV with all its columns is judged again by the current
    code (a turned verdict is turned back); one without them keeps its rows as written."""
    from tapmachine.figures import claims as claims_report

    _, csv = fig12_drawn
    table = pd.read_csv(csv)
    row = table.index[table["claim"] == "rise_together.train"][0]
    table.loc[row, "held"] = "held"
    for name, frame in (("full", table), ("older", table.drop(columns=["dataset"]))):
        (tmp_path / name).mkdir()
        frame.to_csv(tmp_path / name / "fig12.csv", index=False)

    def verdict(folder):
        rows = claims_report.collect(tmp_path / folder, rejudge=True)
        return rows[rows["claim"] == "rise_together.train"]["held"].iloc[0]

    assert verdict("full") == "not held"
    assert "kept as written" not in capsys.readouterr().err
    assert verdict("older") == "held"
    assert "fig12: claim rows kept as written, not judged again" in capsys.readouterr().err
