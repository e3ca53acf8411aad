"""adaTAP by VAMP (App. D, Alg. 3) against its own fixed-point equations, TAP and enumeration."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tapmachine.core import adatap, tap
from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussian

DT = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _machine(prior_cls, sizes, scale, seed):
    g = _gen(seed)
    ws = [
        scale * torch.randn(n0, n1, dtype=DT, generator=g)
        for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    ps = [prior_cls(0.5 * torch.randn(n, dtype=DT, generator=g)) for n in sizes]
    return BoltzmannMachine(tuple(ps), tuple(ws))


def _states(prior, n):
    codes = torch.arange(2**n)
    bits = ((codes[:, None] >> torch.arange(n)) & 1).to(DT)
    return 2.0 * bits - 1.0 if isinstance(prior, Spin) else bits


def _exact_marginals(m):
    """Exact visible and hidden means of an RBM by enumerating the visible layer."""
    X = _states(m.visible, m.sizes[0])
    B = X @ m.W
    log_w = m.visible.log_prob(X).sum(-1) + m.hidden.log_partition(B, torch.zeros_like(B)).sum(-1)
    p = torch.softmax(log_w, 0)
    hidden_mean = m.hidden.moments(B, torch.zeros_like(B))[0]
    return p @ X, p @ hidden_mean


def _data(m, K, seed):
    return _states(m.visible, m.sizes[0])[
        torch.randint(0, 2 ** m.sizes[0], (K,), generator=_gen(seed))
    ]


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
@pytest.mark.parametrize("sizes", [(9, 5), (4, 7), (6, 5, 4)])
def test_fixed_point_satisfies_vamp_equations(prior_cls, sizes):
    """At convergence a_1 = a_2 = C_2 (B_2) and c_1 = diag(C_2), with C_2 from the joint J."""
    m = _machine(prior_cls, sizes, 0.3, 1)
    x = torch.rand(4, sizes[0], dtype=DT, generator=_gen(2))
    st = adatap.solve(m, x, tol=1e-28, max_iter=2000)
    assert st.converged.all()
    a, c = torch.cat(st.a, 1), torch.cat(st.c, 1)
    A1, B1 = torch.cat(st.A, 1), torch.cat(st.B, 1)
    J = adatap.joint_couplings(m)
    A2, B2 = 1.0 / c - A1, a / c - B1
    C2 = torch.linalg.inv(torch.diag_embed(A2) - J)
    torch.testing.assert_close(torch.diagonal(C2, dim1=1, dim2=2), c, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close((C2 @ B2[..., None])[..., 0], a, rtol=1e-9, atol=1e-11)
    # the prior node: a = f_a(B, A) layer by layer, as a TAP state
    for l, p in enumerate(m.priors):
        torch.testing.assert_close(p.moments(st.B[l], st.A[l])[0], st.a[l])


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_schur_complement_equals_joint_inverse(prior_cls):
    """The RBM fast path (Schur complement onto the smaller layer) is the joint-matrix Alg. 3."""
    for sizes in ((12, 5), (5, 12)):
        m = _machine(prior_cls, sizes, 0.4, 3)
        x = _data(m, 6, 4)
        fast = adatap.solve(m, x, max_iter=7, tol=0.0, method="bipartite")
        slow = adatap.solve(m, x, max_iter=7, tol=0.0, method="joint")
        for u, v in zip(fast.a + fast.c + fast.A, slow.a + slow.c + slow.A, strict=True):
            torch.testing.assert_close(u, v, rtol=1e-6, atol=1e-10)  # round-off only


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_same_fixed_point_as_tap_at_weak_coupling(prior_cls):
    """adaTAP - TAP = O(s^3) for W = s W0: the two agree through second order in the couplings
    (what TAP keeps), so they share the fixed point in the weak-coupling limit."""
    scales = (0.02, 0.04, 0.08) if prior_cls is Bernoulli else (0.01, 0.02, 0.04)
    base = _machine(prior_cls, (10, 6), 1.0, 5)
    gaps = []
    for s in scales:
        m = base.replace(weights=[s * W for W in base.weights])
        x = _data(m, 3, 6)
        ada = adatap.solve(m, x, tol=1e-30, max_iter=3000)
        ref = tap.solve(m, x, tol=1e-30, max_iter=3000)
        assert ada.converged.all() and ref.converged.all()
        gaps.append(max(float((u - v).abs().max()) for u, v in zip(ada.a, ref.a, strict=True)))
    slope = np.polyfit(np.log(scales), np.log(gaps), 1)[0]
    assert slope > 2.7, (gaps, slope)
    assert gaps[0] < 1e-6


def test_accuracy_against_enumeration_beside_tap(capsys):
    """Moderate couplings: adaTAP's and TAP's marginals against exact ones (numbers printed)."""
    rows = []
    for seed in range(4):
        for scale in (0.3, 0.6):
            m = _machine(Bernoulli, (12, 8), scale, 10 + seed)
            mv, mh = _exact_marginals(m)
            x = _data(m, 1, seed)
            ada = adatap.solve(m, x, tol=1e-26, max_iter=5000)
            ref = tap.solve(m, x, tol=1e-26, max_iter=5000)
            if not (ada.converged.all() and ref.converged.all()):
                continue
            err_a = float(torch.cat([ada.a[0][0] - mv, ada.a[1][0] - mh]).abs().mean())
            err_t = float(torch.cat([ref.a[0][0] - mv, ref.a[1][0] - mh]).abs().mean())
            rows.append((scale, err_a, err_t))
    assert len(rows) >= 6
    with capsys.disabled():
        for scale, ea, et in rows:
            print(f"\nscale {scale}: mean |a - exact| adaTAP {ea:.2e}, TAP {et:.2e}")
    for _scale, ea, et in rows:
        # both are good approximations at these couplings; neither is off by an order
        assert ea < 0.05 and et < 0.05
        assert ea < 5 * et and et < 5 * ea
    # App. D: adaTAP is "in general more accurate": on average over these machines it is here
    assert sum(r[1] for r in rows) < sum(r[2] for r in rows)


def test_damping_convergence_and_freezing():
    m = _machine(Bernoulli, (10, 6), 0.3, 7)
    x = _data(m, 5, 8)
    undamped = adatap.solve(m, x, damping=0.0, tol=1e-24, max_iter=500)
    damped = adatap.solve(m, x, damping=0.5, tol=1e-24, max_iter=500)
    assert undamped.converged.all() and damped.converged.all()
    assert damped.iterations.float().mean() > undamped.iterations.float().mean()
    torch.testing.assert_close(undamped.a[0], damped.a[0], rtol=0, atol=1e-9)
    capped = adatap.solve(m, x, tol=1e-30, max_iter=3)
    assert not capped.converged.any() and torch.all(capped.iterations == 3)
    # a converged row is frozen: the same iterations and result whatever the other rows do (to
    # round-off: BLAS multiplies one row and five by different kernels, so the starting fields
    # already differ in the last bit)
    one = adatap.solve(m, x[:1], damping=0.5, tol=1e-24, max_iter=500)
    assert int(one.iterations[0]) == int(damped.iterations[0])
    assert int(damped.iterations[0]) < int(damped.iterations.max())  # others iterate on
    torch.testing.assert_close(one.a[1], damped.a[1][:1], rtol=0, atol=1e-14)


def test_rejects_unsupported_priors_and_shapes():
    g = _gen(9)
    W = 0.1 * torch.randn(4, 3, dtype=DT, generator=g)
    tg = TruncatedGaussian(torch.zeros(4, dtype=DT), torch.ones(4, dtype=DT), 0.0, 1.0)
    m = RBM(W, tg, Bernoulli(torch.zeros(3, dtype=DT)))
    with pytest.raises(adatap.AdaTAPError, match="TruncatedGaussian"):
        adatap.solve(m, torch.rand(2, 4, dtype=DT))
    good = RBM(W, Bernoulli(torch.zeros(4, dtype=DT)), Bernoulli(torch.zeros(3, dtype=DT)))
    with pytest.raises(ValueError, match="shape"):
        adatap.solve(good, torch.rand(2, 5, dtype=DT))
    with pytest.raises(ValueError, match="damping"):
        adatap.solve(good, torch.rand(2, 4, dtype=DT), damping=1.0)


def test_converged_training_gradients_use_adatap():
    """inference: adatap with train_iterations: converge: Alg. 2's gradient from adaTAP fixed
    points iterated to train_tol (every row converges here), not from TAP's."""
    from tapmachine.train import TrainSettings
    from tapmachine.train.methods import gradients

    m = _machine(Bernoulli, (7, 5), 0.4, 3)
    x = _data(m, 6, 4)
    s = TrainSettings(
        batch_size=6,
        train_iterations="converge",
        train_tol=1e-20,
        train_max_iter=2000,
        train_unique=False,
        inference="adatap",
    )
    got = gradients(m, x, s, None, _gen(5))
    st = adatap.solve(m, x, damping=s.damping, tol=1e-20, max_iter=2000)
    assert st.converged.all()
    want = tap.tap_gradients(m, x, st)
    tap_grads = gradients(m, x, dataclasses.replace(s, inference="tap"), None, _gen(5))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)

    # The coupling gradients (eq. 40) of the two solvers' fixed points differ.
    dW_tap, dW_ada = tap_grads["weights"][0], want["weights"][0]
    assert not torch.allclose(dW_tap, dW_ada, rtol=1e-6, atol=1e-9), "adaTAP was not used"


def test_symmetric_inverse_by_cholesky_and_by_lu_where_indefinite():
    """The Gaussian node's inverse: Cholesky on positive-definite matrices, LU on the others;
    both the inverse of each matrix of the stack; a singular matrix is marked."""
    g = torch.Generator().manual_seed(11)
    X = torch.randn(3, 6, 6, generator=g, dtype=DT)
    spd = X @ X.transpose(1, 2) + 0.5 * torch.eye(6, dtype=DT)
    indefinite = spd.clone()
    indefinite[1] -= 20.0 * torch.eye(6, dtype=DT)
    assert int(torch.linalg.cholesky_ex(indefinite)[1][1]) != 0  # the LU branch is taken
    for M in (spd, indefinite):
        inverse, invertible = adatap._symmetric_inverse(M)
        assert invertible.all()
        torch.testing.assert_close(
            inverse @ M, torch.eye(6, dtype=DT).expand(3, 6, 6), atol=1e-10, rtol=0
        )
        torch.testing.assert_close(inverse, torch.linalg.inv(M), atol=1e-10, rtol=1e-10)


def _literal_messages(J, A2, B2):
    """Alg. 3's lines 5-8 as written, by an explicit inverse (the float64 reference)."""
    C = torch.linalg.inv(torch.diag_embed(A2) - J)
    diag = torch.diagonal(C, dim1=-2, dim2=-1)
    return 1.0 / diag - A2, (C @ B2.unsqueeze(-1)).squeeze(-1) / diag - B2


@pytest.mark.parametrize("sizes", [(14, 6), (6, 14)])
def test_messages_of_saturated_units_in_float32(sizes):
    """Units with c_1 down to 1e-7 (A_2 up to 1e7): the Gaussian node's messages in float32
    equal the literal form's in float64, which subtracts numbers of size A_2 that float32 keeps
    to 7 digits only (A_1 would be wrong by about 1)."""
    m = _machine(Bernoulli, sizes, 0.5, 21)
    g = _gen(22)
    K, N = 5, sum(sizes)
    c1 = 10.0 ** (-7.0 * torch.rand(K, N, dtype=DT, generator=g)) * 0.25
    a1 = 0.5 * (1.0 - torch.sqrt(1.0 - 4.0 * c1))  # a (1 - a) = c1, a <= 1/2
    A1 = 0.3 * torch.randn(K, N, dtype=DT, generator=g)
    B1 = torch.randn(K, N, dtype=DT, generator=g)
    A2, B2 = 1.0 / c1 - A1, a1 / c1 - B1
    J = adatap.joint_couplings(m)
    ref_A, ref_B = _literal_messages(J, A2, B2)
    n0 = sizes[0]
    f32 = [t.float() for t in (A2[:, :n0], A2[:, n0:], B2[:, :n0], B2[:, n0:])]
    Av, Ah, Bv, Bh, ok = adatap._gaussian_bipartite(m.W.float(), *f32)
    A_joint, B_joint, ok_joint = adatap._gaussian_joint(J.float(), A2.float(), B2.float())
    assert ok.all() and ok_joint.all()
    for A, B in ((torch.cat([Av, Ah], 1), torch.cat([Bv, Bh], 1)), (A_joint, B_joint)):
        torch.testing.assert_close(A.double(), ref_A, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(B.double(), ref_B, rtol=1e-4, atol=1e-4)
    assert float(A2.max()) > 1e6  # saturated units were there


def test_a_row_whose_gaussian_node_is_undefined_stops_unconverged():
    """A_2 = 0 on the eliminated (visible) layer leaves the Schur complement undefined: the row
    keeps its start and stops after one iteration, not converged, and the other rows of the
    batch iterate to the fixed point they reach alone. The joint path has no such division and
    iterates the same row on."""
    m = _machine(Bernoulli, (5, 3), 0.3, 23)
    x = _data(m, 3, 24)
    U = m.visible.params()["U"]
    B = x @ m.W
    start_h = m.hidden.moments(B, torch.zeros_like(B))[0]
    B1 = torch.cat([x, start_h], 1) @ adatap.joint_couplings(m)
    A1 = torch.zeros_like(B1)
    # row 0, unit 0: a_1 = sigm(U + B - A / 2) = 1/2 exactly, so 1 / c_1 = 4 = A_1 and A_2 = 0
    A1[0, 0], B1[0, 0] = 4.0, 2.0 - U[0]
    st = adatap.solve(m, x, A1=A1, B1=B1, tol=1e-24, max_iter=500, method="bipartite")
    assert not bool(st.converged[0]) and int(st.iterations[0]) == 1
    assert st.converged[1:].all()
    assert float(st.a[0][0, 0]) == 0.5 and float(st.A[0][0, 0]) == 4.0  # its start, kept
    for t in st.a + st.c + st.A + st.B:
        assert torch.isfinite(t).all()
    alone = adatap.solve(m, x[1:], A1=A1[1:], B1=B1[1:], tol=1e-24, max_iter=500)
    torch.testing.assert_close(st.a[1][1:], alone.a[1], rtol=0, atol=1e-12)
    joint = adatap.solve(m, x[:1], A1=A1[:1], B1=B1[:1], tol=1e-24, max_iter=500, method="joint")
    assert int(joint.iterations[0]) > 1


def test_symmetric_inverse_marks_a_singular_matrix():
    M = torch.eye(3, dtype=DT).expand(3, 3, 3).clone()
    M[1] = torch.ones(3, 3, dtype=DT)  # rank one: neither Cholesky nor LU inverts it
    _, invertible = adatap._symmetric_inverse(M)
    assert invertible.tolist() == [True, False, True]
