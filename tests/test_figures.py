"""Figures 3-7 on tiny inputs, and the embedding helpers on degenerate sets."""

import math

import numpy as np
import pandas as pd
import pytest
import tiny_harvest

from tapmachine import embed
from tapmachine.figures import common, fig3, fig4, fig5, fig6, fig7


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_harvest.build(
        tmp_path_factory.mktemp("figures"),
        epochs=(1, 4, tiny_harvest.EPOCHS),
        substitute="made-up faces",
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
    title = result.figure.get_suptitle()
    assert "tiny" in title or "synth" in title
    assert "SUBSTITUTE" in title, "the dataset is marked substitute: the figure must say so"
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


def test_fig3_slopes():
    assert fig3.breakpoint_epoch(100) == (20, "epoch 20 (paper)")
    e = np.arange(1, 101, dtype=float)
    ll = np.where(e <= 20, 0.1 * e, 2.0 + 0.01 * (e - 20))
    slope_late, r2 = fig3.segment_fit(e[e >= 20], ll[e >= 20])
    assert slope_late == pytest.approx(0.01) and r2 == pytest.approx(1.0)
    assert math.isnan(fig3.segment_fit(e[:1], ll[:1])[0])


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


def test_fig5(run, tmp_path):
    result = fig5.make([str(p) for p in reversed(run["solutions"])], slices=None)
    table = _save(result, tmp_path, "fig5")
    assert claims(table, "n_unique_first_epoch")["value"].iloc[0] == 1
    fractions = claims(table, "unique_fraction")
    assert len(fractions) == 3 and (fractions["value"] <= 1).all()
    with pytest.raises(common.FigureError, match="not harvested"):
        fig5.make(run["solutions"], slices=[2])


def test_band_counting_and_kde():
    assert fig5.count_bands([1.0, 1.1, 1.05, 5.0, 5.1, 4.9])[0] == 2
    assert fig5.count_bands([3.0, 3.0])[0] == 1
    assert fig5.count_bands([])[0] == 0
    # A lone outlier (< 5% of the solutions) is not a band.
    assert fig5.count_bands(list(np.linspace(0, 1, 40)) + [10.0])[0] == 1
    grid = np.linspace(-5, 5, 2001)
    kde = fig5.gaussian_kde(np.random.default_rng(0).normal(size=200), grid)
    assert kde.sum() * (grid[1] - grid[0]) == pytest.approx(1.0, abs=1e-3)
    assert fig5.gaussian_kde([2.0, 2.0, 2.0], grid) is None


def test_fig6_isomap_with_single_solution_epochs(run, tmp_path):
    result = fig6.make(run["solutions"], "isomap", n_neighbors=10)
    table = _save(result, tmp_path, "fig6")
    method = claims(table, "embedding_method")["detail"].iloc[0]
    assert "pca" in method  # the last epoch has fewer than 5 solutions: explicit fallback
    first = claims(table, "mean_pairwise_rms_distance")
    assert first["value"].iloc[0] == 0.0  # a single solution at epoch 1
    # Fitted on one epoch that holds a single solution: still draws.
    single = fig6.make(run["solutions"][:1], "isomap")
    assert single.params["embedding_used"] == "pca"


def test_fig7_all_labels_and_a_subset(run, tmp_path):
    result = fig7.make(run["solutions"], run["data"], digits=None, n_images=None)
    table = _save(result, tmp_path, "fig7")
    assert claims(table, "n_initialisations")["value"].iloc[0] == 200
    assert "isomap" in claims(table, "embedding_method")["detail"].iloc[0]
    subset = fig7.make(run["solutions"], run["data"], digits=[0, 2], n_images=100)
    labels = subset.table[
        (subset.table["kind"] == "drawn") & (subset.table["point"] == "initialisation")
    ]
    assert set(labels["label"].astype(int)) <= {0, 2}
    with pytest.raises(common.FigureError, match="exceeds"):
        fig7.make(run["solutions"], run["data"], n_images=500)
    with pytest.raises(common.FigureError, match="no initialisation"):
        fig7.make(run["solutions"], run["data"], digits=[9])


def test_cli_figure_fig5_and_umap_fig6(run, tmp_path, monkeypatch):
    from tapmachine import cli

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
