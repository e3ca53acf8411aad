"""Tests of TAP inference, free energy, log-likelihood and gradients against exact answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tapmachine.core import tap
from tapmachine.core.estimators import exact_log_partition
from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussBernoulli, TruncatedGaussian

DT = torch.float64
# Fields chosen so that every unit has a third cumulant of the same sign and couplings are
# positive: the O(W^3) error of TAP is then coherent (no accidental cancellation) and dominates
# the O(W^4) terms over the range of scales used below.
FIELD_MEAN = {Bernoulli: -1.4, Spin: 0.5}
# Smaller couplings for spins (x^2 = 1 makes their effective coupling larger).
SCALES = {Bernoulli: (0.004, 0.008, 0.016), Spin: (0.001, 0.002, 0.004)}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _fields(prior_cls, n, g):
    return FIELD_MEAN[prior_cls] + 0.3 * torch.randn(n, dtype=DT, generator=g)


def _random_machine(prior_cls, sizes, scale, g, positive=False):
    """A layered machine with random fields and couplings scale * W0 (W0 ~ N(0, 1) or |N|)."""
    ws = []
    for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True):
        W0 = torch.randn(n0, n1, dtype=DT, generator=g)
        ws.append(scale * (W0.abs() if positive else W0))
    ps = [prior_cls(torch.randn(n, dtype=DT, generator=g)) for n in sizes]
    return BoltzmannMachine(tuple(ps), tuple(ws))


def _configurations(prior, n):
    codes = torch.arange(2**n)
    bits = ((codes[:, None] >> torch.arange(n)) & 1).to(DT)
    return 2.0 * bits - 1.0 if isinstance(prior, Spin) else bits


def _exact_three_layer(machine, x):
    """Exact ln Z and ln P(x) of a 3-layer binary machine: enumerate layers 0 and 2."""
    p0, p1, p2 = machine.priors
    W0, W1 = machine.weights
    X0, X2 = _configurations(p0, p0.size), _configurations(p2, p2.size)
    lp2 = p2.log_prob(X2).sum(-1)

    def summed(x0):
        B = (x0 @ W0)[:, None, :] + (X2 @ W1.T)[None, :, :]
        inner = lp2[None, :] + p1.log_partition(B, torch.zeros_like(B)).sum(-1)
        return p0.log_prob(x0).sum(-1) + torch.logsumexp(inner, 1)

    log_z = torch.logsumexp(summed(X0), 0)
    return log_z, summed(x) - log_z


def _variational_neg_free_energy(machine, a, c, B, A, clamped=False):
    """Eq. (36) for a layered machine, written independently of tap.free_energy."""
    total = 0.0
    for l, prior in enumerate(machine.priors):
        if clamped and l == 0:
            continue
        total = total + (
            prior.log_partition(B[l], A[l]) - B[l] * a[l] + 0.5 * A[l] * (a[l] ** 2 + c[l])
        ).sum(-1)
    for l, W in enumerate(machine.weights):
        total = total + torch.einsum("ki,ij,kj->k", a[l], W, a[l + 1])
        total = total + 0.5 * torch.einsum("ki,ij,kj->k", c[l], W**2, c[l + 1])
    return total


def _slope(scales, errors):
    return np.polyfit(np.log(scales), np.log(np.asarray(errors)), 1)[0]


# --------------------------------------------------------------------------------------------
# Accuracy against exact enumeration
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_tap_free_energy_error_is_third_order_rbm(prior_cls):
    """|-F_TAP - ln Z| ~ s^3 for W = s W0: the Onsager term cancels the O(s^2) error."""
    Nv, Nh = 12, 8
    for seed in range(2):
        g = _gen(seed)
        U0, U1 = _fields(prior_cls, Nv, g), _fields(prior_cls, Nh, g)
        W0 = torch.randn(Nv, Nh, dtype=DT, generator=g).abs()
        errors, naive = [], []
        for s in SCALES[prior_cls]:
            m = RBM(s * W0, prior_cls(U0), prior_cls(U1))
            init = torch.rand(6, Nv, dtype=DT, generator=g)
            state = tap.solve(m, init, tol=1e-28, max_iter=1000)
            assert state.converged.all()
            neg_F = -tap.free_energy(m, state)
            # a single solution at weak coupling, whichever the initialisation
            assert torch.allclose(neg_F, neg_F[0], rtol=0, atol=1e-12)
            log_z = exact_log_partition(m)
            errors.append(abs(float(neg_F[0] - log_z)))
            # Without the Onsager term (naive mean field) the error is O(s^2).
            onsager = 0.5 * ((state.c[0] @ m.W**2) * state.c[1]).sum(-1)
            naive.append(abs(float(neg_F[0] - onsager[0] - log_z)))
        assert 2.8 <= _slope(SCALES[prior_cls], errors) <= 3.3
        assert 1.8 <= _slope(SCALES[prior_cls], naive) <= 2.2


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_tap_third_order_three_layer(prior_cls):
    """Deep machine (App. E): -F_TAP vs ln Z and the clamped TAP log-likelihood vs ln P(x)."""
    sizes = (7, 6, 5)
    g = _gen(3)
    U = [_fields(prior_cls, n, g) for n in sizes]
    W0 = [
        torch.randn(n0, n1, dtype=DT, generator=g).abs()
        for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    x = _configurations(prior_cls(U[0]), sizes[0])[
        torch.randint(0, 2 ** sizes[0], (3,), generator=g)
    ]
    scales = [2 * s for s in SCALES[prior_cls]]
    errs_z, errs_ll = [], []
    for s in scales:
        m = BoltzmannMachine(tuple(prior_cls(u) for u in U), tuple(s * w for w in W0))
        state = tap.solve(m, torch.rand(3, sizes[0], dtype=DT, generator=g), tol=1e-28)
        assert state.converged.all()
        log_z, log_px = _exact_three_layer(m, x)
        errs_z.append(float((-tap.free_energy(m, state) - log_z).abs().max()))
        ll = tap.log_likelihood(m, x, state, tol=1e-28)
        errs_ll.append(float((ll - log_px).abs().max()))
    assert 2.8 <= _slope(scales, errs_z) <= 3.3
    assert 2.8 <= _slope(scales, errs_ll) <= 3.3


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_log_likelihood_sign_convention_rbm(prior_cls):
    """Eq. (39): ln P_TAP(x) - ln P(x) = mean_k F_k + ln Z exactly (the data term is exact)."""
    g = _gen(4)
    m = _random_machine(prior_cls, (10, 6), 0.2, g)
    x = _configurations(m.visible, 10)[torch.randint(0, 1024, (5,), generator=g)]
    state = tap.solve(m, x, tol=1e-20)
    log_z = exact_log_partition(m)
    exact = -m.free_energy_visible(x) - log_z
    ll = tap.log_likelihood(m, x, state)
    expected = exact + tap.free_energy(m, state).mean() + log_z
    torch.testing.assert_close(ll, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(tap.log_likelihood(m, x, state, per_unit=True), ll / 16)
    # and the TAP estimate is close to the truth for these moderate couplings
    assert float((ll - exact).abs().max()) < 0.05


def test_clamped_inference_is_exact_for_rbm():
    """solve(..., clamp=x) on an RBM reproduces the closed-form clamped term of eq. (39)."""
    g = _gen(5)
    m = _random_machine(Bernoulli, (9, 7), 0.5, g)
    x = torch.bernoulli(torch.full((4, 9), 0.5, dtype=DT), generator=g)
    state = tap.solve(m, clamp=x, damping=0.0, tol=1e-24)
    assert state.clamped and state.converged.all()
    assert torch.equal(state.a[0], x) and torch.all(state.c[0] == 0)
    B = x @ m.W
    closed = m.hidden.log_partition(B, torch.zeros_like(B)).sum(-1)
    torch.testing.assert_close(-tap.free_energy(m, state), closed, rtol=0, atol=1e-12)
    ref = tap.clamped_state(m, x)
    torch.testing.assert_close(state.a[1], ref.a[1], rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Stationarity and gradients
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
@pytest.mark.parametrize("sizes", [(10, 7), (8, 6, 5)])
def test_solution_is_stationary_point_of_free_energy(prior_cls, sizes):
    """At convergence the gradient of eq. (36) w.r.t. a, c, B, A of every layer vanishes."""
    g = _gen(6)
    m = _random_machine(prior_cls, sizes, 0.4, g)
    state = tap.solve(m, torch.rand(5, sizes[0], dtype=DT, generator=g), tol=1e-30, max_iter=500)
    assert state.converged.all()
    variables = [[t.clone().requires_grad_(True) for t in ts] for ts in (state.a, state.c)]
    variables += [[t.clone().requires_grad_(True) for t in ts] for ts in (state.B, state.A)]
    value = _variational_neg_free_energy(m, *variables)
    torch.testing.assert_close(value, -tap.free_energy(m, state), rtol=0, atol=1e-12)
    flat = [t for ts in variables for t in ts]
    grads = torch.autograd.grad(value.sum(), flat)
    # tolerance: the iterates move by < 1e-15 per step; allow 1e-9 on every partial derivative
    for grad in grads:
        assert float(grad.abs().max()) < 1e-9
    # and a perturbed point is not stationary
    a_shift = [t.detach() + 0.01 for t in state.a]
    a_shift = [t.requires_grad_(True) for t in a_shift]
    moved = _variational_neg_free_energy(m, a_shift, state.c, state.B, state.A)
    assert float(torch.autograd.grad(moved.sum(), a_shift[0])[0].abs().max()) > 1e-4


@pytest.mark.parametrize("sizes", [(10, 7), (8, 6, 5)])
def test_free_energy_terms_are_the_parts_of_eq_36(sizes):
    """Each part equals its line of eq. (36) written out here, and together they are -F; a
    clamped state has no visible site term; at W = 0 every part vanishes (normalised priors)."""
    g = _gen(7)
    m = _random_machine(Bernoulli, sizes, 0.4, g)
    state = tap.solve(m, torch.rand(5, sizes[0], dtype=DT, generator=g), tol=1e-24, max_iter=500)
    assert state.converged.all()
    terms = tap.free_energy_terms(m, state)
    assert tuple(terms) == tap.FREE_ENERGY_TERMS

    def site(l):
        p, a, c, B, A = m.priors[l], state.a[l], state.c[l], state.B[l], state.A[l]
        return (p.log_partition(B, A) - B * a + 0.5 * A * (a**2 + c)).sum(-1)

    mean_field = sum(
        torch.einsum("ki,ij,kj->k", state.a[l], W, state.a[l + 1]) for l, W in enumerate(m.weights)
    )
    onsager = sum(
        0.5 * torch.einsum("ki,ij,kj->k", state.c[l], W**2, state.c[l + 1])
        for l, W in enumerate(m.weights)
    )
    torch.testing.assert_close(terms["site_visible"], site(0), rtol=0, atol=1e-12)
    hidden = sum(site(l) for l in range(1, len(sizes)))
    torch.testing.assert_close(terms["site_hidden"], hidden, rtol=0, atol=1e-12)
    torch.testing.assert_close(terms["mean_field"], mean_field, rtol=0, atol=1e-12)
    torch.testing.assert_close(terms["onsager"], onsager, rtol=0, atol=1e-12)
    assert float(onsager.min()) > 0  # c > 0 for binary units
    total = sum(terms.values())
    torch.testing.assert_close(total, -tap.free_energy(m, state), rtol=0, atol=1e-12)

    x = torch.bernoulli(torch.full((3, sizes[0]), 0.5, dtype=DT), generator=g)
    clamped = tap.clamped_state(m, x, tol=1e-24, max_iter=500)
    parts = tap.free_energy_terms(m, clamped)
    assert float(parts["site_visible"].abs().max()) == 0.0
    torch.testing.assert_close(
        sum(parts.values()), -tap.free_energy(m, clamped), rtol=0, atol=1e-12
    )

    free = BoltzmannMachine(m.priors, tuple(torch.zeros_like(W) for W in m.weights))
    zero = tap.free_energy_terms(free, tap.solve(free, state.a[0], tol=1e-24))
    for name, value in zero.items():
        assert float(value.abs().max()) < 1e-12, name


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_energy_normaliser_links_the_two_conventions_of_ln_z(prior_cls):
    """ln sum_{v,h} e^{U.v + V.h + v W h} (the RBM's usual energy, by brute force) equals
    ln Z of eq. (36)'s normalised priors plus ``energy_normaliser``; NaN for other units."""
    g = _gen(8)
    m = _random_machine(prior_cls, (6, 4), 0.5, g)
    V, H = (_configurations(p, p.size) for p in m.priors)
    U0, U1 = (p.params()["U"] for p in m.priors)
    log_w = (V @ U0)[:, None] + (H @ U1)[None, :] + V @ m.W @ H.T
    brute = float(torch.logsumexp(log_w.flatten(), 0))
    log_z = float(exact_log_partition(m))
    assert abs(log_z + tap.energy_normaliser(m) - brute) < 1e-10
    assert abs(tap.energy_normaliser(m)) > 1.0  # the conventions do differ here
    zeros = torch.zeros(6, dtype=DT)
    gauss = BoltzmannMachine((TruncatedGaussian(zeros, zeros + 1), m.priors[1]), m.weights)
    assert math.isnan(tap.energy_normaliser(gauss))


def _autograd_reference(machine, x, states, clamped):
    """Autograd of the batch-mean TAP log-likelihood w.r.t. W and prior parameters."""
    weights = [W.clone().requires_grad_(True) for W in machine.weights]
    params = [
        {k: v.clone().requires_grad_(True) for k, v in p.params().items()} for p in machine.priors
    ]
    m = BoltzmannMachine(
        tuple(p.replace(**q) for p, q in zip(machine.priors, params, strict=True)), tuple(weights)
    )
    ll = tap.log_likelihood(m, x, states.detach(), clamped=clamped).mean()
    leaves = weights + [v for q in params for v in q.values()]
    grads = torch.autograd.grad(ll, leaves)
    n_w = len(weights)
    out_p, i = [], n_w
    for q in params:
        out_p.append({k: grads[i + j] for j, k in enumerate(q)})
        i += len(q)
    return list(grads[:n_w]), out_p


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
@pytest.mark.parametrize("sizes", [(9, 6), (8, 6, 4)])
def test_gradients_match_autograd_of_log_likelihood(prior_cls, sizes):
    """Eqs. (40)-(42) (App. E 126-129 when deep) = d/dtheta of the mean of eq. (39)."""
    g = _gen(7)
    m = _random_machine(prior_cls, sizes, 0.5, g)
    x = _configurations(m.visible, sizes[0])[torch.randint(0, 2 ** sizes[0], (6,), generator=g)]
    # any fixed states will do: use a few unconverged iterations from random points
    states = tap.solve(m, torch.rand(4, sizes[0], dtype=DT, generator=g), max_iter=3)
    clamped = tap.clamped_state(m, x, max_iter=4)
    got = tap.tap_gradients(m, x, states, clamped=clamped)
    want_w, want_p = _autograd_reference(m, x, states, clamped)
    for a, b in zip(got["weights"], want_w, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert len(got["priors"]) == len(sizes)
    for a, b in zip(got["priors"], want_p, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-10, atol=1e-12)


def test_gradients_rbm_are_eqs_40_to_42():
    """Spell out eq. (40) for an RBM without a precomputed clamped state."""
    g = _gen(8)
    m = _random_machine(Bernoulli, (7, 5), 0.5, g)
    x = torch.bernoulli(torch.full((6, 7), 0.4, dtype=DT), generator=g)
    states = tap.solve(m, torch.rand(3, 7, dtype=DT, generator=g), tol=1e-20)
    got = tap.tap_gradients(m, x, states)
    fa = torch.sigmoid(x @ m.W + m.hidden.U)
    a_v, a_h, c_v, c_h = states.a[0], states.a[1], states.c[0], states.c[1]
    dW = x.T @ fa / 6 - (a_v.T @ a_h + m.W * (c_v.T @ c_h)) / 3
    torch.testing.assert_close(got["weights"][0], dW)
    dU_v = (x - torch.sigmoid(m.visible.U)).mean(0) - (a_v - torch.sigmoid(m.visible.U)).mean(0)
    torch.testing.assert_close(got["priors"][0]["U"], dU_v)


# --------------------------------------------------------------------------------------------
# Iteration control
# --------------------------------------------------------------------------------------------


def test_convergence_mask_and_iteration_counts():
    g = _gen(9)
    m = _random_machine(Bernoulli, (10, 6), 0.4, g)
    init = torch.rand(5, 10, dtype=DT, generator=g)
    fixed = tap.solve(m, init, damping=0.0, tol=1e-30, max_iter=1000)
    assert fixed.converged.all()
    # Rows started at a fixed point converge in one iteration; rows mixed with fresh starts
    # keep their own counts and are frozen at their values.
    start = torch.cat([fixed.a[0][:2], init[2:]])
    c_start = torch.cat([fixed.c[0][:2], torch.zeros(3, 10, dtype=DT)])
    hidden = torch.cat([fixed.a[1][:2], torch.full((3, 6), 0.5, dtype=DT)])
    state = tap.solve(m, start, c_start, tol=1e-20, max_iter=1000, a_hidden=[hidden])
    assert state.converged.all()
    assert state.iterations[:2].tolist() == [1, 1]
    assert (state.iterations[2:] > 5).all()
    torch.testing.assert_close(state.a[0][:2], fixed.a[0][:2], rtol=0, atol=1e-14)
    # Batched solve equals row-by-row solves (freezing does not disturb other rows).
    for k in range(5):
        single = tap.solve(m, start[k : k + 1], c_start[k : k + 1], tol=1e-20, a_hidden=[hidden[k]])
        assert int(single.iterations) == int(state.iterations[k])
        torch.testing.assert_close(single.a[1][0], state.a[1][k], rtol=0, atol=1e-14)
        torch.testing.assert_close(single.B[0][0], state.B[0][k], rtol=0, atol=1e-14)
    # max_iter = 1 leaves fresh starts unconverged, with one iteration recorded.
    short = tap.solve(m, init, max_iter=1)
    assert not short.converged.any() and short.iterations.tolist() == [1] * 5
    # A loose tolerance converges earlier than a tight one, to nearby points.
    loose = tap.solve(m, init, tol=1e-6)
    tight = tap.solve(m, init, tol=1e-16)
    assert (loose.iterations < tight.iterations).all() and loose.converged.all()
    assert float((loose.a[0] - tight.a[0]).abs().max()) < 1e-2


def test_finished_rows_left_in_place_keep_their_results():
    """Rows that converge while too few to compact keep iterating; their stored values must be
    those at convergence, and rows still running at max_iter are reported unconverged."""
    g = _gen(22)
    m = _random_machine(Bernoulli, (10, 6), 0.6, g)
    init = torch.rand(40, 10, dtype=DT, generator=g)
    first, second = sorted(tap.solve(m, init, tol=1e-9, max_iter=1000).iterations.tolist())[:2]
    assert first < second  # one row of 40 converges early and stays in the working set
    capped = tap.solve(m, init, tol=1e-9, max_iter=second)
    assert 0 < int(capped.converged.sum()) < 40
    for k in range(40):
        one = tap.solve(m, init[k : k + 1], tol=1e-9, max_iter=second)
        assert bool(one.converged[0]) == bool(capped.converged[k])
        assert int(one.iterations[0]) == int(capped.iterations[k])
        torch.testing.assert_close(one.a[0][0], capped.a[0][k], rtol=0, atol=1e-13)
        torch.testing.assert_close(one.A[1][0], capped.A[1][k], rtol=0, atol=1e-13)


def test_damping_convention_and_fields():
    """One damped step is damping * old + (1 - damping) * Alg. 1 update; A, B as in Alg. 1."""
    g = _gen(10)
    m = _random_machine(Spin, (6, 4), 0.7, g)
    a0 = 2 * torch.rand(3, 6, dtype=DT, generator=g) - 1
    c0 = 1 - a0**2
    h0 = 2 * torch.rand(3, 4, dtype=DT, generator=g) - 1
    d = 0.3
    st = tap.solve(m, a0, c0, damping=d, max_iter=1, a_hidden=[h0])
    W, W2 = m.W, m.W**2
    A_h = -(c0 @ W2)
    B_h = A_h * h0 + a0 @ W
    ah = torch.tanh(m.hidden.U + B_h)
    a_h = d * h0 + (1 - d) * ah
    c_h = 1 - ah**2  # c_hidden not given: its first update is undamped
    A_v = -(c_h @ W2.T)
    B_v = A_v * a0 + a_h @ W.T
    av = torch.tanh(m.visible.U + B_v)
    for got, want in ((st.A[1], A_h), (st.B[1], B_h), (st.a[1], a_h), (st.c[1], c_h)):
        torch.testing.assert_close(got, want)
    for got, want in ((st.A[0], A_v), (st.B[0], B_v), (st.a[0], d * a0 + (1 - d) * av)):
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError):
        tap.solve(m, a0, damping=1.0)


def test_float32_and_device_dtype_follow_machine():
    g = _gen(11)
    m = _random_machine(Bernoulli, (8, 5), 0.3, g).to(dtype=torch.float32)
    st = tap.solve(m, torch.rand(4, 8, dtype=DT, generator=g), tol=1e-10)
    assert st.a[0].dtype == torch.float32 and st.converged.all()
    assert tap.free_energy(m, st).dtype == torch.float32


# --------------------------------------------------------------------------------------------
# Deduplication
# --------------------------------------------------------------------------------------------


def _states_from_rows(rows, converged=None):
    K = rows.shape[0]
    a = [rows[:, :3], rows[:, 3:]]
    zeros = [torch.zeros_like(t) for t in a]
    return tap.TAPState(
        a=a,
        c=zeros,
        A=zeros,
        B=zeros,
        iterations=torch.ones(K, dtype=torch.long),
        converged=torch.ones(K, dtype=torch.bool) if converged is None else converged,
    )


def test_unique_groups_order_invariant():
    g = _gen(12)
    centres = torch.rand(4, 5, dtype=DT, generator=g)
    labels = torch.randint(0, 4, (40,), generator=g)
    labels[:4] = torch.arange(4)
    rows = centres[labels] + 1e-7 * torch.randn(40, 5, dtype=DT, generator=g)
    rows[5], labels[5] = rows[6], labels[6]  # exact duplicates
    converged = torch.ones(40, dtype=torch.bool)
    converged[[7, 11]] = False
    state = _states_from_rows(rows, converged)
    reps, inverse, counts = tap.unique(state, tol=1e-5)
    assert len(reps) == 4 and int(counts.sum()) == 38
    assert inverse[7] == -1 and inverse[11] == -1
    assert inverse[5] == inverse[6]
    ok = converged
    # the inverse map reproduces the solutions (within tol) and matches the true clusters
    mags = state.magnetisations()
    assert float((mags[reps[inverse[ok]]] - mags[ok]).abs().max()) <= 1e-5
    assert torch.equal(torch.bincount(inverse[ok], minlength=len(reps)), counts)
    same = labels[ok][:, None] == labels[ok][None, :]
    assert torch.equal(same, inverse[ok][:, None] == inverse[ok][None, :])
    # random permutation of the rows: same groups, same representatives (by content), same ids
    perm = torch.randperm(40, generator=g)
    p_reps, p_inverse, p_counts = tap.unique(state.select(perm), tol=1e-5)
    assert torch.equal(p_counts, counts)
    assert torch.equal(p_inverse, inverse[perm])
    torch.testing.assert_close(mags[perm][p_reps], mags[reps], rtol=0, atol=0)


def test_unique_identical_rows_collapse_and_edge_cases():
    rows = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5]] * 5, dtype=DT)
    reps, inverse, counts = tap.unique(_states_from_rows(rows), tol=0.0)
    assert len(reps) == 1 and counts.tolist() == [5] and inverse.tolist() == [0] * 5
    none = tap.unique(_states_from_rows(rows, torch.zeros(5, dtype=torch.bool)), tol=1.0)
    assert none[0].numel() == 0 and none[1].tolist() == [-1] * 5
    # solve + unique on a weakly coupled machine: a single solution
    g = _gen(13)
    m = _random_machine(Bernoulli, (8, 5), 0.2, g)
    state = tap.solve(m, torch.rand(20, 8, dtype=DT, generator=g), tol=1e-24)
    reps, inverse, counts = tap.unique(state, tol=1e-8)
    assert counts.tolist() == [20]


# --------------------------------------------------------------------------------------------
# Continuous priors
# --------------------------------------------------------------------------------------------

LOWER, UPPER = 0.0, 1.0


def _truncated(kind, n, g):
    """Random truncated-Gaussian (``tg``) or truncated Gauss-Bernoulli (``tgb``) prior on [0, 1]."""
    U = 0.5 * torch.randn(n, dtype=DT, generator=g)
    V = 1.0 + torch.rand(n, dtype=DT, generator=g)
    if kind == "tg":
        return TruncatedGaussian(U, V, LOWER, UPPER)
    rho = 0.3 + 0.4 * torch.rand(n, dtype=DT, generator=g)
    return TruncatedGaussBernoulli(rho, U, V, LOWER, UPPER)


def _legendre(n, lower=LOWER, upper=UPPER):
    nodes, weights = np.polynomial.legendre.leggauss(n)
    nodes = 0.5 * (upper - lower) * nodes + 0.5 * (upper + lower)
    return torch.tensor(nodes, dtype=DT), torch.tensor(0.5 * (upper - lower) * weights, dtype=DT)


@pytest.mark.parametrize("kind", ["tg", "tgb"])
def test_truncated_zero_coupling(kind):
    """At W = 0 TAP is exact: a = prior mean, c = prior variance, -F = ln Z = 0."""
    g = _gen(20)
    vis, hid = _truncated(kind, 5, g), _truncated("tg", 4, g)
    m = RBM(torch.zeros(5, 4, dtype=DT), vis, hid)
    state = tap.solve(m, torch.rand(3, 5, dtype=DT, generator=g), tol=1e-26)
    assert state.converged.all()
    zero = torch.zeros(5, dtype=DT)
    mean, var = vis.moments(zero, zero)
    torch.testing.assert_close(state.a[0], mean.expand(3, 5), rtol=0, atol=1e-12)
    torch.testing.assert_close(state.c[0], var.expand(3, 5), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        -tap.free_energy(m, state), torch.zeros(3, dtype=DT), atol=1e-10, rtol=0
    )
    # the hidden prior's mean agrees with quadrature of its density on [0, 1]
    nodes, weights = _legendre(64)
    density = torch.exp(hid.log_prob(nodes[:, None].expand(64, 4)))
    torch.testing.assert_close(weights @ density, torch.ones(4, dtype=DT), rtol=1e-10, atol=0)
    torch.testing.assert_close((weights * nodes) @ density, state.a[1][0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["tg", "tgb"])
def test_truncated_visible_third_order(kind):
    """Truncated visible units with Bernoulli hiddens: exact ln Z by enumerating the hiddens."""
    Nv, Nh = 6, 8
    g = _gen(21)
    vis = _truncated(kind, Nv, g)
    hid = Bernoulli(_fields(Bernoulli, Nh, g))
    W0 = torch.randn(Nv, Nh, dtype=DT, generator=g).abs()
    scales, errors = (0.01, 0.02, 0.04), []
    for s in scales:
        m = RBM(s * W0, vis, hid)
        state = tap.solve(m, torch.rand(3, Nv, dtype=DT, generator=g), tol=1e-28, max_iter=500)
        assert state.converged.all()
        errors.append(float((-tap.free_energy(m, state) - exact_log_partition(m)).abs().max()))
    assert 2.7 <= _slope(scales, errors) <= 3.3


def test_truncated_gaussian_rbm_against_quadrature():
    """A 2 x 3 truncated-Gaussian RBM: ln Z by Gauss-Legendre quadrature over the visibles."""
    g = _gen(22)

    def skewed(n):
        # U < 0 piles the mass against the lower bound: every unit is right-skewed, so the
        # O(W^3) error is coherent for positive couplings
        U = -2.0 + 0.3 * torch.randn(n, dtype=DT, generator=g)
        return TruncatedGaussian(U, 1.0 + torch.rand(n, dtype=DT, generator=g), LOWER, UPPER)

    vis, hid = skewed(2), skewed(3)
    W0 = torch.randn(2, 3, dtype=DT, generator=g).abs()
    nodes, weights = _legendre(48)
    grid = torch.stack(torch.meshgrid(nodes, nodes, indexing="ij"), -1).reshape(-1, 2)
    log_w = torch.log(torch.outer(weights, weights).reshape(-1)) + vis.log_prob(grid).sum(-1)
    scales, errors = (0.0625, 0.125, 0.25), []
    for s in scales:
        m = RBM(s * W0, vis, hid)
        B = grid @ m.W
        log_z = torch.logsumexp(log_w + hid.log_partition(B, torch.zeros_like(B)).sum(-1), 0)
        state = tap.solve(m, torch.rand(2, 2, dtype=DT, generator=g), tol=1e-28, max_iter=500)
        assert state.converged.all()
        errors.append(float((-tap.free_energy(m, state) - log_z).abs().max()))
    assert 2.7 <= _slope(scales, errors) <= 3.3


@pytest.mark.parametrize("visible_kind, hidden_kind", [("tg", "tg"), ("tg", "tgb"), ("tgb", "tg")])
def test_truncated_gradients_match_autograd(visible_kind, hidden_kind):
    g = _gen(23)
    vis, hid = _truncated(visible_kind, 6, g), _truncated(hidden_kind, 4, g)
    m = RBM(0.5 * torch.randn(6, 4, dtype=DT, generator=g), vis, hid)
    x = torch.rand(5, 6, dtype=DT, generator=g)
    if visible_kind == "tgb":
        x[x < 0.4] = 0.0  # spikes at zero
    states = tap.solve(m, torch.rand(3, 6, dtype=DT, generator=g), max_iter=4)
    clamped = tap.clamped_state(m, x)
    got = tap.tap_gradients(m, x, states)
    want_w, want_p = _autograd_reference(m, x, states, clamped)
    torch.testing.assert_close(got["weights"][0], want_w[0], rtol=1e-8, atol=1e-10)
    for a, b in zip(got["priors"], want_p, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-8, atol=1e-10)


def test_second_pass_converges_rows_that_cycle_and_finds_fixed_points(cycling_rbm):
    """solve_with_retry: rows that cycle at damping 0.5 are continued from their last iterate
    at 0.95; they converge to stationary points of eq. (36), with both passes counted."""
    m, x = cycling_rbm
    first = tap.solve(m, x, damping=0.5, tol=1e-24, max_iter=2000)
    assert not first.converged.any()
    plain = tap.solve_with_retry(m, x, tap.SolverSettings(damping=0.5, tol=1e-24, max_iter=2000))
    assert not plain.converged.any()
    state = tap.solve_with_retry(
        m, x, tap.SolverSettings(damping=0.5, tol=1e-24, max_iter=2000, retry_damping=0.95)
    )
    assert state.converged.all()
    assert bool((state.iterations > 2000).all()) and bool((state.iterations <= 4000).all())

    def continued(s, tol=1e-24, **kw):
        return tap.solve_from(m, s, tol=tol, **kw)

    # The second pass is solve at 0.95 from the first pass's last a, c of every layer, with the
    # tolerance that bounds the residual as the first pass's does.
    assert tap.retry_tolerance(1e-24, 0.5, 0.95) == pytest.approx(1e-26)
    again = continued(first, tol=1e-26, damping=0.95, max_iter=2000)
    torch.testing.assert_close(state.a[1], again.a[1], rtol=0, atol=0)
    torch.testing.assert_close(state.iterations, again.iterations + 2000)
    # Each solution is a fixed point: one undamped update leaves its means where they are.
    fixed = continued(state, damping=0.0, max_iter=1)
    for before, after in zip(state.a, fixed.a, strict=True):
        assert float((before - after).abs().max()) < 1e-9


def test_second_pass_asks_the_first_pass_residual(cycling_rbm):
    """A damped step is (1 - d) times the undamped residual f(a) - a, so the second pass at 0.95
    must stop at tol (0.05 / 0.5)^2 to ask of its rows the residual the first pass asks at 0.5
    (mean square about tol / 0.25; the layers' alternating updates leave a factor of a few);
    stopping at tol leaves rows two orders of magnitude above it."""
    m, x = cycling_rbm
    tol = 1e-8

    def residual(s):
        one = tap.solve_from(m, s, damping=0.0, tol=0.0, max_iter=1)
        n = sum(a.shape[1] for a in s.a)
        return sum(((b - a) ** 2).sum(1) for a, b in zip(s.a, one.a, strict=True)) / n

    bound = tol / (1 - 0.5) ** 2
    state = tap.solve_with_retry(
        m, x, tap.SolverSettings(damping=0.5, tol=tol, max_iter=2000, retry_damping=0.95)
    )
    assert state.converged.all() and bool((state.iterations > 2000).all())
    assert float(residual(state).max()) < 5 * bound
    first = tap.solve(m, x, damping=0.5, tol=tol, max_iter=2000)
    loose = tap.solve_from(m, first, damping=0.95, tol=tol, max_iter=2000)
    assert loose.converged.all() and float(residual(loose).max()) > 100 * bound


def _state_with_variances(c):
    """A TAPState of one row whose variances are ``c`` (one list per layer); means at 0.5."""
    c = [torch.tensor([v], dtype=DT) for v in c]
    a = [torch.full_like(t, 0.5) for t in c]
    zeros = [torch.zeros_like(t) for t in c]
    ones = torch.ones(1, dtype=torch.long)
    return tap.TAPState(a, c, zeros, list(zeros), ones, torch.ones(1, dtype=torch.bool))


def test_onsager_strength_by_hand():
    """max_i c_i sum_j W_ij^2 c_j, worked out by hand on a 2-2 RBM and a 2-2-1 machine."""
    W0 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=DT)
    W1 = torch.tensor([[2.0], [1.0]], dtype=DT)
    rbm = BoltzmannMachine((Bernoulli(torch.zeros(2, dtype=DT)),) * 2, (W0,))
    state = _state_with_variances([[0.1, 0.2], [0.3, 0.5]])
    # visible: 0.1 (1 0.3 + 4 0.5) = 0.23, 0.2 (9 0.3 + 16 0.5) = 2.14;
    # hidden: 0.3 (1 0.1 + 9 0.2) = 0.57, 0.5 (4 0.1 + 16 0.2) = 1.8.
    assert tap.onsager_strength(rbm, state).item() == pytest.approx(2.14)
    assert tap.onsager_strength(rbm, state, per_coupling=True)[0].item() == pytest.approx(2.14)
    priors = tuple(Bernoulli(torch.zeros(n, dtype=DT)) for n in (2, 2, 1))
    deep = BoltzmannMachine(priors, (W0, W1))
    state = _state_with_variances([[0.1, 0.2], [0.3, 0.5], [0.4]])
    # middle layer sums both neighbours: 0.3 (1.9 + 4 0.4) = 1.05, 0.5 (3.6 + 0.4) = 2.0;
    # top: 0.4 (4 0.3 + 1 0.5) = 0.68; the visible 2.14 is the largest.
    assert tap.onsager_strength(deep, state).item() == pytest.approx(2.14)
    first, second = tap.onsager_strength(deep, state, per_coupling=True)
    assert first.item() == pytest.approx(2.14) and second.item() == pytest.approx(0.68)
    # The clamped visible layer (c = 0) adds nothing; scaling W by s scales it by s^2.
    state = _state_with_variances([[0.0, 0.0], [0.3, 0.5]])
    assert tap.onsager_strength(rbm, state).item() == pytest.approx(0.0)
    state = _state_with_variances([[0.1, 0.2], [0.3, 0.5]])
    half = BoltzmannMachine(rbm.priors, (0.5 * W0,))
    assert tap.onsager_strength(half, state).item() == pytest.approx(2.14 / 4)


def test_onsager_strength_uniform_closed_form_and_spectral_bound():
    """Uniform couplings w and variances p (visible), q (hidden): w^2 p q max(Nv, Nh); on TAP
    solutions of a random RBM, it bounds the spectral radius of S_ij = c_i W_ij^2 c_j."""
    nv, nh, w, p, q = 3, 5, 0.7, 0.2, 0.25
    rbm = BoltzmannMachine(
        (Bernoulli(torch.zeros(nv, dtype=DT)), Bernoulli(torch.zeros(nh, dtype=DT))),
        (torch.full((nv, nh), w, dtype=DT),),
    )
    state = _state_with_variances([[p] * nv, [q] * nh])
    assert tap.onsager_strength(rbm, state).item() == pytest.approx(w * w * p * q * max(nv, nh))
    g = _gen(3)
    machine = _random_machine(Bernoulli, (6, 4), 0.8, g)
    x = torch.bernoulli(torch.full((5, 6), 0.5, dtype=DT), generator=g)
    states = tap.solve(machine, x, tol=1e-12, max_iter=2000)
    strength = tap.onsager_strength(machine, states)
    W2 = machine.W * machine.W
    for k in range(5):
        cv, ch = states.c[0][k], states.c[1][k]
        S = torch.zeros(10, 10, dtype=DT)
        S[:6, 6:] = cv[:, None] * W2 * ch[None, :]
        S[6:, :6] = S[:6, 6:].T
        radius = torch.linalg.eigvalsh(S).abs().max()
        assert 0 < radius <= strength[k] + 1e-12
        assert strength[k] == pytest.approx(S.sum(1).max().item())
        assert tap.onsager_spectral_radius(machine, states)[k] == pytest.approx(
            radius.item(), rel=1e-8
        )


def test_onsager_spectral_radius_of_a_three_layer_machine():
    """The power iteration's rho against the eigenvalues of the whole S (all layers) for random
    variances of a 4-3-2 machine, and 0 where every variance is 0."""
    g = _gen(11)
    machine = _random_machine(Bernoulli, (4, 3, 2), 1.3, g)
    c = [torch.rand(3, n, dtype=DT, generator=g) * 0.25 for n in (4, 3, 2)]
    state = tap.TAPState(c, c, c, c, torch.ones(3, dtype=torch.long), torch.ones(3).bool())
    rho = tap.onsager_spectral_radius(machine, state)
    W2 = [W * W for W in machine.weights]
    for k in range(3):
        S = torch.zeros(9, 9, dtype=DT)
        S[:4, 4:7] = c[0][k][:, None] * W2[0] * c[1][k][None, :]
        S[4:7, 7:] = c[1][k][:, None] * W2[1] * c[2][k][None, :]
        S = S + S.T
        assert rho[k] == pytest.approx(torch.linalg.eigvalsh(S).abs().max().item(), rel=1e-8)
        assert rho[k] <= tap.onsager_strength(machine, state)[k] + 1e-12
    zero = [torch.zeros_like(t) for t in c]
    empty = tap.TAPState(zero, zero, zero, zero, state.iterations, state.converged)
    assert torch.equal(tap.onsager_spectral_radius(machine, empty), torch.zeros(3, dtype=DT))


@pytest.mark.parametrize("clamp", [False, True])
def test_solve_from_continues_where_a_solve_stopped(clamp):
    """Seven sweeps then ``solve_from`` for five more give the state of twelve sweeps in one
    call, for a free and a clamped 3-layer machine: the state carries everything Alg. 1
    iterates on, and ``solve_from`` keeps the state's clamping."""
    g = _gen(11)
    m = _random_machine(Bernoulli, (6, 4, 3), 0.8, g)
    x = (torch.rand(5, 6, dtype=DT, generator=g) < 0.5).to(DT)
    kw = {"damping": 0.5, "tol": 0.0, "clamp": True if clamp else None}
    whole = tap.solve(m, x, max_iter=12, **kw)
    first = tap.solve(m, x, max_iter=7, **kw)
    assert first.clamped == clamp
    rest = tap.solve_from(m, first, damping=0.5, tol=0.0, max_iter=5)
    assert rest.clamped == clamp
    for a, b in zip(whole.a + whole.c, rest.a + rest.c, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-14)
