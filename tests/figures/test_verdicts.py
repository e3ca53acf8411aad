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
