"""The estimators' ``device``: checked as the config's ``device`` is, handed to the training
path's one start (``GradientMethod.start``), and on CUDA (where there is a device) the machine
trains there and every answer comes back as NumPy."""

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from tapmachine import UCDDBM, TAPMachine
from tapmachine.train.settings import METHODS

NO_CUDA = "no CUDA device here: the estimators on CUDA are not checked (run on a GPU node)"


def two_prototypes(n=200, flip=0.1, seed=0):
    rng = np.random.default_rng(seed)
    proto = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=float)
    return np.abs(proto[rng.integers(0, 2, n)] - (rng.random((n, 6)) < flip))


def tap(**kw):
    base = dict(epochs=2, batch_size=20, learning_rate=0.05, dtype="float64", random_state=0)
    return TAPMachine(4, **{**base, **kw})


def ucd(**kw):
    base = dict(epochs=2, batch_size=20, dtype="float64", random_state=0)
    return UCDDBM((4, 3), **{**base, **kw})


ESTIMATORS = {"tap": (tap, "tap"), "ucd_lmi": (ucd, "ucd_lmi")}


@pytest.fixture
def starts(monkeypatch):
    """The devices every registered method's ``start`` is called with."""
    seen = []
    for name, gradient in list(METHODS.items()):

        def spy(*args, _start=gradient.start):
            seen.append(args[-1])
            return _start(*args)

        monkeypatch.setitem(METHODS, name, dataclasses.replace(gradient, start=spy))
    return seen


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_the_device_is_the_training_start_s(starts, name):
    make, _ = ESTIMATORS[name]
    default = make().fit(two_prototypes())
    explicit = make(device="cpu").fit(two_prototypes())
    assert default.device == "cpu" and starts == [torch.device("cpu")] * 2
    assert explicit.machine_.device == torch.device("cpu")
    np.testing.assert_array_equal(default.components_, explicit.components_)


@pytest.mark.parametrize("device", ["gpu", "cuda:", "CPU", 0])
def test_a_device_the_config_refuses_is_refused(starts, device):
    with pytest.raises(ValueError, match=r"TAPMachine: device must match \^\(cpu\|cuda"):
        tap(device=device).fit(two_prototypes())
    assert starts == []


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_cuda_without_cuda_is_refused_before_training(starts, monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    make, _ = ESTIMATORS[name]
    with pytest.raises(ValueError) as info:
        make(device="cuda:0").fit(two_prototypes())
    message = str(info.value)
    estimator = type(make()).__name__
    assert message.startswith(f"{estimator}: device='cuda:0', but torch {torch.__version__}")
    assert "sees no CUDA device here" in message and "\n" not in message
    assert starts == []


#: TAPMachines whose training draws only from the CPU stream (weights, batch order, and CD's and
#: PCD's Gibbs draws, made on the CPU and moved: ``core.priors.base.draw_device``).
ON_CUDA = {
    "tap": {},
    "cd": {"method": "cd"},
    "pcd": {"method": "pcd"},
    "cd_truncated": {"method": "cd", "hidden": "truncated_gauss_bernoulli"},
}


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("name", sorted(ON_CUDA))
def test_on_cuda_a_tap_machine_trains_the_cpu_s_machine(name):
    """In float64 the CUDA machine is the CPU's up to round-off, and so are its scores."""
    x = two_prototypes()
    cpu, cuda = tap(**ON_CUDA[name]).fit(x), tap(device="cuda", **ON_CUDA[name]).fit(x)
    assert cuda.machine_.device.type == "cuda"
    np.testing.assert_allclose(cuda.components_, cpu.components_, atol=1e-10)
    np.testing.assert_allclose(cuda.score_samples(x), cpu.score_samples(x), atol=1e-8)
    np.testing.assert_allclose(cuda.transform(x), cpu.transform(x), atol=1e-10)
    samples = cuda.sample(5, n_steps=10)
    assert isinstance(samples, np.ndarray) and set(np.unique(samples)) <= {0.0, 1.0}


@pytest.mark.parametrize("name", sorted(ON_CUDA))
def test_those_machines_train_on_the_cpu(name):
    """The CUDA test's configurations, on the CPU: they train and score (what a machine without
    CUDA can check of them)."""
    x = two_prototypes()
    rbm = tap(**ON_CUDA[name]).fit(x)
    assert np.isfinite(rbm.score_samples(x)).all() and rbm.n_iter_ == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_on_cuda_a_dbm_trains_there_and_scores_a_distribution():
    """UCD-LMI draws from a CUDA generator on CUDA (its numbers are not the CPU's); the exact
    scores of a one-hidden-layer DBM still sum to one over the 64 states."""
    x = two_prototypes()
    dbm = UCDDBM(4, epochs=2, batch_size=20, dtype="float64", random_state=0, device="cuda")
    dbm.fit(x)
    assert dbm.machine_.device.type == "cuda" and dbm.score_method_ == "exact"
    states = np.array(list(itertools.product([0.0, 1.0], repeat=6)))
    assert abs(np.logaddexp.reduce(dbm.score_samples(states))) < 1e-10
    hidden = dbm.transform(x)
    assert isinstance(hidden, np.ndarray) and hidden.shape == (200, 4)
    assert set(np.unique(dbm.sample(5))) <= {0.0, 1.0}
    dbm.partial_fit(x)
    assert dbm.n_iter_ == 3
