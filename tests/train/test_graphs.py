"""TAP training steps as captured CUDA graphs (``train.graphs``): which runs are captured, and
that the captured steps train the eager loop's model. On the CPU the replays are plain calls
(``eager_record``: the same buffers, chunks, checks and copies as on a GPU); on CUDA the graphs
are captured and compared with the eager loop (skipped with a line without CUDA)."""

import dataclasses

import pytest
import torch
from tiny_models import SPEC, bars_and_stripes, settings

from tapmachine.core import tap
from tapmachine.core.seeding import seeded_generator
from tapmachine.train import TrainingError, build_machine, graphs, train
from tapmachine.train.loop import Carried
from tapmachine.train.resume import fingerprint

NO_CUDA = "no CUDA device here: TAP steps on captured CUDA graphs are not checked (run on a GPU)"
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)

FIXED = {
    "constant": {},
    "schedules": {
        "learning_rate": {"start": 0.1, "end": 0.01},
        "momentum": {"initial": 0.5, "final": 0.9, "switch_epoch": 1},
        "l2": 0.001,
    },
    "prior_momentum": {"prior_momentum": True},
    "more_solutions": {"n_solutions": 25},
    "noise": {"train_noise": {"fraction": 0.5, "p": 0.1}},
    "spin": {"visible": "spin"},
}

CONVERGED = {
    "damped": {},
    "newton_sor": {"solver": "newton_sor", "train_unique": False},
    "short_chunks": {"cuda_graph_sweeps": 3, "train_max_iter": 40},
    "cap": {"train_max_iter": 7, "cuda_graph_sweeps": 5},  # rows stopped by the cap
}


def _run(s, captured, device="cpu", record=graphs.eager_record, visible="bernoulli", x=None):
    """(machine, history, carried) of ``train`` from seed (0, "graphs"): eager, or with the
    captured steps (``captured``; on the CPU by ``record``, on CUDA by ``steps_for``)."""
    spec = dict(SPEC, visible={"prior": visible})
    if x is None:
        x = bars_and_stripes().repeat(4, 1).float()
        x = 2 * x - 1 if visible == "spin" else x
    x = x.to(device)
    g = seeded_generator(0, "graphs")
    m = build_machine(spec, x, 0.01, g).to(device)
    s = dataclasses.replace(s, cuda_graphs=captured)
    c = Carried.start(m, x, s, g)
    if captured and device == "cpu":
        kind = graphs.ChunkedSteps if s.train_iterations == "converge" else graphs.WholeSteps
        c.graphs = kind(m, s, record)
    m, history = train(m, x, s, g, progress=False, carried=c)
    return m, history, c


def _fixed(**kw):
    visible = kw.pop("visible", "bernoulli")
    return settings(**{"epochs": 3, "learning_rate": 0.1, **kw}), visible


def _converged(**kw):
    base = dict(epochs=3, learning_rate=0.1, train_iterations="converge", train_tol=1e-10)
    base.update(kw)
    return settings(**base)


def _parameters(m):
    return [*m.weights, *(v for p in m.priors for v in p.params().values())]


def test_a_cpu_run_is_the_eager_loop():
    """On the CPU nothing is captured whatever ``cuda_graphs`` says: the eager loop, bit for bit."""
    s, _ = _fixed()
    m = build_machine(SPEC, bars_and_stripes(), 0.01, seeded_generator(0, "x"))
    assert graphs.problem(m, s) == "not on a CUDA device (cpu)"
    assert graphs.steps_for(m, s) is None
    g1, g2 = seeded_generator(0, "graphs"), seeded_generator(0, "graphs")
    x = bars_and_stripes().repeat(4, 1).float()
    m1, h1 = train(build_machine(SPEC, x, 0.01, g1), x, s, g1, progress=False)
    s_off = dataclasses.replace(s, cuda_graphs=False)
    m2, h2 = train(build_machine(SPEC, x, 0.01, g2), x, s_off, g2, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(_parameters(m1), _parameters(m2), strict=True))
    assert [h["tap_ll"] for h in h1] == [h["tap_ll"] for h in h2]


def test_what_is_not_captured_says_why():
    x = bars_and_stripes()
    rbm = build_machine(SPEC, x, 0.01, seeded_generator(0, "x"))
    deep_spec = dict(SPEC, hidden=[{"prior": "bernoulli", "units": 6}] * 2)
    deep = build_machine(deep_spec, x, 0.01, seeded_generator(0, "x"))
    truncated = dict(SPEC, hidden=[{"prior": "truncated_gaussian", "units": 6}])
    gauss = build_machine(truncated, x, 0.01, seeded_generator(0, "x"))
    conv = settings(train_iterations="converge")
    cases = [
        (rbm, settings(cuda_graphs=False), "tap.cuda_graphs is false"),
        (rbm, settings(method="cd"), "method 'cd'"),
        (rbm, settings(inference="adatap"), "adaTAP"),
        (gauss, settings(), "truncated priors"),
        (deep, settings(), "deep machine's data term"),
        (rbm, dataclasses.replace(conv, solver="anderson"), "solver 'anderson'"),
    ]
    for machine, s, why in cases:
        assert why in graphs.problem(machine, s)
    # converged steps of a deep machine: the model's sweeps are captured, the clamped data term not
    assert graphs.problem(deep, conv) == "not on a CUDA device (cpu)"


@pytest.mark.parametrize("case", FIXED)
def test_whole_steps_train_the_eager_model_bit_for_bit(case):
    """Fixed-iteration steps run as one function on buffers of their own (the minibatch copied
    in, the parameters and momentum updated in place): the eager loop's parameters, momentum and
    evaluations, bit for bit (3 sweeps from data rows: no row stops early)."""
    s, visible = _fixed(**FIXED[case])
    m0, h0, c0 = _run(s, False, visible=visible)
    m1, h1, c1 = _run(s, True, visible=visible)
    assert isinstance(c1.graphs, graphs.WholeSteps) and c1.graphs.record.failed is None
    assert all(torch.equal(a, b) for a, b in zip(_parameters(m0), _parameters(m1), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(c0.velocity, c1.velocity, strict=True))
    assert [h["tap_ll"] for h in h0] == [h["tap_ll"] for h in h1]
    # the machine handed out is a copy: the next epoch's replays do not change it
    assert all(
        a is not b for a, b in zip(_parameters(m1), _parameters(c1.graphs.machine), strict=True)
    )


@pytest.mark.parametrize("case", CONVERGED)
def test_chunked_steps_train_the_eager_model(case):
    """Converged steps whose sweeps run in chunks with a check between them: the eager loop's
    model to rounding, and the same per-step statistics (iterations, converged rows, solutions)."""
    s = _converged(**CONVERGED[case])
    m0, h0, _ = _run(s, False)
    m1, h1, c1 = _run(s, True)
    assert isinstance(c1.graphs, graphs.ChunkedSteps) and c1.graphs.solve.record.failed is None
    for a, b in zip(_parameters(m0), _parameters(m1), strict=True):
        torch.testing.assert_close(b, a, rtol=0.0, atol=1e-6)
    keys = ("train_mean_iterations", "train_converged_fraction", "train_mean_solutions")
    for key in keys:
        assert [h[key] for h in h0] == [h[key] for h in h1]
    if case == "cap":
        assert h0[0]["train_converged_fraction"] < 1.0


def test_one_capture_serves_every_step_of_a_schedule():
    """A graph per step size, momentum and minibatch shape: one for a constant step size (kept
    across epochs), one per epoch for a decaying one, a few kept."""
    calls = []

    def counting(fn, state):
        calls.append(len(state))
        return fn

    _run(_fixed()[0], True, record=counting)
    assert len(calls) == 1
    calls.clear()
    decaying = _fixed(learning_rate={"start": 0.1, "end": 0.01})[0]
    _, _, carried = _run(dataclasses.replace(decaying, epochs=6), True, record=counting)
    assert len(calls) == 6 and len(carried.graphs.graphs) == 4
    calls.clear()
    _run(_converged(train_max_iter=100, cuda_graph_sweeps=10), True, record=counting)
    assert len(calls) == 2  # the first chunk and the settled one


def test_a_captured_step_that_diverges_names_its_batch(monkeypatch):
    """The divergence check of captured steps is a device flag read at the epoch's end: the error
    names the first batch whose update was not finite, as the eager check does."""
    real = tap.tap_gradients
    calls = []

    def blow_up_in_epoch_2(*args, **kw):
        grads = real(*args, **kw)
        calls.append(1)
        if len(calls) > 4:
            grads["weights"] = [torch.full_like(w, float("nan")) for w in grads["weights"]]
        return grads

    monkeypatch.setattr(tap, "tap_gradients", blow_up_in_epoch_2)
    x = bars_and_stripes()  # 30 rows: 3 batches of 10 per epoch
    with pytest.raises(TrainingError, match="diverged at epoch 2, batch 1: weights"):
        _run(settings(epochs=3), True, x=x.float())


def test_a_failed_capture_trains_eagerly_and_says_so():
    def broken(fn, state):
        raise RuntimeError("operation not permitted when stream is capturing")

    s, _ = _fixed()
    m0, _, _ = _run(s, False)
    with pytest.warns(UserWarning, match="CUDA graph capture failed.*not permitted"):
        m1, _, carried = _run(s, True, record=broken)
    assert "not permitted" in carried.graphs.record.failed
    assert all(torch.equal(a, b) for a, b in zip(_parameters(m0), _parameters(m1), strict=True))


def test_a_carried_state_pickles_without_its_captured_steps():
    """An estimator's carried state pickles (its captured steps hold graphs and closures, and are
    made again), and the run goes on from the copy as from the original."""
    import pickle

    s, _ = _fixed(epochs=2)
    _, _, carried = _run(s, True)
    assert carried.graphs is not None
    copy = pickle.loads(pickle.dumps(carried))
    assert copy.graphs is None and carried.graphs is not None
    x = bars_and_stripes().repeat(4, 1).float()
    more = dataclasses.replace(s, epochs=3)
    g1, g2 = seeded_generator(1, "more"), seeded_generator(1, "more")
    m1, _ = train(carried.machine, x, more, g1, progress=False, carried=carried, until=3)
    m2, _ = train(copy.machine, x, more, g2, progress=False, carried=copy, until=3)
    assert all(torch.equal(a, b) for a, b in zip(_parameters(m1), _parameters(m2), strict=True))


def test_graph_settings_are_checked_and_leave_the_fingerprint():
    with pytest.raises(TrainingError, match="cuda_graphs must be true or false"):
        settings(cuda_graphs="auto")
    with pytest.raises(TrainingError, match="cuda_graph_sweeps must be a positive integer"):
        settings(cuda_graph_sweeps=0)
    x = bars_and_stripes()
    m = build_machine(SPEC, x, 0.01, seeded_generator(7, "fp"))
    for base in (settings(), _converged()):
        fp = fingerprint(m, x, base)
        assert fingerprint(m, x, dataclasses.replace(base, cuda_graphs=False)) == fp
        assert fingerprint(m, x, dataclasses.replace(base, cuda_graph_sweeps=3)) == fp


# CUDA: the graphs captured and replayed, against the eager loop on the same device.


def _cuda_pair(s, x=None):
    """The eager and the captured run of ``s`` on CUDA (a failed capture shows in the captured
    steps' ``record.failed``)."""
    return _run(s, False, device="cuda", x=x), _run(s, True, device="cuda", x=x)


@CUDA
@pytest.mark.parametrize("case", ["constant", "schedules", "prior_momentum", "noise"])
def test_cuda_whole_steps_train_the_eager_model(case):
    s, _ = _fixed(**FIXED[case])
    (m0, h0, _), (m1, h1, c1) = _cuda_pair(s)
    assert isinstance(c1.graphs, graphs.WholeSteps) and c1.graphs.record.failed is None
    assert c1.graphs.graphs and all(
        getattr(r, "__self__", None).__class__ is torch.cuda.CUDAGraph
        for r in c1.graphs.graphs.values()
    )
    for a, b in zip(_parameters(m0), _parameters(m1), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(h0, h1, strict=True):
        assert b["tap_ll"] == pytest.approx(a["tap_ll"], rel=1e-5, abs=1e-5)


@CUDA
@pytest.mark.parametrize("case", CONVERGED)
def test_cuda_chunked_steps_train_the_eager_model(case):
    s = _converged(**CONVERGED[case])
    (m0, h0, _), (m1, h1, c1) = _cuda_pair(s)
    assert isinstance(c1.graphs, graphs.ChunkedSteps) and c1.graphs.solve.record.failed is None
    assert c1.graphs.solve.graphs
    for a, b in zip(_parameters(m0), _parameters(m1), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(h0, h1, strict=True):
        assert b["train_mean_iterations"] == pytest.approx(a["train_mean_iterations"], abs=0.5)


@CUDA
@pytest.mark.parametrize("fuse", [False, True])
def test_cuda_whole_steps_at_the_paper_shape(fuse):
    """784 x 500, 100 rows a batch, 3 sweeps: 20 steps captured against 20 eager ones."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2000, 784, generator=g) < 0.13).float()
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 500}]}
    s = settings(
        epochs=1, batch_size=100, learning_rate=0.005, l2=0.001, eval_samples=100, fuse=fuse
    )
    out = []
    for captured in (False, True):
        gen = seeded_generator(0, "paper_shape")
        m = build_machine(spec, x, 0.01, gen).to("cuda")
        run = dataclasses.replace(s, cuda_graphs=captured)
        c = Carried.start(m, x.cuda(), run, gen)
        m, _ = train(m, x.cuda(), run, gen, progress=False, carried=c)
        out.append((m, c))
    (m0, _), (m1, c1) = out
    assert isinstance(c1.graphs, graphs.WholeSteps) and c1.graphs.record.failed is None
    for a, b in zip(_parameters(m0), _parameters(m1), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
