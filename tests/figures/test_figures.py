"""Figures 3-7 on tiny inputs, and the embedding helpers on degenerate sets."""

import math

import numpy as np
import pandas as pd
import pytest
import tiny_harvest

from tapmachine.figures import common, fig3, fig4, fig5, fig6, fig7, job_times
from tapmachine.figures import free_energy_shape as fes
from tapmachine.io.data import load_dataset
from tapmachine.tap_paper import embed


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_harvest.build(
        tmp_path_factory.mktemp("figures"),
        epochs=(1, 4, tiny_harvest.EPOCHS),
        substitute="made-up faces",
    )


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    """A second model for the figures of several columns: not binary, 12 hidden units, one
    label, a substitute dataset."""
    return tiny_harvest.build(
        tmp_path_factory.mktemp("second"),
        epochs=(2, tiny_harvest.EPOCHS),
        n_init=150,
        substitute="made-up faces",
        name="tiny_real",
        spec=tiny_harvest.REAL_SPEC,
    )


def _save(result, tmp_path, name):
    paths = common.save(
        result, tmp_path / f"{name}.png", tmp_path / f"{name}.pdf", tmp_path / f"{name}.csv"
    )
    for p in paths:
        assert p.exists() and p.stat().st_size > 0, p
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and paths[1].read_bytes()[:4] == b"%PDF"
    table = pd.read_csv(paths[2])
    assert {"drawn", "claim"} <= set(table["kind"])
    titles = " ".join(
        [result.figure.get_suptitle()]
        + [a.get_title() for a in result.figure.axes]
        + [sub.get_suptitle() for sub in result.figure.subfigs]
    )
    assert "tiny" in titles or "synth" in titles
    assert "(substitute)" in titles, "the dataset is marked substitute: the figure must say so"
    assert "made-up faces" in set(table["detail"].dropna()) | set(
        table.get("substitute", [])
    ) or any("made-up faces" in d for d in table["detail"].dropna()), (
        "and its CSV describes the substitute"
    )
    assert not list(tmp_path.glob(".*.tmp"))
    return table


def claims(table, name):
    return table[(table["kind"] == "claim") & (table["claim"] == name)]


def test_fig3(run, tmp_path):
    result = fig3.make([run["metrics"]], [run["model"]])
    table = _save(result, tmp_path, "fig3")
    assert len(table[table["kind"] == "drawn"]) == tiny_harvest.EPOCHS
    rule = claims(table, "breakpoint_epoch")
    assert rule["value"].iloc[0] == tiny_harvest.EPOCHS // 2
    assert "midpoint" in rule["detail"].iloc[0]
    assert result.models[0].train_run_id == ""  # trained without tracking
    assert claims(table, "epochs_without_solution").empty


def test_fig3_leaves_epochs_without_a_tap_solution_out(run, tmp_path):
    """An epoch whose evaluation found no TAP solution (tap_ll NaN) is a gap: counted in the
    table, left out of the slopes."""
    df = pd.read_csv(run["metrics"])
    df.loc[df["epoch"] == 3, ["tap_ll", "tap_ll_stderr"]] = math.nan
    metrics = tmp_path / "metrics.csv"
    df.to_csv(metrics, index=False)
    result = fig3.make([metrics], [run["model"]])
    table = _save(result, tmp_path, "fig3")
    assert list(claims(table, "epochs_without_solution")["value"]) == [1.0]
    found = df[df["epoch"] != 3]
    b = tiny_harvest.EPOCHS // 2
    early = found[found["epoch"] <= b]
    slope, _ = fig3.segment_fit(early["epoch"].to_numpy(float), early["tap_ll"].to_numpy(float))
    assert claims(table, "slope_before_breakpoint")["value"].iloc[0] == pytest.approx(slope)
    assert np.isfinite(claims(table, "slope_ratio_early_over_late")["value"].iloc[0])


def test_fig3_diagnostics_and_a_falling_curve(run, tmp_path):
    """The per-epoch diagnostics of metrics.csv reach the CSV; a curve that falls
    after the breakpoint is not 'still rising at a near-constant slope'; judged again from its
    CSV, the table gives the same rows."""
    df = pd.read_csv(run["metrics"])
    n = len(df)
    b = tiny_harvest.EPOCHS // 2
    df["tap_ll"] = np.where(df["epoch"] <= b, 0.1 * df["epoch"], 0.1 * b - 0.01 * (df["epoch"] - b))
    df["tap_validity"] = np.linspace(0.2, 1.4, n)
    df["tap_validity_median"] = df["tap_validity"] / 2
    df["tap_validity_rho"] = df["tap_validity"] * 0.9
    df["tap_validity_rho_median"] = df["tap_validity_rho"] / 2
    df["train_unconverged_steps"] = [0] * (n - 1) + [7]
    df["train_converged_step_share"] = [1.0] * (n - 1) + [0.5]
    df["tap_ll_first_pass"] = df["tap_ll"] - np.where(df["epoch"] == n, 0.05, 0.0)
    df["n_unique_retry_only"] = [0] * (n - 1) + [2]
    metrics = tmp_path / "metrics.csv"
    df.to_csv(metrics, index=False)
    result = fig3.make([metrics], [run["model"]])
    table = _save(result, tmp_path, "fig3")
    drawn = table[table["kind"] == "drawn"].sort_values("epoch")
    for column in fig3.DIAGNOSTICS:
        assert np.allclose(drawn[column].to_numpy(float), df[column].to_numpy(float))
    late = claims(table, "slope_after_breakpoint")
    assert late["value"].iloc[0] == pytest.approx(-0.01) and late["held"].iloc[0] == "not held"
    assert claims(table, "peak_epoch")["value"].iloc[0] == b
    first_over = int(df["epoch"][df["tap_validity_rho"] >= 1].min())
    assert claims(table, "epochs_tap_validity_at_least_1")["value"].iloc[0] == int(
        (df["tap_validity"] >= 1).sum()
    )
    assert claims(table, "epochs_tap_validity_rho_at_least_1")["value"].iloc[0] == int(
        (df["tap_validity_rho"] >= 1).sum()
    )
    assert claims(table, "max_tap_validity_rho")["value"].iloc[0] == pytest.approx(1.4 * 0.9)
    assert claims(table, "epochs_with_unconverged_training_steps")["value"].iloc[0] == 1
    assert claims(table, "epochs_with_second_pass_fixed_points")["value"].iloc[0] == 1
    converged = claims(table, "training_steps_converged")
    assert converged["value"].iloc[0] == pytest.approx(1 - 0.5 / n)
    assert (
        converged["held"].iloc[0] == "not held" and f"at epoch {n}" in converged["detail"].iloc[0]
    )
    rho = claims(table, "epochs_tap_validity_rho_at_least_1")["detail"].iloc[0]
    assert rho.endswith(f"from epoch {first_over}")
    unconverged = claims(table, "epochs_with_unconverged_training_steps")["detail"].iloc[0]
    assert unconverged.endswith(f"from epoch {n}")
    again = fig3.rejudge(table)
    mine, theirs = (
        t[t["kind"] == "claim"][["claim", "value", "held"]].fillna("").reset_index(drop=True)
        for t in (table, again)
    )
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)
    df["train_converged_step_share"] = 1.0
    df.to_csv(metrics, index=False)
    table = _save(fig3.make([metrics], [run["model"]]), tmp_path, "fig3")
    assert claims(table, "training_steps_converged")["held"].iloc[0] == "held"


def test_fig3_draws_the_scored_epochs_and_counts_every_epochs_training_steps(run, tmp_path):
    """A model scored every other epoch (``eval.every`` 2: its other rows have no ``n_unique``):
    the curve and its claims take the scored epochs, with no gap counted; the CSV keeps every
    epoch with ``evaluated`` 0 or 1, the training steps' claims count every epoch, and the
    claims judged again from the CSV are the same rows."""
    df = pd.read_csv(run["metrics"])
    n = len(df)
    skipped = df["epoch"] % 2 == 1
    evaluation = [c for c in df.columns if c.startswith(("tap_", "n_", "log_z", "mean_it"))]
    evaluation += ["retry_tol"] if "retry_tol" in df else []
    df.loc[skipped, evaluation] = math.nan
    df["train_unconverged_steps"] = [0] * (n - 1) + [3]
    df["train_converged_step_share"] = [0.5] + [1.0] * (n - 1)
    metrics = tmp_path / "metrics.csv"
    df.to_csv(metrics, index=False)
    table = _save(fig3.make([metrics], [run["model"]]), tmp_path, "fig3")
    drawn = table[table["kind"] == "drawn"].sort_values("epoch")
    assert list(drawn["epoch"]) == list(df["epoch"])
    assert list(drawn["evaluated"]) == list((~skipped).astype(float))
    assert claims(table, "epochs_without_solution").empty
    scored = df[~skipped]
    rise = claims(table, "ll_increase_first_to_last")["value"].iloc[0]
    assert rise == pytest.approx(scored["tap_ll"].iloc[-1] - scored["tap_ll"].iloc[0])
    converged = claims(table, "training_steps_converged")
    assert converged["value"].iloc[0] == pytest.approx(1 - 0.5 / n)  # epoch 1 was not scored
    assert f"over {n} epochs" in converged["detail"].iloc[0]
    steps = claims(table, "epochs_with_unconverged_training_steps")["detail"].iloc[0]
    assert steps.startswith(f"of {n};") and steps.endswith(f"from epoch {n}")
    again = fig3.rejudge(table)
    mine, theirs = (
        t[t["kind"] == "claim"][["claim", "value", "held"]].fillna("").reset_index(drop=True)
        for t in (table, again)
    )
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)
    infos, curves, _ = fig3.from_table(table)
    assert list(curves[0]["evaluated"]) == list((~skipped).astype(float))


def test_fig3_exact_curve_judges_the_rise_on_the_exact_values(run, tmp_path):
    """An exact curve that falls while TAP's estimate rises: the exact rows say not held, the
    TAP excess is the largest difference at a shared epoch, the CSV carries the exact values
    at their epochs only, and a table judged again from its CSV gives the same rows."""
    df = pd.read_csv(run["metrics"])
    epochs = df["epoch"].to_numpy(int)
    chosen = [int(epochs[0]), int(epochs[len(epochs) // 2]), int(epochs[-1])]
    tap_at = dict(zip(epochs, df["tap_ll"], strict=True))
    exact = pd.DataFrame(
        {
            "model": "tiny",
            "epoch": chosen,
            "exact_ll": [tap_at[chosen[0]] - 0.01 - 0.02 * i for i in range(3)],
            "exact_ll_stderr": 0.001,
        }
    )
    exact_csv = tmp_path / "exact.csv"
    exact.to_csv(exact_csv, index=False)
    result = fig3.make([run["metrics"]], [run["model"]], [exact_csv])
    table = _save(result, tmp_path, "fig3")
    drawn = table[table["kind"] == "drawn"].set_index("epoch")
    assert drawn["exact_ll"].notna().sum() == 3
    assert np.allclose(drawn.loc[chosen, "exact_ll"], exact["exact_ll"])
    rise = claims(table, "exact_ll_increase_first_to_last")
    falls = exact["exact_ll"].iloc[-1] - exact["exact_ll"].iloc[0]
    assert rise["value"].iloc[0] == pytest.approx(falls) and rise["held"].iloc[0] == "not held"
    gap = claims(table, "tap_minus_exact_largest")
    excess = [tap_at[e] - x for e, x in zip(chosen, exact["exact_ll"], strict=True)]
    assert gap["value"].iloc[0] == pytest.approx(max(excess))
    assert gap["epoch"].iloc[0] == chosen[int(np.argmax(excess))]
    assert claims(table, "exact_peak_epoch")["value"].iloc[0] == chosen[0]
    again = fig3.rejudge(table)
    mine, theirs = (
        t[t["kind"] == "claim"][["claim", "value", "held"]].fillna("").reset_index(drop=True)
        for t in (table, again)
    )
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)

    assert claims(table, "ais_vs_exact").empty  # an exact curve computed without AIS
    for z, verdict in (([0.5, -4.0, 1.0], "not held"), ([0.5, -1.0, 2.9], "held")):
        exact.assign(ais_z=z).to_csv(exact_csv, index=False)
        table = _save(fig3.make([run["metrics"]], [run["model"]], [exact_csv]), tmp_path, "fig3")
        row = claims(table, "ais_vs_exact")
        assert row["value"].iloc[0] == pytest.approx(max(map(abs, z)))
        assert (
            row["held"].iloc[0] == verdict
            and row["epoch"].iloc[0] == chosen[int(np.argmax(np.abs(z)))]
        )
        again = fig3.rejudge(table)
        assert claims(again, "ais_vs_exact")["held"].iloc[0] == verdict

    exact.assign(model="other").to_csv(exact_csv, index=False)
    with pytest.raises(common.FigureError, match="exact curve of 'other', which fig3 does not"):
        fig3.make([run["metrics"]], [run["model"]], [exact_csv])


def test_fig3_slopes():
    assert fig3.breakpoint_epoch(100) == (20, "epoch 20 (paper)")
    e = np.arange(1, 101, dtype=float)
    ll = np.where(e <= 20, 0.1 * e, 2.0 + 0.01 * (e - 20))
    slope_late, r2 = fig3.segment_fit(e[e >= 20], ll[e >= 20])
    assert slope_late == pytest.approx(0.01) and r2 == pytest.approx(1.0)
    assert math.isnan(fig3.segment_fit(e[:1], ll[:1])[0])


def test_fig3_breakpoint_of_a_run_longer_than_the_papers_sits_at_the_same_share_of_training():
    """The faces substitute trains 15,000 epochs for CBCL's 500: the paper's epoch 20 is its
    epoch 600, and the early slope is fitted over the scored epochs before it."""
    b, rule = fig3.breakpoint_epoch(15000, 500)
    assert b == 600 and "scaled" in rule
    assert fig3.breakpoint_epoch(500, 500) == (20, "epoch 20 (paper)")
    e = np.arange(30, 15001, 30, dtype=float)
    ll = np.where(e <= 600, 0.01 * e, 6.0 + 0.0001 * (e - 600))
    rows = {r["claim"]: r for r in fig3._claims("faces", e, ll, 500)}
    assert rows["breakpoint_epoch"]["value"] == 600
    assert rows["slope_before_breakpoint"]["value"] == pytest.approx(0.01)
    assert rows["slope_after_breakpoint"]["value"] == pytest.approx(0.0001)
    assert rows["slope_ratio_early_over_late"]["held"] == "held"
    assert fig3.breakpoint_epoch(200)[0] == 40  # binary MNIST at twice the paper's epochs


def test_fig4(run, tmp_path):
    result = fig4.make([run["model"]], [run["data"]], n_images=100, per_group=4)
    table = _save(result, tmp_path, "fig4")
    drawn = table[table["kind"] == "drawn"]
    assert sorted(drawn["group"].unique()) == sorted(fig4.GROUPS)
    assert (drawn.groupby("group").size() == 4).all()
    act = drawn[drawn["group"] == "most active"]["mean_activation"].to_numpy()
    assert (np.diff(act) <= 0).all()


def test_spread_l01_ranks_localised_fields_first():
    W = np.zeros((16, 2))
    W[3, 0] = 2.0  # one pixel
    W[:, 1] = 0.5  # every pixel
    s = fig4.spread_l01(W)  # the paper's measure, on the raw fields
    assert s[0] == pytest.approx(2.0**0.1) and s[1] == pytest.approx(16 * 0.5**0.1)
    peak = fig4.spread_l01(W, scale="peak")
    assert peak[0] == pytest.approx(1.0) and peak[1] == pytest.approx(16.0)


def test_spread_measure_on_hand_made_fields():
    """A localised blob and a spread stroke pattern on a 28 x 28 image, ranked as the paper's
    l_0.1 definition sum_i |w_i|^0.1 on the raw fields says (exact values by hand)."""
    yy, xx = np.mgrid[:28, :28]
    blob = np.where((yy - 10) ** 2 + (xx - 12) ** 2 <= 4, 0.8, 0.0)  # 13 pixels of 0.8
    stroke = np.where((xx % 4 == 0), 0.05, -0.05)  # every pixel, small weights of both signs
    W = np.stack([stroke.ravel(), blob.ravel()], axis=1)
    s = fig4.spread_l01(W)
    assert s[1] == pytest.approx(13 * 0.8**0.1)
    assert s[0] == pytest.approx(784 * 0.05**0.1)
    assert list(np.argsort(s)) == [1, 0]  # localised first
    support = fig4.effective_support(W)
    assert support[1] == pytest.approx(13 / 784) and support[0] == pytest.approx(1.0)
    # Raw and peak-scaled measures can disagree: a flat field of tiny amplitude (784 x
    # (1e-20)^0.1 = 7.8 < 13 x 0.8^0.1 = 12.7) is "more localised" than the blob under the raw
    # measure, while peak scaling calls it the most spread field possible.
    faint = np.full(784, 1e-20)
    raw = fig4.spread_l01(np.stack([faint, blob.ravel()], axis=1))
    peak = fig4.spread_l01(np.stack([faint, blob.ravel()], axis=1), scale="peak")
    assert raw[0] < raw[1] and peak[0] > peak[1]
    with pytest.raises(common.FigureError, match="spread"):
        fig4.spread_l01(W, scale="unit")


def test_support_fraction_is_scale_free_and_raw_spread_is_not():
    """Scaling W (as a whole or field by field) leaves the support fraction as it is and
    multiplies the raw l_0.1 spread by s^0.1."""
    W = np.random.default_rng(4).normal(size=(49, 6)) * np.linspace(0.1, 3.0, 6)
    base = fig4.support_fraction(W)
    for s in (1e-3, 0.5, 7.0):
        assert fig4.support_fraction(s * W) == pytest.approx(base, rel=1e-12)
        assert fig4.spread_l01(s * W) == pytest.approx(s**0.1 * fig4.spread_l01(W), rel=1e-12)
    columns = np.array([0.01, 1.0, 3.0, 0.2, 5.0, 40.0])
    assert fig4.support_fraction(W * columns) == pytest.approx(base, rel=1e-12)


def test_fig4_trend_judged_on_both_measures(run, tmp_path):
    """'More localisation with larger Nh' on the raw spread and on the support fraction, per
    dataset: weights that grow with Nh make the raw spread fall while the fields' shape, and so
    the support fraction, stays: one verdict held, the other not."""
    models = [("d", 25, 0.70, 0.40), ("d", 100, 0.65, 0.40 + 1e-3), ("d", 500, 0.60, 0.41)]
    rows = {r["claim"]: r for r in fig4.trend_claims(models)}
    raw = rows["spearman_hidden_units_vs_median_spread"]
    scale_free = rows["spearman_hidden_units_vs_median_support_fraction"]
    assert raw["value"] == pytest.approx(-1.0) and raw["held"] == "held"
    assert scale_free["value"] == pytest.approx(1.0) and scale_free["held"] == "not held"
    assert all(r["held"] == "" for r in fig4.trend_claims(models[:2]))  # too few models
    table = _save(
        fig4.make([run["model"]], [run["data"]], n_images=100, per_group=4), tmp_path, "f4"
    )
    again = fig4.rejudge(table)
    assert list(
        claims(again, "spearman_hidden_units_vs_median_support_fraction")["held"].fillna("")
    ) == [""]
    assert len(again[again["kind"] == "claim"]) == len(table[table["kind"] == "claim"])


def test_fig5(run, tmp_path):
    result = fig5.make([str(p) for p in reversed(run["solutions"])], slices=None)
    table = _save(result, tmp_path, "fig5")
    assert claims(table, "n_unique_first_epoch")["value"].iloc[0] == 1
    fractions = claims(table, "unique_fraction")
    assert len(fractions) == 3 and (fractions["value"] <= 1).all()
    # Modes are counted where an epoch has >= MODES_MIN_SOLUTIONS unique solutions, and the
    # verdict asks two at every such epoch.
    n_modes = claims(table, "n_modes")
    counted = n_modes["value"].dropna()
    assert len(n_modes) == 3
    unique = claims(table, "n_unique")["value"].to_numpy()
    assert len(counted) == int((unique >= fes.MODES_MIN_SOLUTIONS).sum())
    summary = claims(table, "epochs_with_two_or_more_modes")
    assert summary["value"].iloc[0] == int((counted >= 2).sum())
    assert bool(summary["held"].iloc[0] == "held") == (len(counted) > 0 and (counted >= 2).all())
    # The Helmholtz estimate's parts of eq. (36), per epoch, add up to it.
    helm = claims(table, "helmholtz_estimate").set_index("epoch")["value"]
    parts = [claims(table, f"helmholtz_part_{n}").set_index("epoch")["value"] for n in fig5._PARTS]
    assert len(parts[0]) == 3
    np.testing.assert_allclose(sum(parts), helm, rtol=0, atol=1e-9)
    assert len(claims(table, "helmholtz_rises_then_declines")) == 1
    # and as the binary RBM's usual free energy: shifted per epoch by the units' sum of ln Z_B
    from tapmachine.tap_paper import harvest

    shift = {
        int(z["epoch"]): z["energy_normaliser"]
        for z in (harvest.load_solutions(p) for p in run["solutions"])
    }
    energy = claims(table, "helmholtz_estimate_energy").set_index("epoch")["value"]
    assert len(energy) == 3 and all(np.isfinite(list(shift.values())))
    for e, value in energy.items():
        assert value == pytest.approx(helm[e] - shift[int(e)], abs=1e-9)
    assert len(claims(table, "helmholtz_rises_then_declines_energy")) == 1
    with pytest.raises(common.FigureError, match="not harvested"):
        fig5.make(run["solutions"], slices=[2])
    # The tiny harvest (tol 1e-12) has no near copies, so no row calls its counts inflated.
    near = claims(table, "near_copy_fraction")
    assert len(near) == 3 and (near["value"].dropna() == 0).all()
    assert claims(table, "counts_inflated_by_tolerance").empty
    (row,) = fig5._inflation_claims("m", [0.1, 0.8, np.nan], 1e-8, 0.1)
    assert row["value"] == 0.8 and "tol 1e-08" in row["detail"]
    assert fig5._inflation_claims("m", [0.1, 0.4], 1e-8, 0.1) == []
    assert fig5._inflation_claims("m", [np.nan, np.nan], 1e-8, 0.1) == []


def test_band_counting_and_kde():
    assert fes.count_bands([1.0, 1.1, 1.05, 5.0, 5.1, 4.9])[0] == 2
    assert fes.count_bands([3.0, 3.0])[0] == 1
    assert fes.count_bands([])[0] == 0
    # A lone outlier (< 5% of the solutions) is not a band.
    assert fes.count_bands(list(np.linspace(0, 1, 40)) + [10.0])[0] == 1
    grid = np.linspace(-5, 5, 2001)
    kde = fes.gaussian_kde(np.random.default_rng(0).normal(size=200), grid)
    assert kde.sum() * (grid[1] - grid[0]) == pytest.approx(1.0, abs=1e-3)
    assert fes.gaussian_kde([2.0, 2.0, 2.0], grid) is None


def test_mode_counting_finds_the_modes_of_a_mixture():
    rng = np.random.default_rng(0)
    one = rng.normal(0.0, 1.0, 2000)
    two = np.concatenate([rng.normal(-3.0, 1.0, 1000), rng.normal(3.0, 1.0, 1000)])
    assert len(fes.count_modes(one)) == 1
    found = fes.count_modes(two)
    assert len(found) == 2 and found[0] == pytest.approx(-3.0, abs=0.4)
    assert found[1] == pytest.approx(3.0, abs=0.4)
    # Components closer than about two widths fuse into one peak: one mode.
    assert (
        len(fes.count_modes(np.concatenate([rng.normal(-0.8, 1, 1000), rng.normal(0.8, 1, 1000)])))
        == 1
    )
    # A side peak under a fifth of the main one is not a significant mode; at a third it is.
    small = np.concatenate([rng.normal(0.0, 1.0, 1900), rng.normal(8.0, 1.0, 100)])
    third = np.concatenate([rng.normal(0.0, 1.0, 1500), rng.normal(8.0, 1.0, 500)])
    assert len(fes.count_modes(small)) == 1 and len(fes.count_modes(third)) == 2
    assert fes.count_modes([2.0, 2.0, 2.0]) == [] and fes.count_modes([1.0]) == []


def test_fig5_modes_at_some_epochs_only_is_not_held():
    """'Two significant modes at all training epochs': two modes at some epochs and one at the
    others gives not held, for bands and modes alike; two at every epoch gives held."""
    rng = np.random.default_rng(1)
    two = np.concatenate([rng.normal(-10.0, 1.0, 200), rng.normal(10.0, 1.0, 200)])
    one = rng.normal(0.0, 1.0, 400)
    ones = np.ones(400, dtype=int)
    mixed = [fes.epoch_shape(v, ones) for v in (two, one, two)]
    assert [len(s["modes"]) for s in mixed] == [2, 1, 2]
    assert [s["n_bands"] for s in mixed] == [2, 1, 2]
    rows = fig5.verdict_claims("m", [1, 2, 3], [400] * 3, [0.04] * 3, mixed, [0.0] * 3)
    verdicts = {r["claim"]: (r["value"], r["held"]) for r in rows}
    for name in ("bands", "modes", "modes_weighted"):
        assert verdicts[f"epochs_with_two_or_more_{name}"] == (2, "not held")
    always = [fes.epoch_shape(two, ones)] * 3
    rows = fig5.verdict_claims("m", [1, 2, 3], [400] * 3, [0.04] * 3, always, [0.0] * 3)
    assert {r["held"] for r in rows if r["claim"].startswith("epochs_with_two")} == {"held"}
    # An epoch with too few solutions to count is left out, not counted against the claim.
    few = fes.epoch_shape([1.0, 2.0], [1, 1])
    assert few["modes"] is None and few["modes_weighted"] is None
    rows = fig5.verdict_claims(
        "m", [1, 2, 3], [2, 400, 400], [0.01] * 3, [few] + always[:2], [0.0] * 3
    )
    assert {r["held"] for r in rows if r["claim"].startswith("epochs_with_two")} == {"held"}
    rows = fig5.verdict_claims("m", [1], [2], [0.01], [few], [0.0])
    assert {r["held"] for r in rows if r["claim"].startswith("epochs_with_two")} == {""}


def test_fig5_free_energy_trend_is_judged_as_worded():
    """'A marked increase early, then a gradual decline': held for a peak at epoch 10 of 100
    followed by a fall; not held for a late rise above the early peak (the peak is then last),
    for a peak past the first quarter, or for no rise at all. A rise after the lowest point is
    split into the parts of eq. (36)."""
    epochs = [1, 2, 5, 10, 20, 40, 60, 80, 100]

    def judge(helm, parts=None):
        rows = {r["claim"]: r for r in fig5.trend_claims("m", epochs, helm, parts)}
        return rows, rows["helmholtz_rises_then_declines"]["held"]

    rows, held = judge([1.0, 3.0, 6.0, 8.0, 7.0, 5.0, 4.0, 3.5, 3.0])
    assert held == "held" and rows["helmholtz_peak_epoch"]["value"] == 10
    assert "helmholtz_late_change" not in rows  # the lowest point is the last
    late = [5.0, 10.0, 6.0, -12.0, -26.0, -25.0, -8.0, 14.0, 34.0]  # the paper run's shape
    parts = {
        "site_visible": [0.0] * 9,
        "site_hidden": [0.0] * 8 + [10.0],
        "mean_field": [0.0] * 4 + [-26.0, -25.0, -8.0, 14.0, 24.0],
        "onsager": [0.0] * 9,
    }
    rows, held = judge(late, parts)
    assert held == "not held" and rows["helmholtz_peak_epoch"]["value"] == 100
    change = rows["helmholtz_late_change"]
    assert change["value"] == pytest.approx(60.0)
    assert "epoch 20" in change["detail"] and "mean_field +50" in change["detail"]
    assert "site_hidden +10" in change["detail"]
    assert judge([1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 8.0, 7.0, 6.0])[1] == "not held"  # peak at 40
    assert judge([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])[1] == "not held"  # no rise
    assert fig5.trend_claims("m", [1, 2], [1.0, 2.0]) == []
    named = fig5.trend_claims("m", epochs, late, None, "_energy", " (usual RBM energy)")
    assert [r["claim"] for r in named] == [
        "helmholtz_peak_epoch_energy",
        "helmholtz_rises_then_declines_energy",
    ]
    assert "(usual RBM energy)" in named[1]["detail"]


def test_fig5_modes_weighted_by_basin_size():
    """Two clusters of unique solutions, one reached by almost every initialisation: two modes
    counting each solution once, one weighting each by its basin."""
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.normal(-3.0, 1.0, 200), rng.normal(3.0, 1.0, 200)])
    basins = np.concatenate([np.full(200, 50), np.ones(200, dtype=int)])
    assert len(fes.count_modes(values)) == 2
    weighted = fes.count_modes(values, weights=basins)
    assert len(weighted) == 1 and weighted[0] == pytest.approx(-3.0, abs=0.5)
    # Equal weights are the unweighted count.
    assert fes.count_modes(values, weights=np.full(400, 7)) == pytest.approx(
        fes.count_modes(values)
    )


def test_fig5_rejudge_recomputes_the_same_rows(run, tmp_path):
    """Judged again from its own CSV, a Fig. 5 table gives the rows and verdicts it was drawn
    with."""
    table = _save(fig5.make(run["solutions"]), tmp_path, "fig5")
    again = fig5.rejudge(table)

    def rows(t):
        c = t[t["kind"] == "claim"]
        return {
            (r["claim"], -1 if pd.isna(r["epoch"]) else int(r["epoch"])): (
                float(r["value"]),
                "" if pd.isna(r["held"]) else r["held"],
            )
            for _, r in c.iterrows()
        }

    mine, theirs = rows(table), rows(again)
    assert mine.keys() == theirs.keys()
    for key, (value, held) in mine.items():
        assert theirs[key][0] == pytest.approx(value, nan_ok=True) and theirs[key][1] == held


def test_fig6_isomap_with_single_solution_epochs(run, tmp_path):
    result = fig6.make(run["solutions"], "isomap", n_neighbors=10)
    table = _save(result, tmp_path, "fig6")
    method = claims(table, "embedding_method")["detail"].iloc[0]
    assert "pca" in method  # the last epoch has fewer than 5 solutions: explicit fallback
    first = claims(table, "mean_pairwise_rms_distance")
    assert first["value"].iloc[0] == 0.0  # a single solution at epoch 1
    # Fitted on one epoch that holds a single solution: still draws.
    single = fig6.make(run["solutions"][:1], "isomap")
    assert single.params["embedding_used"] == {"tiny": "pca"}
    assert single.figure.get_suptitle().startswith(
        "Fig. 6: TAP solutions (a_v, a_h) embedded in 2-D by PCA"
    )


def test_fig3_title_gives_the_range_of_epochs_run_per_paper_size():
    runs = [("binary_mnist", 10), ("binary_mnist", 20), ("real_mnist", 8), ("real_faces", 200)]
    assert fig3.size_line(runs) == "REDUCED SIZE (8 to 20 of 100 epochs; real_faces: 200 of 500)"
    assert fig3.size_line([("binary_mnist", 8), ("real_faces", 500)]) == (
        "REDUCED SIZE (8 of 100 epochs)"
    )
    assert fig3.size_line([("binary_mnist", 100), ("real_faces", 500)]) == ""


def test_fig6_title_names_each_columns_embedding():
    assert fig6.embedding_words(["isomap", "isomap"]) == "Isomap"
    assert fig6.embedding_words(["isomap", "isomap", "pca"]) == "Isomap in (a, b), PCA in (c)"
    assert fig6.embedding_words(["pca", "umap", "pca"]) == "PCA in (a, c), UMAP in (b)"


def test_free_energy_follows_position_verdict():
    """Free energies equal to the first embedding coordinate follow the position; shuffled ones
    do not; an epoch with too few solutions for local neighbourhoods is not judged."""
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(200, 2))
    follows = fig6.neighbour_correlation(Y, Y[:, 0])
    shuffled = fig6.neighbour_correlation(Y, rng.permutation(Y[:, 0]))
    assert follows > 0.9 and abs(shuffled) < 0.3

    def verdict(values, sizes):
        points = [(e, np.zeros((n, 3)), None, None) for e, n in enumerate(sizes, start=1)]
        return fig6.follows_position_claim(points, values, "m")

    assert verdict([follows, follows], [200, 200])["held"] == "held"
    assert verdict([follows, shuffled], [200, 200])["held"] == "not held"
    few = verdict([-1.0, follows], [4, 200])  # 4 solutions: k-NN of each are the other 3
    assert few["held"] == "held" and few["value"] == pytest.approx(follows)
    assert verdict([-1.0], [4])["held"] == ""


def test_fig7_all_labels_and_a_subset(run, tmp_path):
    result = fig7.make(run["solutions"], run["data"], digits=None, n_images=None)
    table = _save(result, tmp_path, "fig7")
    assert claims(table, "n_initialisations")["value"].iloc[0] == 200
    assert "isomap" in claims(table, "embedding_method")["detail"].iloc[0]
    titles = [ax.get_title() for ax in result.figure.axes if ax.get_title()]
    for count, noun in (t.split(": ")[1].split() for t in titles):
        assert noun == ("solution" if count == "1" else "solutions")
    subset = fig7.make(run["solutions"], run["data"], digits=[0, 2], n_images=100)
    labels = subset.table[
        (subset.table["kind"] == "drawn") & (subset.table["point"] == "initialisation")
    ]
    assert set(labels["label"].astype(int)) <= {0, 2}
    with pytest.raises(common.FigureError, match="exceeds"):
        fig7.make(run["solutions"], run["data"], n_images=500)
    with pytest.raises(common.FigureError, match="no initialisation"):
        fig7.make(run["solutions"], run["data"], digits=[9])


def _column_titles(result) -> list[str]:
    return [sub.get_suptitle() for sub in result.figure.subfigs]


@pytest.mark.slow  # three harvests of three models: about 10 s
def test_figs_5_to_7_draw_a_column_per_model_and_judge_each(run, second, tmp_path):
    """Two models' harvests make two columns (in the order given), each titled with its model
    and its shortfall, the substitute named; every claim row names its model, each model's
    verdicts judged on its own rows; the titles read (legibility) at two lines at most."""
    from tapmachine.figures import legibility

    files = [*map(str, run["solutions"]), *map(str, second["solutions"])]
    r5 = fig5.make(files, per_model={"tiny_real": {"slices": [tiny_harvest.EPOCHS]}})
    t5 = _save(r5, tmp_path, "fig5")
    titles = _column_titles(r5)
    assert [t.split("\n")[0] for t in titles] == [
        "(a) tiny on synth (substitute)",
        "(b) tiny_real on synth_one (substitute)",
    ]
    assert titles[0].split("\n")[1] == "8 of 100 epochs, 200 of 10,000 inits"
    assert r5.params["slices"] == {"tiny": [1, 4, 8], "tiny_real": [8]}
    assert r5.params["epochs"] == {"tiny": [1, 4, 8], "tiny_real": [2, 8]}
    rows = t5[t5["kind"] == "claim"]
    assert set(rows["model"]) == {"tiny", "tiny_real"}
    for model, epochs in r5.params["epochs"].items():
        mine = rows[rows["model"] == model]
        assert sorted(mine[mine["claim"] == "n_unique"]["epoch"].astype(int)) == epochs
        first = mine[mine["claim"] == "n_unique_first_epoch"]["value"].iloc[0]
        assert first == mine[mine["claim"] == "n_unique"]["value"].iloc[0]
    units = rows.set_index(["model", "claim"])["value"]
    assert units["tiny", "binary_units"] == 1 and units["tiny_real", "binary_units"] == 0
    assert units["tiny_real", "hidden_units"] == 12
    # The paper's two modes are binary MNIST's: no verdict on the other units.
    modes = rows[rows["claim"] == "epochs_with_two_or_more_modes"].set_index("model")
    assert pd.isna(modes.loc["tiny_real", "held"])
    assert "not binary" in modes.loc["tiny_real", "detail"]
    # Judging again from the CSV gives the same rows, model by model.
    keys = ["model", "claim", "held"]
    again = fig5.rejudge(t5)
    again = again[again["kind"] == "claim"][keys].astype(object).fillna("")
    assert again.values.tolist() == rows[keys].astype(object).fillna("").values.tolist()

    r6 = fig6.make(files, "isomap")
    t6 = _save(r6, tmp_path, "fig6")
    assert len(_column_titles(r6)) == 2
    follows = t6[(t6["kind"] == "claim") & (t6["claim"] == "correlation_falls_first_to_last")]
    assert list(follows["model"]) == ["tiny", "tiny_real"]

    per_model = {"tiny_real": {"digits": None, "n_images": None}}
    r7 = fig7.make(files, [run["data"], second["data"]], [0, 2], 100, per_model=per_model)
    t7 = _save(r7, tmp_path, "fig7")
    assert r7.params["digits"] == {"tiny": [0, 2], "tiny_real": None}
    inits = t7[(t7["kind"] == "claim") & (t7["claim"] == "n_initialisations")]
    assert dict(zip(inits["model"], inits["value"], strict=True))["tiny_real"] == 150
    purity = t7[(t7["claim"] == "basin_label_purity") & (t7["model"] == "tiny_real")]
    assert (purity["held"].fillna("") == "").all()  # one label: pure in any basin, no verdict
    with pytest.raises(common.FigureError, match="no dataset file for tiny_real"):
        fig7.make(files, [run["data"]])
    for result in (r5, r6, r7):
        assert legibility.problems(result.figure) == []


def test_cli_figure_fig5_and_umap_fig6(run, tmp_path, monkeypatch):
    from tapmachine.pipeline import cli

    monkeypatch.chdir(tmp_path)
    for fig, extra in (("fig5", []), ("fig6", ["--embedding", "umap", "--n-neighbors", "3"])):
        args = ["figure", fig, "--solutions", *map(str, run["solutions"]), *extra]
        args += ["--png", f"{fig}.png", "--pdf", f"{fig}.pdf", "--csv", f"{fig}.csv"]
        assert cli.main(args) == 0
        assert (tmp_path / f"{fig}.png").exists()


@pytest.mark.parametrize("method", ["isomap", "umap"])
def test_embed_degenerate_sets(method):
    same = np.ones((7, 5))
    Y, (other,), info = embed.embed(same, [np.zeros((2, 5))], method=method)
    assert Y.shape == (7, 2) and np.allclose(Y, 0) and info["method"] == "pca"
    assert other.shape == (2, 2) and np.isfinite(other).all()
    two = np.array([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    Y, (other, empty), info = embed.embed(two, [two, np.empty((0, 3))], method=method)
    assert info["method"] == "pca" and other.shape == (2, 2) and empty.shape == (0, 2)
    np.testing.assert_allclose(other, Y)
    assert np.linalg.norm(Y[0] - Y[1]) == pytest.approx(math.sqrt(2))
    with pytest.raises(ValueError, match="NaN"):
        embed.embed(np.full((3, 2), np.nan), method=method)


def test_isomap_with_fewer_points_than_neighbours_and_duplicates():
    rng = np.random.default_rng(1)
    X = rng.random((7, 4))
    X = np.concatenate([X, X[:3]])  # exact duplicates
    Y, (other,), info = embed.embed(X, [rng.random((4, 4))], method="isomap", n_neighbors=10)
    assert info["method"] == "isomap" and info["n_neighbors"] == 6 and info["n_distinct"] == 7
    np.testing.assert_allclose(Y[7:], Y[:3])
    assert np.isfinite(other).all() and other.shape == (4, 2)


@pytest.mark.slow
def test_umap_embeds_and_maps_new_points():
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(0, 0.1, (15, 6)), rng.normal(3, 0.1, (15, 6))])
    Y, (other,), info = embed.embed(X, [X[:2] + 0.01], method="umap", n_neighbors=5, seed=1)
    assert info["method"] == "umap" and Y.shape == (30, 2) and other.shape == (2, 2)
    # The two clusters stay apart.
    gap = np.linalg.norm(Y[:15].mean(0) - Y[15:].mean(0))
    assert gap > 3 * max(Y[:15].std(0).max(), Y[15:].std(0).max())


def test_claim_verdicts_and_size_notes():
    assert common.claim("x", 1.0, held=True)["held"] == "held"
    assert common.claim("x", 1.0, held=False)["held"] == "not held"
    assert common.claim("x", 1.0)["held"] == ""
    assert common.size_note(100, 10000) == ""
    note = common.size_note(20, 5000)
    assert "20 of 100 epochs" in note and "5,000 of 10,000 initialisations" in note


def test_fraction_localised_on_hand_made_fields():
    """A blob on 13 pixels over a faint background (2% of its peak, as trained fields keep) is
    localised, a stroke pattern over the whole image is not; the threshold is the part of the
    image the training images occupy (their mean's support: 200 of 784 pixels here, exactly)."""
    yy, xx = np.mgrid[:28, :28]
    on = (yy - 10) ** 2 + (xx - 12) ** 2 <= 4  # 13 pixels
    blob = np.where(on, 0.8, 0.0)
    g = np.random.default_rng(0)
    background = 0.016 * np.sign(g.standard_normal((28, 28)))  # 2% of the peak, both signs
    faint_blob = np.where(on, 0.8, background)
    stroke = np.where(xx % 4 == 0, 0.05, -0.05)
    W = np.stack([blob.ravel(), faint_blob.ravel(), stroke.ravel()], axis=1)
    occupied = fig4.support_fraction(W)
    assert occupied[0] == pytest.approx(13 / 784)  # k equal values: exactly k / Nv
    # By hand: (13 x 0.8 + 771 x 0.016)^2 / (784 (13 x 0.64 + 771 x 0.016^2)).
    l1, l2sq = 13 * 0.8 + 771 * 0.016, 13 * 0.64 + 771 * 0.016**2
    assert occupied[1] == pytest.approx(l1**2 / (784 * l2sq))
    assert occupied[2] == pytest.approx(1.0)
    # Images of 100 on pixels each, all within the same 200 pixels, each of them on in exactly
    # half the images: the mean image is 0.5 on 200 pixels (support 200/784), one image 100/784.
    region = g.choice(784, 200, replace=False)
    images = np.zeros((2, 784))
    images[0, region[:100]] = images[1, region[100:]] = 1.0
    threshold = fig4.localised_threshold(images)
    assert threshold == pytest.approx(200 / 784)
    assert fig4.image_support(images) == pytest.approx(100 / 784)
    assert list(occupied < threshold) == [True, True, False]
    # The l_0.1 count calls the faint blob spread (every background pixel counts 0.02^0.1 = 0.68
    # of a full one): a fraction built on it would be 0 for blob-with-background fields.
    assert fig4.effective_support(W)[1] > 0.5 > threshold
    assert fig4.support_fraction(np.zeros((4, 1)))[0] == 1.0


def test_off_data_weight_ratio_tells_a_ring_from_a_field_on_the_data():
    """Images on a 10 x 10 centre, with the pixels around it on in 1 image of 200: a blob inside
    the centre puts none of its weight off the data (ratio 0), a flat field exactly its share
    (ratio 1), a blob with the ring of negative weights the plain step of rho grows more; no
    pixel off the data, no ratio."""
    yy, xx = np.mgrid[:28, :28]
    centre = (abs(yy - 14) < 5) & (abs(xx - 14) < 5)
    ring = ~centre & (abs(yy - 14) < 8) & (abs(xx - 14) < 8)
    x = np.zeros((200, 784))
    x[:, centre.ravel()] = 1.0
    x[0, ring.ravel()] = 1.0  # on in 0.5% of the images: off the data
    off = 1.0 - centre.mean()
    blob = np.where((yy - 14) ** 2 + (xx - 14) ** 2 <= 4, 1.0, 0.0)
    ringed = blob - 0.5 * ring
    W = np.stack([blob.ravel(), np.ones(784), ringed.ravel()], axis=1)
    for column, expected in ((0, 0.0), (1, 1.0)):
        ratio, share = fig4.off_data_weight_ratio(W[:, [column]], x)
        assert share == pytest.approx(off)
        assert ratio == pytest.approx(expected)
    ring_share = 0.5 * ring.sum() / (blob.sum() + 0.5 * ring.sum())
    ratio, _ = fig4.off_data_weight_ratio(W[:, [2]], x)
    assert ratio == pytest.approx(ring_share / off)
    assert ratio > fig4.OFF_DATA_RATIO > fig4.off_data_weight_ratio(W[:, [0]], x)[0]
    assert np.isnan(fig4.off_data_weight_ratio(W, np.ones((3, 784)))[0])


def test_fig4_judges_whether_the_fields_lie_on_the_data(run, monkeypatch):
    """The row carries ``off_data_weight_ratio`` of the model's fields and its verdict; the tiny
    data have no pixel on in under 1% of the images (no verdict), so a second table counts the
    pixels on in under their median frequency as off the data."""
    table = fig4.make([run["model"]], [run["data"]], n_images=100, per_group=4).table
    row = claims(table, "off_data_weight_ratio").iloc[0]
    assert np.isnan(row["value"]) and row["held"] == ""
    x = load_dataset(run["data"]).x_train[:100]
    frequency = (x > 0).mean(0)
    monkeypatch.setattr(fig4, "OFF_DATA_FREQUENCY", float(np.median(frequency)))
    assert 0 < (frequency < fig4.OFF_DATA_FREQUENCY).mean() < 1
    table = fig4.make([run["model"]], [run["data"]], n_images=100, per_group=4).table
    row = claims(table, "off_data_weight_ratio").iloc[0]
    W = fig4.load_model_file(run["model"]).machine_state["weights"][0].double().numpy()
    ratio, _ = fig4.off_data_weight_ratio(W, x)
    assert np.isfinite(ratio) and row["value"] == pytest.approx(ratio)
    assert row["held"] == ("held" if ratio < fig4.OFF_DATA_RATIO else "not held")


def test_fig4_fraction_localised_claim(run, tmp_path):
    result = fig4.make([run["model"]], [run["data"]], n_images=100, per_group=4)
    table = result.table
    drawn = table[table["kind"] == "drawn"]
    frac = claims(table, "fraction_localised_fields")["value"].iloc[0]
    threshold = claims(table, "localised_threshold")["value"].iloc[0]
    from tapmachine.figures.common import load_model_file
    from tapmachine.io.data import load_dataset

    W = load_model_file(run["model"]).machine_state["weights"][0].double().numpy()
    x = load_dataset(run["data"]).x_train[:100]
    assert threshold == pytest.approx(fig4.localised_threshold(x))
    assert frac == pytest.approx(float((fig4.support_fraction(W) < threshold).mean()))
    small = claims(table, "fraction_smaller_than_one_image")["value"].iloc[0]
    assert small == pytest.approx(float((fig4.support_fraction(W) < fig4.image_support(x)).mean()))
    assert np.isfinite(drawn["support_fraction"]).all()


def test_claims_report_collects_every_figure(tmp_path):
    from pathlib import Path

    from tapmachine.figures import claims as claims_report
    from tapmachine.io.runlog import resume_message, resume_within_message
    from tapmachine.pipeline import cli

    figs = tmp_path / "results" / "run" / "figures"
    figs.mkdir(parents=True)
    t5 = common.table(
        [{"epoch": 1, "n_unique": 1}],
        [
            common.claim("n_unique_first_epoch", 1, "bmnist_h100", "paper: 1", held=True),
            common.claim("max_unique_fraction", 0.25, "bmnist_h100", "< 0.1", held=False),
            common.claim("helmholtz_estimate", -123.456789, "bmnist_h100", "context", epoch=3),
            common.claim("grows", 0.05, "gibbs", "held: slope 0.05"),
            common.claim("outlier", 0.0, "", "not held: gap -3.7"),
            common.claim("cutoff", 0.1, "", "a verdict-free context row"),
        ],
    )
    t3 = common.table([{"epoch": 1}], [common.claim("slope | ratio", math.nan, "m", "a|b")])
    t5.to_csv(figs / "fig5.csv", index=False)
    t3.to_csv(figs / "fig3.csv", index=False)
    pd.DataFrame({"a": [1]}).to_csv(figs / "notes.csv", index=False)  # not a figure table
    rows = claims_report.collect(figs)
    assert list(rows["figure"]) == ["fig3"] + ["fig5"] * 6
    # a verdict stated only at the start of the text counts as the row's verdict
    assert list(rows["held"].iloc[4:6]) == ["held", "not held"] and pd.isna(rows["held"].iloc[6])
    bench = tmp_path / "benchmarks"
    (bench / "train").mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tcpu_time\n"
    (bench / "train" / "bmnist_h100.tsv").write_text(header + "120.5\t0:02:00\t700.0\t118.0\n")
    (bench / "train" / "bmnist_h25.tsv").write_text(header + "30.25\t0:00:30\t500.0\t29.0\n")
    times = job_times.wall_times(bench)
    assert list(times["job"]) == ["train/bmnist_h100", "train/bmnist_h25"]
    assert times["seconds"].sum() == pytest.approx(150.75) and not times["resumed"].any()
    out = tmp_path / "docs" / "claims.md"
    args = ["claims", "--results", str(figs.parent), "--out", str(out), "--benchmarks", str(bench)]
    assert cli.main(args) == 0
    text = out.read_text()
    assert "| train | 2 | 150.8 | 147 |" in text
    assert "| train/bmnist_h100 | 120.5 | 118 | 700 |" in text and "resumed" not in text
    assert "every 30 s" in text  # the sampled CPU time is labelled a lower bound
    # bmnist_h100 ran over two starts: its benchmark times the second only, its epochs all;
    # bmnist_h25's epochs sum to less than its benchmark (setup time), so the benchmark counts
    models = figs.parent / "models"
    for name, seconds, cpu in [
        ("bmnist_h100", [100.0, 90.0], [None, 80.0]),
        ("bmnist_h25", [10.0], [9.0]),
    ]:
        (models / name).mkdir(parents=True)
        pd.DataFrame(
            {
                "epoch": range(1, len(seconds) + 1),
                "epoch_seconds": seconds,
                "epoch_cpu_seconds": cpu,
            }
        ).to_csv(models / name / "metrics.csv", index=False)
    times = job_times.wall_times(bench, models).set_index("job")
    assert times.loc["train/bmnist_h100", "seconds"] == pytest.approx(190.0)
    assert times.loc["train/bmnist_h100", "resumed"] and np.isnan(
        times.loc["train/bmnist_h100", "cpu_seconds"]
    )
    assert times.loc["train/bmnist_h25", "seconds"] == pytest.approx(30.25)
    assert not times.loc["train/bmnist_h25", "resumed"]
    assert cli.main(args) == 0
    text = out.read_text()
    assert (
        "| train | 2 | 220.2 | n/a |" in text
        and "| train/bmnist_h100 (resumed, at least) | 190 | n/a | 700 |" in text
    )
    assert "times only the last start" in text and "evaluating earlier epochs again" in text
    # with the logs: bmnist_h100's last start resumed from epoch 1 (epoch 1's 100 s + the
    # benchmark's 120.5 s, which include that start's evaluation of epoch 1 again); bmnist_h25's
    # log is a fresh start's, so its benchmark alone counts
    logs = tmp_path / "logs"
    (logs / "train").mkdir(parents=True)
    (logs / "train" / "bmnist_h100.log").write_text(
        resume_message(Path("ckpt/epoch_1.pt"), 1) + "\nepoch 2/2: 100%\r\n"
    )
    (logs / "train" / "bmnist_h25.log").write_text("epoch 1/1: 100%\n")
    times = job_times.wall_times(bench, models, logs).set_index("job")
    assert times.loc["train/bmnist_h100", "seconds"] == pytest.approx(220.5)
    assert times.loc["train/bmnist_h100", ["resumed", "exact"]].tolist() == [True, True]
    assert times.loc["train/bmnist_h25", "seconds"] == pytest.approx(30.25)
    assert cli.main(args + ["--logs", str(logs)]) == 0
    text = out.read_text()
    assert "| train/bmnist_h100 (resumed) | 220.5 | n/a | 700 |" in text
    assert "at least" not in text
    pd.DataFrame(
        {"epoch": [1, 2], "epoch_seconds": [100.0, 90.0], "epoch_cpu_seconds": [95.0, 80.0]}
    ).to_csv(models / "bmnist_h100" / "metrics.csv", index=False)
    assert job_times.wall_times(bench, models).set_index("job").loc[
        "train/bmnist_h100", "cpu_seconds"
    ] == pytest.approx(175.0)
    # exact: epoch 1's 95 s of CPU + the last start's 118 s
    assert job_times.wall_times(bench, models, logs).set_index("job").loc[
        "train/bmnist_h100", "cpu_seconds"
    ] == pytest.approx(213.0)
    # stopped part-way through epoch 2 as well: the 40 s (35 CPU s) of it trained before the
    # last start count too; and a start that continued epoch 1 part-way is a resumed job
    (logs / "train" / "bmnist_h100.log").write_text(
        resume_message(Path("ckpt/epoch_1.pt"), 1)
        + "\n"
        + resume_within_message(2, 3, 40.0, 35.0)
        + "\nepoch 2/2: 100%\r\n"
    )
    (logs / "train" / "bmnist_h25.log").write_text(
        resume_within_message(1, 7, 12.0, 11.0) + "\nepoch 1/1: 100%\n"
    )
    times = job_times.wall_times(bench, models, logs).set_index("job")
    assert times.loc["train/bmnist_h100", ["seconds", "cpu_seconds"]].tolist() == pytest.approx(
        [260.5, 248.0]
    )
    assert times.loc["train/bmnist_h25", "seconds"] == pytest.approx(30.25 + 12.0)
    assert times.loc["train/bmnist_h25", ["resumed", "exact"]].tolist() == [True, True]
    assert "| fig5 | count starts at 1 and grows" in text and "| 2 | 2 | 2 |" in text
    assert "| n_unique_first_epoch | bmnist_h100 |  | 1 | paper: 1 | held |" in text
    assert "| max_unique_fraction | bmnist_h100 |  | 0.25 | < 0.1 | not held |" in text
    assert "| helmholtz_estimate | bmnist_h100 | 3 | -123.5 | context |  |" in text
    assert "| slope \\| ratio | m |  | n/a | a\\|b |  |" in text
    assert "notes" not in text
    doc = tmp_path / "results.md"
    doc.write_text("# R\n\n<!-- claims:default -->\nold\n<!-- /claims:default -->\n\nafter\n")
    args = ["claims", "--results", str(figs), "--out", str(doc), "--section", "default"]
    assert cli.main(args) == 0
    filled = doc.read_text()
    assert filled.startswith("# R\n\n<!-- claims:default -->\n| Figure |")
    assert filled.endswith("<!-- /claims:default -->\n\nafter\n") and "old" not in filled
    assert cli.main([*args[:-1], "paper"]) == 2  # no such markers: nothing written
    assert doc.read_text() == filled
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(common.FigureError, match="no figure CSV"):
        claims_report.collect(empty)
    assert cli.main(["claims", "--results", str(tmp_path / "nowhere"), "--out", str(out)]) == 2


def test_wall_times_count_a_resumed_dbm_job_from_its_model_history(tmp_path):
    """A DBM training job resumed at epoch 2 of 3: its benchmark times the last start, its
    model file's history all three epochs; the folder, not the name, tells dataset from model
    (both hold underscores)."""
    from pathlib import Path

    from tiny_models import random_machine

    from tapmachine.core.priors import Spin
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.io.runlog import resume_message

    bench, logs = tmp_path / "benchmarks" / "ucd" / "dbm", tmp_path / "logs" / "ucd" / "dbm"
    bench.mkdir(parents=True)
    logs.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tcpu_time\n"
    machine, _ = random_machine(Spin, (4, 3, 2), 0.1, 0)
    dbm = tmp_path / "results" / "ucd" / "dbm"
    history = [
        {"epoch": e, "epoch_seconds": 100.0 * e, "epoch_cpu_seconds": 90.0 * e} for e in (1, 2, 3)
    ]
    for dataset, model in [("binary_fashion_mnist", "no_orthogonal"), ("binary_fashion", "x")]:
        folder = dbm / dataset / model
        folder.mkdir(parents=True)
        ModelFile.from_machine(machine, model, history=history).save(folder / "model.pt")
    job = "train_binary_fashion_mnist_no_orthogonal"
    (bench / f"{job}.tsv").write_text(header + "310.0\t0:05:10\t800.0\t280.0\n")
    score = "score_binary_fashion_mnist_no_orthogonal"  # not a training job: its own times
    (bench / f"{score}.tsv").write_text(header + "42.0\t0:00:42\t500.0\t40.0\n")
    (logs / f"{job}.log").write_text(
        resume_message(Path("ckpt/epoch_2.pt"), 2) + "\nepoch 3/3: 100%\n"
    )
    times = job_times.wall_times(tmp_path / "benchmarks", None, tmp_path / "logs", dbm)
    row = times.set_index("job").loc[f"ucd/dbm/{job}"]
    assert row["seconds"] == pytest.approx(100.0 + 200.0 + 310.0)
    assert row["cpu_seconds"] == pytest.approx(90.0 + 180.0 + 280.0)
    assert row["resumed"] and row["exact"]
    scored = times.set_index("job").loc[f"ucd/dbm/{score}"]
    assert scored["seconds"] == pytest.approx(42.0) and not scored["resumed"]
    without = job_times.wall_times(tmp_path / "benchmarks", None, tmp_path / "logs")
    assert without.set_index("job").loc[f"ucd/dbm/{job}", "seconds"] == pytest.approx(310.0)


def test_wall_times_count_the_epochs_a_resumed_scoring_job_kept(tmp_path):
    """Fig. 12's per-epoch scoring and the exact curve keep each scored epoch, and a job stopped
    part-way resumes: its benchmark times the last start, whose log names the kept epochs; their
    rows' own seconds count too. The exact curve's rows record CPU seconds only (exact part and
    AIS), which count as the least wall time they took."""
    from tapmachine.io.runlog import kept_message

    bench, logs = tmp_path / "benchmarks" / "likelihood", tmp_path / "logs" / "likelihood"
    models, scores = tmp_path / "results" / "models", tmp_path / "results" / "likelihood"
    for folder in (bench, logs, models, scores / "h500", scores / "h25", scores / "h100"):
        folder.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tcpu_time\n"
    (bench / "score_epochs_h500.tsv").write_text(header + "300.0\t0:05:00\t900.0\t250.0\n")
    (bench / "exact_curve_h25.tsv").write_text(header + "50.0\t0:00:50\t700.0\t45.0\n")
    (bench / "score_epochs_h100.tsv").write_text(header + "20.0\t0:00:20\t600.0\t18.0\n")
    (bench / "score_final_h500.tsv").write_text(header + "80.0\t0:01:20\t900.0\t70.0\n")
    pd.DataFrame(
        {"epoch": [1, 2, 3], "seconds": [100.0, 110.0, 120.0], "cpu_seconds": [90.0, 95.0, 99.0]}
    ).to_csv(scores / "h500" / "scores.csv", index=False)
    pd.DataFrame(
        {"epoch": [1, 2], "cpu_seconds": [30.0, 31.0], "ais_cpu_seconds": [4.0, 5.0]}
    ).to_csv(scores / "h25" / "exact.csv", index=False)
    # rows kept by code that timed no CPU: wall counted, CPU unknown
    pd.DataFrame({"epoch": [1, 2], "seconds": [7.0, 8.0]}).to_csv(
        scores / "h100" / "scores.csv", index=False
    )
    (logs / "score_epochs_h500.log").write_text(
        kept_message("h500", 1) + "\n" + kept_message("h500", 2) + "\nh500 epoch 3: AIS ...\n"
    )
    (logs / "exact_curve_h25.log").write_text(kept_message("h25", 1) + "\nh25 epoch 2: exact\n")
    (logs / "score_epochs_h100.log").write_text(kept_message("h100", 2) + "\n")
    (logs / "score_final_h500.log").write_text(kept_message("h500", 1) + "\n")
    times = job_times.wall_times(tmp_path / "benchmarks", models, tmp_path / "logs")
    times = times.set_index("job")
    h500 = times.loc["likelihood/score_epochs_h500"]
    assert [h500["seconds"], h500["cpu_seconds"]] == pytest.approx([300 + 210, 250 + 185])
    assert h500["resumed"] and h500["exact"]
    h25 = times.loc["likelihood/exact_curve_h25"]
    assert [h25["seconds"], h25["cpu_seconds"]] == pytest.approx([50 + 34, 45 + 34])
    assert h25["resumed"] and not h25["exact"]
    h100 = times.loc["likelihood/score_epochs_h100"]
    assert h100["seconds"] == pytest.approx(28.0) and np.isnan(h100["cpu_seconds"])
    final = times.loc["likelihood/score_final_h500"]  # starts over when rerun: its last start
    assert final["seconds"] == pytest.approx(80.0) and not final["resumed"]
    # without the logs (or the run's results) nothing says which rows were kept
    alone = job_times.wall_times(tmp_path / "benchmarks", models).set_index("job")
    assert alone.loc["likelihood/score_epochs_h500", "seconds"] == pytest.approx(300.0)
    text = job_times.wall_times_markdown(times.reset_index())
    assert "| likelihood/score_epochs_h500 (resumed) | 510 | 435 | 900 |" in text
    assert "| likelihood/exact_curve_h25 (resumed, at least) | 84 | 79 | 700 |" in text
    assert "A scoring job or harvest marked resumed" in text
    # a harvest kept chunks of starts: their seconds, from its log, count too
    from tapmachine.io.runlog import kept_chunk_message

    (bench.parent / "harvest" / "h100").mkdir(parents=True)
    (logs.parent / "harvest" / "h100").mkdir(parents=True)
    (bench.parent / "harvest" / "h100" / "epoch_5.tsv").write_text(
        header + "60.0\t0:01:00\t2500.0\t55.0\n"
    )
    (logs.parent / "harvest" / "h100" / "epoch_5.log").write_text(
        "TAP:  20%|##  | 1/5\r"
        + kept_chunk_message(1, 5, 30.5, 29.0)
        + "\n"
        + kept_chunk_message(2, 5, 31.0, 30.0)
        + "\nharvest h100 epoch 5: 12 unique solutions\n"
    )
    times = job_times.wall_times(tmp_path / "benchmarks", models, tmp_path / "logs")
    harvested = times.set_index("job").loc["harvest/h100/epoch_5"]
    assert [harvested["seconds"], harvested["cpu_seconds"]] == pytest.approx([121.5, 114.0])
    assert harvested["resumed"] and harvested["exact"]


def test_claims_rejudge_recomputes_verdicts_from_the_csvs(run, tmp_path):
    """A committed figure CSV whose verdict an older rule wrote (here: the unique-fraction
    verdict turned over) reads as written, and with rejudge as the current code judges it."""
    from tapmachine.figures import claims as claims_report
    from tapmachine.pipeline import cli

    figs = tmp_path / "figures"
    figs.mkdir()
    table = fig5.make(run["solutions"]).table
    row = table["claim"] == "max_unique_fraction"
    truth = table.loc[row, "held"].iloc[0]
    table.loc[row, "held"] = "held" if truth == "not held" else "not held"
    table.to_csv(figs / "fig5.csv", index=False)

    def verdict(rows):
        return rows[rows["claim"] == "max_unique_fraction"]["held"].iloc[0]

    assert verdict(claims_report.collect(figs)) != truth
    assert verdict(claims_report.collect(figs, rejudge=True)) == truth
    out = tmp_path / "claims.md"
    assert cli.main(["claims", "--results", str(figs), "--out", str(out), "--rejudge"]) == 0
    line = next(x for x in out.read_text().splitlines() if "max_unique_fraction" in x)
    assert line.endswith(f"| {truth} |")


def test_ucd_tables_give_verdicts_and_say_when_below_paper_size(tmp_path):
    import json

    from tapmachine.figures import ucd_dbm

    def scores(sizes, fids):
        paths = []
        for (model, method), fid in zip(
            [("ucd_lmi", "ucd_lmi"), ("pcd", "dbm_pcd"), ("centered", "centered_pcd")],
            fids,
            strict=True,
        ):
            row = {"dataset": "binary_mnist", "model": model, "method": method, "spec": "{}"}
            row.update(classifier_fid=fid, classifier_accuracy=0.9, tap_ll=-0.2, ais_ll=-fid)
            if sizes is not None:
                row["sizes"] = sizes
            paths.append(tmp_path / f"{model}_{fid}_{sizes}.json")
            paths[-1].write_text(json.dumps(row))
        return paths

    def verdicts(result, name):
        t = result.table
        return dict(t.loc[t["claim"] == name, ["model", "held"]].itertuples(index=False))

    reduced = scores("784-200-200", [300.0, 400.0, 250.0])
    t1, t2 = ucd_dbm.table1(reduced), ucd_dbm.table2(reduced)
    assert verdicts(t1, "ucd_lmi_best_fid") == {"binary_mnist": "not held"}  # centered wins
    assert verdicts(t1, "pcd_worst_fid") == {"binary_mnist": "held"}  # 400 above 300 and 250
    assert verdicts(t2, "removal_worsens_fid") == {"pcd": "held", "centered": "not held"}
    for result in (t1, t2):
        title = result.figure.axes[0].get_title()
        assert "REDUCED SIZE (784-200-200; paper: 6272-6272-6272" in title
    paper = scores("6272-6272-6272", [200.0, 400.0, 250.0])
    t1, t2 = ucd_dbm.table1(paper), ucd_dbm.table2(paper)
    assert verdicts(t1, "ucd_lmi_best_fid") == {"binary_mnist": "held"}
    assert set(verdicts(t2, "removal_worsens_fid").values()) == {"held"}
    centered_worst = ucd_dbm.table1(scores("6272-6272-6272", [200.0, 400.0, 450.0]))
    assert verdicts(centered_worst, "pcd_worst_fid") == {"binary_mnist": "not held"}
    detail = centered_worst.table.set_index("claim").loc["pcd_worst_fid", "detail"]
    assert (
        detail
        == "classifier FID of PCD without pretraining 400; the other methods at most 450 (centered)"
    )
    assert "REDUCED" not in t1.figure.axes[0].get_title()
    # score files from before sizes were recorded: their size is not known to be the paper's
    assert (
        "REDUCED SIZE (unknown"
        in ucd_dbm.table2(scores(None, [1.0, 2.0, 3.0])).figure.axes[0].get_title()
    )


def test_save_wraps_a_title_wider_than_its_figure(tmp_path):
    """A one-column figure's long title is refilled to fit the figure, not cut at its edge."""
    with common.style():
        fig = common.new_figure(common.COLUMN, 2.6)
        fig.subplots().plot([0, 1], [0, 1])
        words = "normalised TAP log-likelihood over the training images"
        fig.suptitle(f"Fig. 3: {words} of models a, b")
        short = common.new_figure(common.COLUMN, 2.6)
        short.suptitle("Fig. 3\nshort")
    result = common.FigureResult(fig, common.table([{"x": 1}], []), [])
    common.save(result, tmp_path / "a.png", tmp_path / "a.pdf", tmp_path / "a.csv")
    common.wrap_suptitle(short)
    renderer = fig.canvas.get_renderer()
    assert fig._suptitle.get_window_extent(renderer).width <= 0.97 * fig.bbox.width
    text = fig.get_suptitle()
    assert text.count("\n") == 1
    assert " ".join(text.split()) == f"Fig. 3: {words} of models a, b"
    assert short.get_suptitle() == "Fig. 3\nshort"


def test_ucd_table1_floor_row_and_coupling_claims_table2_full_reference(tmp_path):
    import json

    from tapmachine.figures import ucd_dbm

    def write(model, method, fid, sizes, **extra):
        row = {"dataset": "binary_mnist", "model": model, "method": method, "spec": "{}"}
        row.update(classifier_fid=fid, classifier_accuracy=0.99, tap_ll=-0.2, ais_ll=-fid)
        row.update(sizes=sizes, fid_floor=2.5, **extra)
        path = tmp_path / f"{model}_{sizes}.json"
        path.write_text(json.dumps(row))
        return path

    coupling = dict(tau_mean_mean=1.0, tau_mean_min=1.0, tau_mean_max=1.0, tau_max=1.0)
    coupling.update(T_mean_mean=8.0, T_mean_min=4.0, T_mean_max=12.0, T_max=27.0)
    t1 = ucd_dbm.table1(
        [
            write("ucd_lmi", "ucd_lmi", 30.0, "784-784-784", **coupling),
            write("pcd", "dbm_pcd", 90.0, "784-784-784"),
        ]
    ).table
    drawn = t1[t1["kind"] == "drawn"]
    floor = drawn[drawn["model"] == ucd_dbm.FLOOR_MODEL]
    assert floor["classifier_fid"].tolist() == [2.5]
    assert drawn["model"].tolist()[0] == ucd_dbm.FLOOR_MODEL  # lowest FID first
    claims = t1[t1["kind"] == "claim"].set_index("claim")
    assert claims.loc["ucd_lmi_best_fid", "held"] == "held"  # the floor is not a method
    assert claims.loc["fid_floor_test_halves", "value"] == 2.5
    assert claims.loc["fid_classifier_test_accuracy", "value"] == 0.99
    assert claims.loc["coupling_time_tau_5_to_30", "held"] == "not held"  # tau = 1
    assert claims.loc["local_search_steps_T", "value"] == 8.0
    t2 = ucd_dbm.table2(
        [
            write("full", "ucd_lmi", 40.0, "784-500-500"),
            write("no_centering", "ucd_lmi", 50.0, "784-500-500"),
            write("no_marginalise", "ucd_lmi", 35.0, "784-500-500"),
        ]
    ).table
    verdicts = dict(
        t2.loc[t2["claim"] == "removal_worsens_fid", ["model", "held"]].itertuples(index=False)
    )
    assert verdicts == {"no_centering": "held", "no_marginalise": "not held"}
    assert t2.loc[t2["claim"] == "ablation_at_one_size", "held"].tolist() == ["held"]
    assert not (t2["claim"] == "unbiased_gradient_matters_most").any()  # no PCD row to test
    tau_row = claims.loc["coupling_time_tau_5_to_30", "detail"]
    assert "uniform over the whole state" in tau_row and "T per step: mean 8" in tau_row

    def most(fid_no_unbiased, fid_no_centering):
        t = ucd_dbm.table2(
            [
                write("full", "ucd_lmi", 40.0, "784-500-500"),
                write("no_unbiased", "dbm_pcd", fid_no_unbiased, "784-500-500"),
                write("no_centering", "ucd_lmi", fid_no_centering, "784-500-500"),
            ]
        ).table
        row = t[t["claim"] == "unbiased_gradient_matters_most"]
        assert row["model"].tolist() == ["no_unbiased"]
        return row["held"].iloc[0], row["value"].iloc[0]

    assert most(150.0, 60.0) == ("held", 110.0)
    assert most(70.0, 90.0) == ("not held", 30.0)  # centering's removal hurts more
    assert most(30.0, 20.0)[0] == "not held"  # highest of the removals, yet below the full model


def test_ucd_sample_verdicts_diverse_copies_and_pcd_failure():
    import torch

    from tapmachine.figures import ucd_dbm

    ucd = {"method": "ucd_lmi", "sizes": (784, 784, 784), "spec": {}}
    pcd = {"method": "dbm_pcd", "sizes": (784, 784, 784), "spec": {"ucd": {"centering": False}}}
    far = torch.full((36,), 40.0, dtype=torch.float64)

    def verdict(blob, n_distinct, spread, nearest):
        rows = ucd_dbm.images.sample_claims(blob, "m", 36, n_distinct, spread, 130.0, nearest)
        return [r["held"] for r in rows if r["claim"].startswith("fig2_")]

    assert verdict(ucd, 36, 90.0, far) == ["held"]
    assert verdict(ucd, 36, 40.0, far) == ["not held"]  # distinct, but all alike
    assert verdict(ucd, 30, 90.0, far) == ["not held"]  # too few distinct
    copy = far.clone()
    copy[3] = 0.0
    assert verdict(ucd, 36, 90.0, copy) == ["not held"]  # a training image copied
    assert verdict(pcd, 1, 0.0, far) == ["held"]  # PCD collapsed: the paper's Fig. 2a
    rows = ucd_dbm.images.sample_claims(pcd, "m", 36, 36, 90.0, 130.0, far)
    assert rows[-1]["held"] == "not held" and "does not fail at this size" in rows[-1]["detail"]


def test_ucd_completion_labels_its_columns_and_fits_two_collapsed_panels(tmp_path):
    """Fig. 3 (2nd paper) of two models on 28 x 28 images, 8 completions each, from a DBM barely
    trained (its completions collapse): each panel names its three columns, and its two-line
    title (with "(collapsed)") fits the panel (the autouse legibility check)."""
    import json

    from tapmachine.figures import ucd_dbm
    from tapmachine.io import data
    from tapmachine.pipeline.stages import ucd_dbm as stage

    rng = np.random.default_rng(0)
    x = (rng.random((260, 784)) < 0.3).astype(np.float32)
    y = rng.integers(0, 10, 260)
    ds = data.Dataset(
        x[:200], y[:200], x[200:], y[200:], (28, 28), {"source": "test"}, "binary_test"
    )
    data.save_dataset(ds, tmp_path / "binary_test.npz")
    spec = {"method": "ucd_lmi", "hidden": [16, 16], "epochs": 1, "batch_size": 50, "ucd": {}}
    stage.train_dbm("ucd_lmi", json.loads(json.dumps(spec)), tmp_path / "binary_test.npz", tmp_path)
    paths, datasets = [tmp_path / "model.pt"] * 2, [tmp_path / "binary_test.npz"] * 2
    result = ucd_dbm.completion(paths, datasets, seed=1, n=8)
    for ax in result.figure.axes:
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == list(ucd_dbm.images.COMPLETION_COLUMNS)
    assert "(collapsed)" in result.figure.axes[0].get_title()
