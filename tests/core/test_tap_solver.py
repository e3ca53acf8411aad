"""The accelerated TAP solvers (``tap.solve(..., solver="anderson" | "newton_damped")``) against
Alg. 1."""

from __future__ import annotations

import pytest
import torch
from tiny_models import random_machine

from tapmachine.core import tap
from tapmachine.core.estimators import exact_log_partition
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussBernoulli, TruncatedGaussian
from tapmachine.core.tap import anderson as anderson_module
from tapmachine.core.tap import fused as fused_module
from tapmachine.core.tap.anderson import solve_layer
from tapmachine.core.tap.damped import mean_bounds

DT = torch.float64


def _undamped_sweep(machine, state):
    """The state after one undamped sweep of Alg. 1 from ``state`` (equal to it at a fixed
    point)."""
    return tap.solve_from(machine, state, damping=0.0, tol=0.0, max_iter=1)


def _residual(machine, state):
    """Largest change of any mean under one undamped sweep from ``state``: 0 at a fixed point."""
    one = _undamped_sweep(machine, state)
    return torch.cat([(x - y).abs() for x, y in zip(state.a, one.a, strict=True)], 1).amax(1)


CASES = [
    # (prior, layer sizes, coupling scale, seed): enumerable (2^12) and larger random machines
    (Bernoulli, (8, 4), 0.8, 0),
    (Bernoulli, (30, 12), 0.5, 1),
    (Spin, (10, 5), 0.3, 2),
    (TruncatedGaussian, (12, 6), 0.4, 3),
    (Bernoulli, (12, 8, 5), 0.6, 4),
]


def test_anderson_reaches_the_damped_fixed_point_from_the_same_start():
    """From the same data starts both solvers converge, to the same fixed point within 1e-6
    (a tight tolerance, far below the distance between distinct solutions), which is a fixed
    point of the undamped TAP equations; the accelerated solver needs fewer sweeps."""
    for prior_cls, sizes, scale, seed in CASES:
        m, g = random_machine(prior_cls, sizes, scale, seed)
        x = torch.rand(40, sizes[0], dtype=DT, generator=g)
        if prior_cls is Spin:
            x = 2.0 * x - 1.0
        damped = tap.solve(m, x, tol=1e-26, max_iter=20000)
        fast = tap.solve(m, x, tol=1e-26, max_iter=20000, solver="anderson")
        assert damped.converged.all() and fast.converged.all(), (prior_cls, sizes)
        gap = (damped.magnetisations() - fast.magnetisations()).abs().amax(1)
        assert float(gap.max()) < 1e-6, (prior_cls, sizes, float(gap.max()))
        assert float(_residual(m, fast).max()) < 1e-9
        for c in fast.c:
            assert bool((c >= 0).all())
        assert fast.iterations.double().median() < damped.iterations.double().median()


def test_anderson_clamped_and_enumerable_free_energy_agree():
    """Clamped inference of a deep machine and the TAP free energy at the solutions agree with
    Alg. 1's; on the enumerable RBM -F approximates the exact ln Z equally well."""
    m, g = random_machine(Bernoulli, (10, 6, 4), 0.5, 5)
    x = (torch.rand(20, 10, dtype=DT, generator=g) < 0.5).to(DT)
    damped = tap.solve(m, clamp=x, tol=1e-26, max_iter=20000)
    fast = tap.solve(m, clamp=x, tol=1e-26, max_iter=20000, solver="anderson")
    assert fast.clamped and fast.converged.all()
    torch.testing.assert_close(fast.a[0], x, rtol=0, atol=0)
    torch.testing.assert_close(fast.magnetisations(), damped.magnetisations(), rtol=0, atol=1e-6)
    rbm, g = random_machine(Bernoulli, (10, 4), 0.3, 6)
    x = torch.rand(10, 10, dtype=DT, generator=g)
    F_d = tap.free_energy(rbm, tap.solve(rbm, x, tol=1e-26, max_iter=5000))
    F_a = tap.free_energy(rbm, tap.solve(rbm, x, tol=1e-26, max_iter=5000, solver="anderson"))
    torch.testing.assert_close(F_a, F_d, rtol=0, atol=1e-9)
    assert abs(float(-F_a.mean()) - float(exact_log_partition(rbm))) < 0.05


@pytest.mark.parametrize(
    "prior",
    [
        Bernoulli(torch.randn(7, dtype=DT, generator=torch.Generator().manual_seed(8))),
        Spin(torch.randn(7, dtype=DT, generator=torch.Generator().manual_seed(9))),
        TruncatedGaussian(torch.zeros(7, dtype=DT), torch.ones(7, dtype=DT)),
        TruncatedGaussBernoulli(
            torch.full((7,), 0.3, dtype=DT),
            torch.zeros(7, dtype=DT),
            torch.ones(7, dtype=DT),
            lower=-1.0,
            upper=1.0,
        ),
    ],
)
def test_solve_layer_solves_each_units_self_consistency(prior):
    """B = A f_a(B, A) + h per unit, from a poor start, for strong Onsager terms (A down to -40);
    for binary units also under an infinite tilt (the mean then sits at the support's end)."""
    g = torch.Generator().manual_seed(10)
    A = -40.0 * torch.rand(30, 7, dtype=DT, generator=g)
    h = 20.0 * torch.randn(30, 7, dtype=DT, generator=g)
    B0 = 50.0 * torch.randn(30, 7, dtype=DT, generator=g)
    B, a, c = solve_layer(prior, A, h, B0)
    fa, fc = prior.moments(B, A)
    torch.testing.assert_close(a, fa, rtol=0, atol=1e-15)
    torch.testing.assert_close(c, fc, rtol=0, atol=1e-15)
    assert float((B - A * a - h).abs().max()) < 1e-9
    if not isinstance(prior, (Bernoulli, Spin)):
        return  # an infinite tilt is the binary channels' (noiseless) limit
    ext = (None, torch.full((30, 7), torch.inf, dtype=DT))
    B, a, _ = solve_layer(prior, A, h, B0, ext)
    torch.testing.assert_close(a, torch.ones_like(a))
    torch.testing.assert_close(B, h + A)


def test_stopped_rows_are_fixed_points_to_the_tolerance():
    """A row stops when its sweep moves the means by a mean square below tol (as Alg. 1's
    damped step): one more undamped Alg. 1 sweep from it moves them by the same order."""
    m, g = random_machine(Bernoulli, (9, 5), 0.7, 7)
    x = torch.rand(6, 9, dtype=DT, generator=g)
    state = tap.solve(m, x, tol=1e-10, max_iter=500, solver="anderson")
    assert state.converged.all()
    n = sum(m.sizes)
    again = _undamped_sweep(m, state)
    step = sum(((u - v) ** 2).sum(1) for u, v in zip(state.a, again.a, strict=True)) / n
    assert float(step.max()) < 1e-9


def test_rows_that_cycle_under_alg1_converge(cycling_rbm):
    """On the RBM where Alg. 1 at damping 0.5 cycles from every start, the accelerated solver
    (whose map solves each unit's Onsager self-feedback exactly) converges every row, each to
    a true fixed point, with means in the support."""
    m, x = cycling_rbm
    assert not tap.solve(m, x, damping=0.5, tol=1e-20, max_iter=2000).converged.any()
    state = tap.solve(m, x, damping=0.5, tol=1e-20, max_iter=2000, solver="anderson")
    assert state.converged.all()
    assert float(_residual(m, state).max()) < 1e-8
    for a, prior in zip(state.a, m.priors, strict=True):
        assert bool((a >= 0).all() and (a <= 1).all()), prior


def test_safeguard_falls_back_to_plain_steps_where_mixing_stalls(monkeypatch):
    """A strongly coupled 16 x 4 RBM on which Anderson mixing without the safeguard stalls on
    many rows (a root finder settling where the residual is small but not zero): with it,
    stalled rows take plain steps of the map, and every row reaches a true fixed point."""
    g = torch.Generator().manual_seed(26)
    W = 2.5 * torch.randn(16, 4, dtype=DT, generator=g)
    priors = (
        Bernoulli(torch.randn(16, dtype=DT, generator=g)),
        Bernoulli(torch.randn(4, dtype=DT, generator=g)),
    )
    m = BoltzmannMachine(priors, (W,))
    x = (torch.rand(50, 16, generator=g, dtype=DT) < 0.5).to(DT)
    stats = {}
    state = tap.solve(m, x, tol=1e-16, max_iter=500, solver="anderson", stats=stats)
    assert state.converged.all()
    assert int(stats["fallbacks"].sum()) > 0
    assert float(_residual(m, state).max()) < 1e-6
    monkeypatch.setattr(anderson_module, "_PATIENCE", 10**9)
    unguarded = tap.solve(m, x, tol=1e-16, max_iter=500, solver="anderson")
    assert float(unguarded.converged.double().mean()) < 0.9


@pytest.mark.slow
def test_converged_training_with_anderson_raises_the_exact_log_likelihood():
    """Alg. 2 with Alg. 1 replaced by the accelerated solver (tap.solver: anderson) learns
    bars-and-stripes: the exact log-likelihood (enumeration) rises."""
    from tiny_models import converged_training

    # the evaluation is not what is tested (and slow late in training)
    before, after, history = converged_training(
        "bas-converge-anderson", solver="anderson", evaluate=False
    )
    assert after > before + 1.0, (before, after)
    assert history[-1]["train_converged_fraction"] > 0.5


@pytest.mark.slow
def test_converged_training_with_newton_sor_raises_the_exact_log_likelihood():
    """Alg. 2 with Alg. 1 replaced by the over-relaxed per-unit Newton solver (tap.solver:
    newton_sor) learns bars-and-stripes: the exact log-likelihood (enumeration) rises."""
    from tiny_models import converged_training

    before, after, history = converged_training(
        "bas-converge-newton-sor", solver="newton_sor", evaluate=False
    )
    assert after > before + 1.0, (before, after)
    assert history[-1]["train_converged_fraction"] > 0.5


@pytest.mark.slow  # torch.compile of the fused iteration: about 10 s
@pytest.mark.parametrize("case", [0, 2, 4])
def test_fused_damped_iteration_matches_eager(case):
    """``fuse=True`` (the compiled layer update) iterates Alg. 1 like the eager sweep: the same
    iterates to 1e-12 in float64 after 40 damped iterations, clamped or not, with a visible tilt
    (that layer runs eager) and per-row convergence."""
    prior_cls, sizes, scale, seed = CASES[case]
    machine, g = random_machine(prior_cls, sizes, scale, seed)
    x = torch.rand(7, sizes[0], dtype=DT, generator=g)
    tilt = (None, 0.3 * torch.randn(7, sizes[0], dtype=DT, generator=g))
    for kwargs in ({}, {"clamp": True}, {"visible_tilt": tilt}):
        eager = tap.solve(machine, x, damping=0.5, tol=1e-10, max_iter=40, **kwargs)
        fused = tap.solve(machine, x, damping=0.5, tol=1e-10, max_iter=40, fuse=True, **kwargs)
        assert torch.equal(eager.iterations, fused.iterations)
        for part in ("a", "c", "A", "B"):
            for e, f in zip(getattr(eager, part), getattr(fused, part), strict=True):
                torch.testing.assert_close(f, e, rtol=0.0, atol=1e-12)
    assert fused_module._compiled is not None and not fused_module._failed


def test_fused_update_falls_back_to_eager_when_compiling_fails(monkeypatch):
    """A compiler failure warns once and leaves the eager update: the same iterates."""

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(fused_module, "_compiled", None)
    monkeypatch.setattr(fused_module, "_failed", False)
    monkeypatch.setattr(torch, "compile", broken)
    machine, g = random_machine(Bernoulli, (8, 4), 0.8, 0)
    x = torch.rand(5, 8, dtype=DT, generator=g)
    with pytest.warns(UserWarning, match="torch.compile failed"):
        fused = tap.solve(machine, x, tol=1e-10, max_iter=30, fuse=True)
    eager = tap.solve(machine, x, tol=1e-10, max_iter=30)
    assert fused_module._failed
    assert torch.equal(fused.iterations, eager.iterations)
    for f, e in zip(fused.a, eager.a, strict=True):
        torch.testing.assert_close(f, e, rtol=0.0, atol=1e-12)


def _tap_equations_residual(machine, state, tilt=None):
    """Largest |f_a(B, A) - a| and |f_c(B, A) - c| over all rows and iterated units, with A, B
    recomputed from the state's means and variances by eqs. (33)-(34) (plus a visible tilt):
    0 at a TAP solution, whatever solver produced it."""
    W = machine.weights
    worst = [0.0, 0.0]
    for l in range(1 if state.clamped else 0, machine.n_layers):
        A = torch.zeros_like(state.a[l])
        h = torch.zeros_like(state.a[l])
        if l > 0:
            A -= state.c[l - 1] @ (W[l - 1] ** 2)
            h += state.a[l - 1] @ W[l - 1]
        if l < len(W):
            A -= state.c[l + 1] @ (W[l] ** 2).T
            h += state.a[l + 1] @ W[l].T
        B = A * state.a[l] + h
        if l == 0 and tilt is not None:
            A, B = A + tilt[0], B + tilt[1]
        fa, fc = machine.priors[l].moments(B, A)
        worst[0] = max(worst[0], float((fa - state.a[l]).abs().max()))
        worst[1] = max(worst[1], float((fc - state.c[l]).abs().max()))
    return worst


def _gauss_bernoulli_rbm(seed):
    g = torch.Generator().manual_seed(seed)
    visible = TruncatedGaussBernoulli(
        0.2 + 0.6 * torch.rand(10, dtype=DT, generator=g),
        torch.randn(10, dtype=DT, generator=g),
        1.0 + torch.rand(10, dtype=DT, generator=g),
        lower=-1.0,
        upper=1.0,
    )
    hidden = Bernoulli(torch.randn(5, dtype=DT, generator=g))
    W = 0.5 * torch.randn(10, 5, dtype=DT, generator=g)
    return BoltzmannMachine((visible, hidden), (W,)), g


NEWTON_SOLVERS = ("newton_damped", "newton_sor")


@pytest.mark.parametrize("solver", NEWTON_SOLVERS)
@pytest.mark.parametrize("case", range(len(CASES) + 1))
def test_newton_damped_reaches_the_damped_fixed_point_from_the_same_start(case, solver):
    """Per-unit Newton damping (``solver="newton_damped"``, and over-relaxed: ``"newton_sor"``)
    and Alg. 1 converge from the same data starts to the same fixed point within 1e-6, free,
    clamped and under a visible tilt, for every prior; the point solves the TAP equations
    (residual recomputed from eqs. 33-35), and it takes no more sweeps than Alg. 1 at 0.5."""
    if case < len(CASES):
        prior_cls, sizes, scale, seed = CASES[case]
        m, g = random_machine(prior_cls, sizes, scale, seed)
    else:
        prior_cls, sizes = TruncatedGaussBernoulli, (10, 5)
        m, g = _gauss_bernoulli_rbm(11)
    x = torch.rand(40, sizes[0], dtype=DT, generator=g)
    if prior_cls in (Spin, TruncatedGaussBernoulli):
        x = 2.0 * x - 1.0
    tilt = (
        0.5 * torch.rand(40, sizes[0], dtype=DT, generator=g),
        torch.randn(40, sizes[0], dtype=DT, generator=g),
    )
    if prior_cls is Spin:
        tilt = (None, tilt[1])  # the quadratic tilt is a constant for spins
    variants = ({}, {"clamp": True}, {"visible_tilt": tilt})
    for kwargs in variants:
        damped = tap.solve(m, x, tol=1e-26, max_iter=20000, **kwargs)
        newton = tap.solve(m, x, tol=1e-26, max_iter=20000, solver=solver, **kwargs)
        assert damped.converged.all() and newton.converged.all(), (prior_cls, kwargs)
        gap = (damped.magnetisations() - newton.magnetisations()).abs().amax(1)
        assert float(gap.max()) < 1e-6, (prior_cls, kwargs, float(gap.max()))
        tilted = None
        if "visible_tilt" in kwargs:
            tilted = (torch.zeros_like(x) if tilt[0] is None else tilt[0], tilt[1])
        # the stop rule reads the means; the variances follow at Alg. 1's damping
        a_gap, c_gap = _tap_equations_residual(m, newton, tilted)
        assert a_gap < 1e-11 and c_gap < 1e-8, (kwargs, a_gap, c_gap)
        for a, c, prior in zip(newton.a, newton.c, m.priors, strict=True):
            lower, upper = mean_bounds(prior)
            assert bool((c >= 0).all() and (a >= lower).all() and (a <= upper).all())
        if "clamp" in kwargs:
            torch.testing.assert_close(newton.a[0], x, rtol=0, atol=0)
        assert newton.iterations.double().median() <= damped.iterations.double().median()


@pytest.mark.parametrize("solver", NEWTON_SOLVERS)
def test_newton_damped_converges_where_alg1_cycles(cycling_rbm, solver):
    """On the RBM where Alg. 1 at damping 0.5 cycles from every start (unit self-feedback
    |A f_c| of several), the per-unit Newton damping converges every row to a TAP solution
    with means in the support, mostly Alg. 1's fixed points where Alg. 1 reaches them at 0.95."""
    m, x = cycling_rbm
    assert not tap.solve(m, x, damping=0.5, tol=1e-20, max_iter=2000).converged.any()
    state = tap.solve(m, x, damping=0.5, tol=1e-20, max_iter=2000, solver=solver)
    assert state.converged.all()
    a_gap, c_gap = _tap_equations_residual(m, state)
    assert a_gap < 1e-9 and c_gap < 1e-8, (a_gap, c_gap)
    for a in state.a:
        assert bool((a >= 0).all() and (a <= 1).all())
    slow = tap.solve(m, x, damping=0.95, tol=1e-24, max_iter=20000)
    assert slow.converged.all()
    gap = (slow.magnetisations() - state.magnetisations()).abs().amax(1)
    assert float((gap < 1e-6).double().mean()) > 0.8


def test_newton_damped_first_sweep_and_stop_rule():
    """Defaulted hidden means and variances are placeholders (the first hidden update is
    Alg. 1's undamped one, as for ``damped``), and a row stops once (1 - damping)^2 times its
    mean squared residual is below tol: one more undamped sweep from it moves the means by a
    mean square of the same order."""
    m, g = random_machine(Bernoulli, (9, 5), 0.7, 7)
    x = torch.rand(6, 9, dtype=DT, generator=g)
    one = tap.solve(m, x, tol=0.0, max_iter=1, solver="newton_damped")
    alg1 = tap.solve(m, x, tol=0.0, max_iter=1, damping=0.5)
    torch.testing.assert_close(one.a[1], alg1.a[1], rtol=0, atol=1e-15)
    torch.testing.assert_close(one.c[1], alg1.c[1], rtol=0, atol=1e-15)
    state = tap.solve(m, x, tol=1e-10, max_iter=500, solver="newton_damped")
    assert state.converged.all()
    again = _undamped_sweep(m, state)
    step = sum(((u - v) ** 2).sum(1) for u, v in zip(state.a, again.a, strict=True)) / sum(m.sizes)
    assert float(step.max()) < 1e-9


@pytest.mark.parametrize("solver", ["damped", "newton_sor"])
def test_working_set_sizes_replay_the_rows_a_solve_sweeps(monkeypatch, solver):
    """``tap.working_set_sizes`` of a solve's per-row iterations equals the rows the solve swept
    at each sweep (recorded inside it): rows that stop at different sweeps are dropped in
    batches of at least a sixteenth of the working set."""
    from tapmachine.core.tap import inference

    machine, g = random_machine(Bernoulli, (30, 12), 0.9, 7)
    starts = torch.rand(64, 30, generator=g, dtype=DT)
    # a third of the rows start near their fixed points and stop sweeps before the others
    near = tap.solve(machine, starts[:20], damping=0.5, tol=1e-10, max_iter=400, solver=solver)
    starts[:20] = near.a[0]
    swept = []
    original = inference._sweep_once

    def recording(t, work, *args):
        swept.append(int(work.pending.numel()))
        return original(t, work, *args)

    monkeypatch.setattr(inference, "_sweep_once", recording)
    state = tap.solve(machine, starts, damping=0.5, tol=1e-12, max_iter=400, solver=solver)
    its = state.iterations
    assert len(set(its.tolist())) >= 4 and int(its.min()) + 3 < int(its.max())
    assert swept == tap.working_set_sizes(state.iterations.tolist())
    assert swept[0] == 64 and min(swept) < 64 and len(swept) == int(its.max())
    assert tap.working_set_sizes([]) == []
    assert tap.working_set_sizes([3, 3]) == [2, 2, 2]


@pytest.mark.parametrize("solver", ["damped", "anderson", "newton_sor"])
def test_solutions_are_ordinary_tensors_callers_may_update_and_differentiate(solver):
    """``solve`` sweeps in inference mode; what it returns is made outside it: a caller may
    update the solutions in place and use them under autograd (neither is allowed on an
    inference tensor), and partly converged solves (rows frozen early) return the same."""
    m, g = random_machine(TruncatedGaussian, (10, 6), 0.4, 11)
    x = torch.rand(5, 10, dtype=DT, generator=g)
    for max_iter in (3, 500):
        state = tap.solve(m, x, tol=1e-10, max_iter=max_iter, solver=solver)
        fields = [*state.a, *state.c, *state.A, *state.B, state.iterations, state.converged]
        assert not any(t.is_inference() for t in fields)
        weight = torch.ones(6, dtype=DT, requires_grad=True)
        (state.a[1] * weight).sum().backward()
        torch.testing.assert_close(weight.grad, state.a[1].sum(0))
        state.a[0].mul_(0.5)
        state.iterations.add_(1)


def test_relaxation_is_newton_sors_omega_everywhere_a_solve_is_made(cycling_rbm):
    """``relaxation`` replaces newton_sor's omega and nothing else: at 1.4 the solve is the
    default one to the bit, at 1.6 it takes other sweeps to TAP solutions of the same equations;
    newton_damped ignores it; ``solve_with_retry`` and training's ``solve_for_gradient`` pass it
    on from ``SolverSettings``; outside [1, 2) it is refused."""
    from tapmachine.train.tap_gradient import solve_for_gradient

    m, x = cycling_rbm
    kw = {"damping": 0.5, "tol": 1e-20, "max_iter": 2000}
    default = tap.solve(m, x, solver="newton_sor", **kw)
    same = tap.solve(m, x, solver="newton_sor", relaxation=1.4, **kw)
    assert torch.equal(default.magnetisations(), same.magnetisations())
    faster = tap.solve(m, x, solver="newton_sor", relaxation=1.6, **kw)
    assert faster.converged.all() and not torch.equal(faster.iterations, default.iterations)
    a_gap, c_gap = _tap_equations_residual(m, faster)
    assert a_gap < 1e-9 and c_gap < 1e-8, (a_gap, c_gap)
    plain = tap.solve(m, x, solver="newton_damped", **kw)
    ignored = tap.solve(m, x, solver="newton_damped", relaxation=1.6, **kw)
    assert torch.equal(plain.magnetisations(), ignored.magnetisations())
    settings = tap.SolverSettings(solver="newton_sor", relaxation=1.6, **kw)
    for made in (tap.solve_with_retry(m, x, settings), solve_for_gradient(m, x, settings)):
        assert torch.equal(made.iterations, faster.iterations)
        assert torch.equal(made.magnetisations(), faster.magnetisations())
    with pytest.raises(ValueError, match="relaxation must be in"):
        tap.SolverSettings(relaxation=2.0)
