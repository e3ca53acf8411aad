"""Each verdict tests the claim as the paper words it, and can fail: every rule on constructed
inputs where it must come out held and where it must come out not held."""

import numpy as np
import pytest

from tapmachine.figures import fig8

PS = np.array([0.0, 0.1, 0.3, 0.45])


def _mcc(at_p0, rest=0.5, n=20):
    """Per-image MCCs (p x images): ``at_p0`` at p = 0, ``rest`` elsewhere."""
    out = np.full((len(PS), n), rest, dtype=np.float64)
    out[0] = at_p0
    return out


def test_fig8_recovery_at_p0_is_judged_for_tap_and_ope():
    held = fig8.recovery_claim(PS, "tap_nh25", _mcc(1.0))
    assert held["claim"] == "recovers_at_p0" and held["held"] == "held" and held["value"] == 1.0
    missed = fig8.recovery_claim(PS, "tap_nh25", _mcc(np.linspace(0.9, 1.0, 20)))
    assert missed["held"] == "not held" and missed["value"] == pytest.approx(0.95)
    none = fig8.recovery_claim(PS[1:], "ope", _mcc(1.0)[1:])
    assert none["held"] == "" and np.isnan(none["value"])


def test_fig8_one_nn_at_p0_is_a_row_of_its_own_held_when_it_misses():
    """The paper: 1-NN "will not yield the true signal at p = 0 unless the true signal is itself
    contained within the training data"."""
    at0 = np.r_[np.ones(2), np.full(18, 0.8)]  # two test digits are training images
    row = fig8.knn_recovery_claim(PS, "1nn", _mcc(at0))
    assert row["claim"] == "1nn_recovers_at_p0" and row["held"] == "held"
    assert row["value"] == pytest.approx(0.82) and "10.0% returned exactly" in row["detail"]
    every = fig8.knn_recovery_claim(PS, "1nn", _mcc(1.0))  # every test digit in the training set
    assert every["held"] == "not held"


def test_fig8_p0_rows_split_one_nn_from_the_methods_that_must_recover():
    mcc = {"ope": _mcc(1.0), "1nn": _mcc(0.8), "tap_nh25": _mcc(1.0)}
    info = {
        "tap_nh25": {"nh": 25, "noiseaug": False, "converged": 1.0, "same_noise": True},
    }
    rows = fig8._claims(PS, mcc, info, "1nn")
    p0 = {(r["claim"], r["model"]): r["held"] for r in rows if "recovers_at_p0" in r["claim"]}
    assert p0 == {
        ("recovers_at_p0", "ope"): "held",
        ("recovers_at_p0", "tap_nh25"): "held",
        ("1nn_recovers_at_p0", "1nn"): "held",
    }


def test_fig8_tracking_keeps_the_sign_of_the_difference():
    """The value is MCC_TAP - MCC_1NN with its sign, as the detail writes it (it was |diff|
    beside a signed detail)."""
    knn = _mcc(0.8, rest=0.3)
    below = fig8.tracking_claim(PS, "tap_nh25", knn - 0.007, "1nn", knn)
    assert below["value"] == pytest.approx(-0.007)
    assert "MCC_TAP - MCC_1nn = -0.0070" in below["detail"] and below["held"] == "held"
    above = fig8.tracking_claim(PS, "tap_nh25", knn + 0.007, "1nn", knn)
    assert above["value"] == pytest.approx(0.007) and "= +0.0070" in above["detail"]
    far = fig8.tracking_claim(PS, "tap_nh25", knn - 0.2, "1nn", knn)
    assert far["value"] == pytest.approx(-0.2) and far["held"] == "not held"
    assert fig8.tracking_claim(np.array([0.5]), "tap_nh25", knn[:1], "1nn", knn[:1]) is None


def test_fig5_growth_is_judged_as_written():
    """'The number of unique solutions grows': a count that ends far below its peak does not
    grow, though its rank correlation with the epoch is high (the paper-size run: 1,295 at
    epoch 90, 790 at epoch 100, Spearman 0.95)."""
    from tapmachine.figures import fig5

    epochs = [1, 10, 40, 90, 100]
    grows = fig5.growth_claim("m", epochs, [1, 121, 820, 1295, 1250])
    assert grows["held"] == "held" and grows["value"] == pytest.approx(1250 / 1295)
    falls = fig5.growth_claim("m", epochs, [1, 121, 820, 1295, 790])
    assert falls["held"] == "not held" and falls["value"] == pytest.approx(790 / 1295)
    assert "790 at epoch 100 against 1295" in falls["detail"]
    flat = fig5.growth_claim("m", epochs, [1, 1, 1, 1, 1])
    assert flat["held"] == "not held" and flat["value"] == 1.0
    rows = fig5.verdict_claims("m", epochs, [1, 121, 820, 1295, 790], [0.01] * 5, [], [0.0] * 5)
    by_name = {r["claim"]: r for r in rows}
    assert by_name["n_unique_grows"]["held"] == "not held"
    assert by_name["spearman_epoch_vs_n_unique"]["held"] == ""  # context, not the verdict


def _clustered_data(seed=0, n_tight=50, n_loose=100):
    """Binary 'images' of 40 pixels: a tight cluster near a sparse prototype (20% on, 5% of the
    pixels flipped) and images scattered with 80% on, where the mean image lies."""
    rng = np.random.default_rng(seed)
    proto = (rng.random(40) < 0.2).astype(int)
    tight = np.where(rng.random((n_tight, 40)) < 0.05, 1 - proto, proto)
    loose = (rng.random((n_loose, 40)) < 0.8).astype(int)
    return np.vstack([tight, loose]).astype(np.float64), proto


def test_fig7_density_is_judged_against_the_mean_image_and_held_out_images():
    from tapmachine.figures import fig7

    data, proto = _clustered_data()
    rng = np.random.default_rng(1)
    held_out, _ = _clustered_data(seed=2, n_tight=20, n_loose=40)  # drawn like the data
    baselines = {"mean image": data.mean(0, keepdims=True), "held-out images": held_out}
    near_proto = np.clip(proto + rng.normal(0, 0.1, (5, 40)), 0, 1)  # grey, at the cluster
    inside = fig7.density_claim(near_proto, data, baselines, "m", 5)
    assert inside["held"] == "held" and inside["value"] < 1
    scattered = rng.random((5, 40))  # grey points anywhere
    outside = fig7.density_claim(scattered, data, baselines, "m", 5)
    assert outside["held"] == "not held"
    # Copies of the mean image cannot pass: they are not below their own baseline.
    mean = fig7.density_claim(np.repeat(baselines["mean image"], 3, 0), data, baselines, "m", 5)
    assert mean["held"] == "not held"
    # One solution has no spread to judge a difference by: no verdict.
    assert fig7.density_claim(near_proto[:1], data, baselines, "m", 5)["held"] == ""


def test_fig7_purity_is_judged_against_shuffled_labels():
    from tapmachine.figures import fig7

    labels = np.repeat([3, 6, 7], 40)
    aligned = fig7.purity_claim(labels, np.repeat([0, 1, 2], 40), "m", 5)
    assert aligned["held"] == "held" and aligned["value"] == 1.0
    rng = np.random.default_rng(0)
    random_basins = fig7.purity_claim(labels, rng.integers(0, 3, 120), "m", 5)
    assert random_basins["held"] == "not held"
    singletons = fig7.purity_claim(labels, np.arange(120), "m", 5)  # pure whatever the labels
    assert singletons["value"] == 1.0 and singletons["held"] == "not held"
    one_basin = fig7.purity_claim(labels, np.zeros(120, int), "m", 5)
    assert one_basin["held"] == ""


def _hits(shares, n=200, seed=0):
    """(p, image) booleans with the given share of True per p."""
    rng = np.random.default_rng(seed)
    return np.array([rng.random(n) < s for s in shares])


PS9 = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])


def test_fig9_digit_structure_kept_against_the_ope_and_chance():
    from tapmachine.figures import fig9

    ope = _hits([1.0, 0.95, 0.8, 0.5, 0.2, 0.1], seed=1)
    kept = _hits([1.0, 0.97, 0.9, 0.8, 0.6, 0.1], seed=2)
    row = fig9.kept_claim(PS9, "tap_nh25", 25, kept, ope, chance=0.12)
    assert row["held"] == "held" and row["value"] == pytest.approx(kept[4].mean())
    # Left at the mean image: one class for every digit, chance at the largest p.
    mean_image = _hits([1.0, 0.95, 0.8, 0.5, 0.12, 0.1], seed=3)
    assert fig9.kept_claim(PS9, "tap_nh25", 25, mean_image, ope, 0.12)["held"] == "not held"
    # Worse than the pointwise estimate at some p.
    worse = _hits([1.0, 0.6, 0.8, 0.8, 0.6, 0.1], seed=4)
    row = fig9.kept_claim(PS9, "tap_nh25", 25, worse, ope, 0.12)
    assert row["held"] == "not held" and "p = [0.1]" in row["detail"]
    assert fig9.kept_claim(PS9, "tap_nh500", 500, kept, ope, 0.12)["held"] == ""  # not claimed


def test_fig9_nh500_caught_in_spurious_minima_at_large_p():
    from tapmachine.figures import fig9

    good = _hits([1.0, 0.97, 0.9, 0.8, 0.6, 0.1], seed=5)
    caught = _hits([1.0, 0.98, 0.9, 0.5, 0.3, 0.1], seed=6)
    plain = {25: "tap_nh25", 500: "tap_nh500"}
    row = fig9.spurious_claim(PS9, plain, {"tap_nh25": good, "tap_nh500": caught})
    assert row["held"] == "held" and row["model"] == "tap_nh500" and row["value"] < 0
    fine = fig9.spurious_claim(PS9, plain, {"tap_nh25": good, "tap_nh500": good})
    assert fine["held"] == "not held" and fine["value"] == 0.0
    assert fig9.spurious_claim(PS9, {25: "tap_nh25"}, {"tap_nh25": good}) is None


def test_fig9_hits_read_the_packed_estimates_per_p():
    from tapmachine.figures import fig9

    images = np.array([[1, 0, 0, 1, 1], [0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    packed = np.packbits(images.astype(np.uint8), axis=-1)  # 2 p x 2 digits, p-major

    def classify(x):
        return x.sum(1).astype(int) % 3  # label = number of on pixels mod 3

    hits = fig9.true_label_hits(packed, [0, 2], classify, 5)
    assert hits.tolist() == [[True, True], [False, False]]
