"""The estimators against exact answers on machines small enough to enumerate, and what their
interface promises: fit equals partial_fit epoch by epoch, defaults are the schema's, rows outside
the visible support are refused by row and column."""

import itertools
import pickle

import numpy as np
import pytest
import torch

from tapmachine import UCDDBM, TAPMachine
from tapmachine.io.schema import defaults

TIMING = {"train_seconds", "epoch_seconds", "epoch_cpu_seconds"}


def two_prototypes(n=400, flip=0.1, seed=0):
    """Rows near 111000 or 000111 (each bit flipped with probability ``flip``), float64."""
    rng = np.random.default_rng(seed)
    proto = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=float)
    x = proto[rng.integers(0, 2, n)]
    return np.abs(x - (rng.random(x.shape) < flip))


def all_states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def enumerated_log_likelihood(machine, v):
    """ln P(v) of a binary RBM by summing exp(-E(v, h)) over every v and h (machine.energy):
    independent of ``exact_log_partition``, which sums one layer out analytically."""
    nv, nh = machine.sizes
    vs = torch.tensor(all_states(nv), dtype=torch.float64)
    hs = torch.tensor(all_states(nh), dtype=torch.float64)
    m = machine.to(dtype=torch.float64)

    def log_marginal(rows):
        V = rows.repeat_interleave(len(hs), 0)
        H = hs.repeat(len(rows), 1)
        return torch.logsumexp(-m.energy([V, H]).reshape(len(rows), len(hs)), 1)

    log_z = torch.logsumexp(log_marginal(vs), 0)
    return (log_marginal(torch.tensor(v, dtype=torch.float64)) - log_z).numpy()


def small(**kw):
    base = dict(epochs=3, batch_size=20, learning_rate=0.05, dtype="float64", random_state=0)
    return TAPMachine(**{"n_components": 4, **base, **kw})


def test_score_samples_is_the_enumerated_log_likelihood():
    x = two_prototypes()
    rbm = small().fit(x)
    assert rbm.score_method_ == "exact"
    states = all_states(6)
    scores = rbm.score_samples(states)
    np.testing.assert_allclose(scores, enumerated_log_likelihood(rbm.machine_, states), atol=1e-10)
    assert abs(np.logaddexp.reduce(scores)) < 1e-10  # a distribution over the 64 states


def test_tap_scores_differ_from_exact_by_tap_s_ln_z_only():
    """``log_z="tap"`` keeps the exact data term (an RBM's is closed form) and replaces ln Z by
    TAP's (eq. 39): the two scores differ by one constant, small on a weakly coupled machine."""
    x = two_prototypes()
    exact, tap = small().fit(x), small(log_z="tap").fit(x)
    assert tap.score_method_ == "tap"
    gap = exact.score_samples(x) - tap.score_samples(x)
    np.testing.assert_allclose(gap, gap[0], atol=1e-10)
    assert gap[0] == pytest.approx(tap.log_partition_ - exact.log_partition_)
    assert abs(gap[0]) < 0.05, gap[0]


def test_transform_is_the_closed_form_hidden_means():
    x = two_prototypes()
    rbm = small().fit(x)
    m = rbm.machine_
    field = m.hidden.U.numpy() + x @ m.W.numpy()
    np.testing.assert_allclose(rbm.transform(x), 1.0 / (1.0 + np.exp(-field)), atol=1e-12)


@pytest.mark.parametrize("method", ["tap", "cd", "pcd"])
def test_training_raises_the_exact_log_likelihood(method):
    """Mean exact ln P(x) after epoch 1 and after epoch 15 of the same run (partial_fit). Measured
    on these settings: tap -4.13 -> -2.81, cd -4.13 -> -2.82, pcd -4.13 -> -2.94 (the entropy of
    the data's distribution is 2.63 nats); the floor is a rise of 1 nat."""
    x = two_prototypes()
    rbm = small(method=method, epochs=15, weight_init_std=0.1)
    rbm.partial_fit(x)
    first = rbm.score(x)
    for _ in range(14):
        rbm.partial_fit(x)
    assert rbm.n_iter_ == 15 and rbm.score_method_ == "exact"
    assert rbm.score(x) > first + 1.0, (first, rbm.score(x))


CONFIGS = {
    "tap": lambda: small(),
    "tap_converge": lambda: small(train_iterations="converge"),
    "cd": lambda: small(method="cd"),
    "pcd": lambda: small(method="pcd", learning_rate={"start": 0.05, "end": 0.01}),
    "deep_tap": lambda: small(n_components=(4, 3), pretrain_epochs=2),
    "ucd_lmi": lambda: UCDDBM((4, 3), epochs=3, batch_size=20, dtype="float64", random_state=0),
    "centered_pcd": lambda: UCDDBM(
        (4, 3), method="centered_pcd", epochs=3, batch_size=20, dtype="float64", random_state=0
    ),
}


def params(machine):
    return [*machine.weights, *(v for p in machine.priors for v in p.params().values())]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fit_equals_partial_fit_epoch_by_epoch(name):
    """fit with epochs=3 and three partial_fit calls on the same rows and random_state: the same
    machine bit for bit, by construction (one loop, one epoch function, one carried state); the
    history differs only in its timings."""
    x = two_prototypes()
    whole = CONFIGS[name]().fit(x)
    parts = CONFIGS[name]()
    for _ in range(3):
        parts.partial_fit(x)
    assert all(
        torch.equal(a, b)
        for a, b in zip(params(whole.machine_), params(parts.machine_), strict=True)
    )
    drop = [{k: v for k, v in row.items() if k not in TIMING} for row in whole.history_]
    assert drop == [{k: v for k, v in row.items() if k not in TIMING} for row in parts.history_]
    assert whole.n_iter_ == parts.n_iter_ == 3
    np.testing.assert_array_equal(whole.score_samples(x), parts.score_samples(x))


@pytest.mark.parametrize("name", ["pcd", "ucd_lmi"])
def test_a_pickled_estimator_trains_on_as_the_original(name):
    """The carried state (momentum, chains, the generator's state) survives pickling."""
    x = two_prototypes()
    a = CONFIGS[name]().partial_fit(x)
    b = pickle.loads(pickle.dumps(a))
    a.partial_fit(x)
    b.partial_fit(x)
    assert all(
        torch.equal(p, q) for p, q in zip(params(a.machine_), params(b.machine_), strict=True)
    )


def test_random_state_seeds_training_and_sampling():
    x = two_prototypes()
    a, b, c = small().fit(x), small().fit(x), small(random_state=1).fit(x)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert not np.array_equal(a.components_, c.components_)
    np.testing.assert_array_equal(a.sample(5, 10), b.sample(5, 10))
    fresh = [small(random_state=None).fit(x).seed_ for _ in range(2)]
    assert fresh[0] != fresh[1]


def test_gibbs_samples_follow_the_exact_distribution():
    """20,000 chains of 100 sweeps: the frequencies of the 64 visible states are within 0.035 in
    total variation of exp(score_samples). Measured 0.026; 20,000 exact draws from those
    probabilities are 0.022 away on average, 0.027 at most in 200 tries (sampling noise)."""
    x = two_prototypes()
    rbm = small(epochs=10).fit(x)
    samples = rbm.sample(20_000, n_steps=100)
    assert set(np.unique(samples)) <= {0.0, 1.0}
    codes = samples @ (2 ** np.arange(6)[::-1])
    freq = np.bincount(codes.astype(int), minlength=64) / len(codes)
    p = np.exp(rbm.score_samples(all_states(6)))
    assert 0.5 * np.abs(freq - p).sum() < 0.035


def test_deep_machines_transform_to_their_top_layer_and_score_by_tap():
    x = two_prototypes()
    deep = small(n_components=(4, 3), pretrain_epochs=2).fit(x)
    assert deep.transform(x).shape == (len(x), 3) and deep.score_method_ == "tap"
    assert len(deep.pretrain_history_) == 2 and np.isfinite(deep.score_samples(x)).all()
    dbm = UCDDBM((4, 3), epochs=2, batch_size=20, random_state=0).fit(x)
    assert dbm.transform(x).shape == (len(x), 3) and dbm.score_method_ == "tap"
    assert set(np.unique(dbm.sample(4))) <= {0.0, 1.0}
    one = UCDDBM(4, epochs=2, batch_size=20, dtype="float64", random_state=0).fit(x)
    assert one.score_method_ == "exact"  # one hidden layer: an RBM, enumerated
    assert abs(np.logaddexp.reduce(one.score_samples(all_states(6)))) < 1e-10


@pytest.mark.parametrize(
    "estimator, bad, message",
    [
        (TAPMachine(2), 2.0, r"X\[3, 2\] = 2 is outside \{0, 1\}, the values of the Bernoulli"),
        (TAPMachine(2, visible="spin"), 0.0, r"X\[3, 2\] = 0 is outside \{-1, 1\}"),
        (
            TAPMachine(2, visible="truncated_gaussian", visible_bounds=(0, 1)),
            1.5,
            r"X\[3, 2\] = 1.5 is outside \[0, 1\]",
        ),
        (UCDDBM(2), 0.5, r"X\[3, 2\] = 0.5 is outside \{0, 1\}"),
    ],
)
def test_a_row_outside_the_visible_support_is_named(estimator, bad, message):
    x = two_prototypes(20)
    if getattr(estimator, "visible", None) == "spin":
        x = 2 * x - 1
    x[3, 2] = bad
    with pytest.raises(ValueError, match=message):
        estimator.fit(x)


def test_a_fitted_machine_refuses_such_rows_too():
    fitted = TAPMachine(2, epochs=1, batch_size=10, random_state=0).fit(two_prototypes(20))
    x = two_prototypes(5)
    x[4, 1] = -1.0
    for method in (fitted.transform, fitted.score_samples, fitted.partial_fit):
        with pytest.raises(ValueError, match=r"X\[4, 1\] = -1 is outside \{0, 1\}"):
            method(x)


def test_binarize_maps_rows_onto_binary_units_only():
    x = np.random.default_rng(0).random((30, 6))
    spin = TAPMachine(2, visible="spin", binarize=0.5, epochs=1, batch_size=10, random_state=0)
    assert set(np.unique(spin.fit(x).sample(3, 5))) <= {-1.0, 1.0}
    with pytest.raises(ValueError, match="binarize needs binary visible units"):
        TAPMachine(2, visible="truncated_gaussian", binarize=0.5).fit(x)


def test_defaults_are_the_schema_s():
    """Every default with a schema key is the schema's value (``$defs/model``,
    ``$defs/dbm_model``): the config entry an unconfigured estimator trains is the schema's."""
    model, spec = defaults("model"), TAPMachine()._spec()
    for key in ("method", "sampling_steps", "epochs", "batch_size", "learning_rate", "momentum"):
        assert spec[key] == model[key], key
    for key in ("l2", "weight_init_std", "n_solutions", "rho_step", "inference"):
        assert spec[key] == model[key], key
    # the schema's device-only keys are no estimator parameters (their defaults apply)
    device_only = ("fuse", "cuda_graphs", "cuda_graph_sweeps")
    assert spec["tap"] == {k: v for k, v in model["tap"].items() if k not in device_only}
    assert spec["eval"] == model["eval"]
    deep = TAPMachine((3, 2))._spec()["pretrain"]
    assert deep == model["pretrain"]
    assert spec["visible"] == {"prior": "bernoulli", **defaults("prior")}
    dbm, dbm_spec = defaults("dbm_model"), UCDDBM()._spec()
    assert {k: v for k, v in dbm_spec.items() if k not in ("method", "hidden")} == dbm


@pytest.mark.parametrize(
    "estimator, message",
    [
        (TAPMachine(4, batch_size=0), "config key batch_size: 0 is less than the minimum of 1"),
        (TAPMachine(4, damping=1.5), "config key tap.damping: 1.5 is greater than or equal"),
        (TAPMachine((4, 0)), "config key hidden.1.units: 0 is less than the minimum of 1"),
        (TAPMachine(4, method="ucd_lmi"), r"config key method: 'ucd_lmi' is not one of"),
        (UCDDBM(4, method="tap"), r"config key method: 'tap' is not one of"),
        (UCDDBM(4, cap=0), "config key ucd.cap: 0 is less than the minimum of 1"),
        (TAPMachine(4, visible="gauss"), "unknown prior 'gauss'"),
    ],
)
def test_parameters_are_checked_by_the_config_schema(estimator, message):
    """fit checks the config entry of the parameters against the schema the workflow's config
    is checked by, and says which key is wrong."""
    with pytest.raises(ValueError, match=message):
        estimator.fit(two_prototypes(20))


def test_the_top_level_exports_the_estimators_lazily():
    """``import tapmachine`` (what the command imports first) loads neither torch nor
    scikit-learn; the estimators' names load them on first use."""
    import subprocess
    import sys

    code = (
        "import sys, tapmachine; before = {'torch', 'sklearn'} & set(sys.modules); "
        "from tapmachine import TAPMachine, UCDDBM; import tapmachine.learn as l; "
        "assert TAPMachine is l.TAPMachine and UCDDBM is l.UCDDBM; print(sorted(before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
