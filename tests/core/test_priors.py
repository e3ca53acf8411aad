"""Unit priors against exact answers: state sums, scipy quadrature, finite differences, autograd.

Regimes of the truncated Gaussian (App. C.1-C.2 of Tramel et al.) exercised below: precision
A + V positive, negative (Erfi branch), near zero and exactly zero (exponential / uniform tilt),
V -> 0, centres (B + U) / (A + V) at +-50 and +-1e3 outside the box (eq. 91), sharp modes inside,
convex exponents with mass at both bounds, and rho -> 0, 1 for the Gauss-Bernoulli mixture.
"""

import math
import warnings

import mpmath as mp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import IntegrationWarning, quad

from tapmachine.core.priors import (
    Bernoulli,
    Spin,
    TruncatedGaussBernoulli,
    TruncatedGaussian,
    truncated,
    truncnorm,
)

F64, F32 = torch.float64, torch.float32

# (U, V, B, A, regime); Q has linear coefficient B + U and precision A + V.
TG_CASES = [
    (0.0, 0.0, 0.0, 0.0, "uniform"),
    (0.0, 0.0, 0.7, 0.0, "exponential, A + V = 0"),
    (2.0, 1.0, 1.0, -1.0, "exponential, A + V = 0"),
    (2.0, 1.0, 1.0, -1.0 + 1e-9, "A + V -> 0+"),
    (2.0, 1.0, 1.0, -1.0 - 1e-9, "A + V -> 0-"),
    (30.0, 1.0, 10.0, -1.0 + 1e-7, "A + V -> 0+, large B + U"),
    (0.3, 1e-10, 0.2, 0.0, "V -> 0"),
    (-0.3, -1e-12, 0.1, 1e-12, "V -> 0"),
    (1.0, 2.0, 0.5, 1.0, "moderate A + V > 0"),
    (5.0, 10.0, 1.0, -3.0, "moderate A + V > 0"),
    (1.0, 2.0, -3.0, -5.0, "moderate A + V < 0"),
    (-3.0, -40.0, 1.0, 2.0, "A + V < 0, Dawson"),
    (0.0, -200.0, 0.0, 0.0, "A + V < 0, mass at both bounds"),
    (30.0, -100.0, 2.0, 0.0, "A + V < 0, mass at both bounds"),
    (0.5, -3000.0, 0.0, 0.0, "A + V << 0"),
    (45.0, 0.5, 5.0, 0.5, "centre +50"),
    (-45.0, 0.5, -5.0, 0.5, "centre -50"),
    (1000.0, 1.0, 0.5, 0.0, "centre +1e3"),
    (-1000.0, 1.0, -0.5, 0.0, "centre -1e3"),
    (1e5, 100.0, 3.0, 0.0, "centre +1e3, sharp"),
    (-1e5, 100.0, 0.0, 1.0, "centre -1e3, sharp"),
    (-5e3, -100.0, 1.0, 0.0, "A + V < 0, centre -50"),
    (200.0, 400.0, 1.0, 2.0, "sharp mode inside"),
    (3e4, 6e4, 10.0, 0.0, "very sharp mode inside"),
    (1e4, 1e4 + 1e-3, 0.0, 0.0, "sharp mode at the bound"),
    (20.0, -1e-6, 0.0, 0.0, "exponential, tiny A + V < 0"),
]
BOUNDS = [(0.0, 1.0), (-2.0, 3.0), (-1.0, 0.25)]


def _t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def _quad(f, lo, hi, points):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IntegrationWarning)
        return quad(f, lo, hi, points=points or None, epsabs=0.0, epsrel=1e-13, limit=2000)[0]


def tilted_reference(b, s, lo, hi):
    """ln int_lo^hi e^{-s x^2/2 + b x} dx, mean and variance, by scipy quadrature (float64).

    Breakpoints at multiples of the local length scales around the bounds and the mode keep
    quad reliable for distributions squeezed against a bound or around a sharp mode.
    """

    def expo(x):
        return -0.5 * s * x * x + b * x

    anchors = [lo, hi] + ([b / s] if s > 0 and lo < b / s < hi else [])
    top = max(anchors, key=expo)
    points = set()
    for x0 in anchors:
        scales = [hi - lo]
        if b - s * x0 != 0:
            scales.append(1.0 / abs(b - s * x0))
        if s != 0:
            scales.append(1.0 / math.sqrt(abs(s)))
        for k in (0.3, 1, 3, 10, 30, 100, 300):
            points |= {x0 - k * min(scales), x0 + k * min(scales)}
    points = sorted(x for x in points | {top} if lo < x < hi)

    def f(x):
        return math.exp(expo(x) - expo(top))

    z = _quad(f, lo, hi, points)
    mean = top + _quad(lambda x: (x - top) * f(x), lo, hi, points) / z
    var = _quad(lambda x: (x - mean) ** 2 * f(x), lo, hi, points) / z
    return math.log(z) + expo(top), mean, var


def tg_reference(U, V, B, A, lo, hi):
    """ln Z_Q (relative to P), mean and variance of Q for one truncated Gaussian unit."""
    log_q, mean, var = tilted_reference(U + B, V + A, lo, hi)
    log_p = tilted_reference(U, V, lo, hi)[0]
    return log_q - log_p, mean, var


def _tg(cases, lo, hi, dtype=F64):
    U, V, B, A = (_t([c[i] for c in cases], dtype) for i in range(4))
    return TruncatedGaussian(U, V, lo, hi), B, A


# -------------------------------------------------------------------------- Bernoulli and Spin

BINARY_GRID = [
    (u, b, a)
    for u in (-30.0, -2.0, 0.0, 0.5, 40.0)
    for b in (-5.0, 0.0, 3.0)
    for a in (-2.0, 0.0, 1.5)
]


@pytest.mark.parametrize("cls,states", [(Bernoulli, (0.0, 1.0)), (Spin, (-1.0, 1.0))])
def test_binary_priors_match_state_sums(cls, states):
    U, B, A = (_t([g[i] for g in BINARY_GRID]) for i in range(3))
    prior = cls(U)
    xs = [torch.full_like(U, s) for s in states]
    log_p = torch.stack([prior.log_prob(x) for x in xs])
    torch.testing.assert_close(torch.logsumexp(log_p, 0), torch.zeros_like(U), atol=1e-12, rtol=0)
    log_w = torch.stack([lp - 0.5 * A * x * x + B * x for lp, x in zip(log_p, xs, strict=True)])
    log_z = torch.logsumexp(log_w, 0)
    w = torch.softmax(log_w, 0)
    mean = sum(wi * x for wi, x in zip(w, xs, strict=True))
    var = sum(wi * (x - mean) ** 2 for wi, x in zip(w, xs, strict=True))
    a, c = prior.moments(B, A)
    torch.testing.assert_close(prior.log_partition(B, A), log_z, atol=1e-12, rtol=1e-12)
    # the Boltzmann weight e^{U x} sums to the energy normaliser over the states
    energy = torch.logsumexp(torch.stack([U * x for x in xs]), 0)
    torch.testing.assert_close(prior.energy_normaliser(), energy, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(a, mean, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(c, var, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(prior.mean(B), prior.moments(B, torch.zeros_like(B))[0])
    # parameter gradients: d/dU ln Z and d/dU ln P against autograd
    Ug = U.clone().requires_grad_()
    (g_z,) = torch.autograd.grad(cls(Ug).log_partition(B, A).sum(), Ug)
    torch.testing.assert_close(prior.grad_log_partition(B, A)["U"], g_z, atol=1e-12, rtol=1e-10)
    for x in xs:
        (g_p,) = torch.autograd.grad(cls(Ug).log_prob(x).sum(), Ug)
        torch.testing.assert_close(prior.grad_log_prob(x)["U"], g_p, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("cls,states", [(Bernoulli, (0.0, 1.0)), (Spin, (-1.0, 1.0))])
def test_binary_sampling(cls, states):
    U = _t([-1.0, 0.3, 2.0])
    B = torch.zeros(100_000, 3, dtype=F64) + _t([0.5, -1.0, 0.0])
    A = torch.ones_like(B)
    prior = cls(U)
    x = prior.sample(B, A, generator=torch.Generator().manual_seed(3))
    assert set(torch.unique(x).tolist()) <= set(states)
    a, c = prior.moments(B[0], A[0])
    assert ((x.mean(0) - a).abs() < 5 * (c / x.shape[0]).sqrt()).all()


# -------------------------------------------------------------------------- truncated Gaussian


@pytest.mark.parametrize("lo,hi", BOUNDS)
def test_truncated_gaussian_against_quadrature_float64(lo, hi):
    tg, B, A = _tg(TG_CASES, lo, hi)
    log_z, (a, c) = tg.log_partition(B, A), tg.moments(B, A)
    for i, (U, V, b, s, regime) in enumerate(TG_CASES):
        ref_z, ref_a, ref_c = tg_reference(U, V, b, s, lo, hi)
        assert abs(log_z[i].item() - ref_z) <= 1e-9 * (1 + abs(ref_z)), regime
        assert abs(a[i].item() - ref_a) <= 1e-8 * math.sqrt(ref_c), regime
        assert abs(c[i].item() / ref_c - 1) <= 1e-8, regime
        assert lo <= a[i].item() <= hi and 0 <= c[i].item() <= (hi - lo) ** 2 / 4


@pytest.mark.parametrize("lo,hi", BOUNDS)
def test_truncated_gaussian_float32(lo, hi):
    tg, B, A = _tg(TG_CASES, lo, hi, F32)
    log_z, (a, c) = tg.log_partition(B, A), tg.moments(B, A)
    assert log_z.dtype == a.dtype == c.dtype == F32
    assert torch.isfinite(log_z).all() and torch.isfinite(a).all() and torch.isfinite(c).all()
    for i, (U, V, b, s, regime) in enumerate(TG_CASES):
        # float32 rounding of the inputs alone moves ln Z by ~eps |U + B| and the mean by
        # ~eps |U| / (A + V) (relative to the spread: the sharpest cases are ill-conditioned)
        U32, V32 = (float(torch.tensor(v, dtype=F32)) for v in (U, V))
        ref_z, ref_a, ref_c = tg_reference(U32, V32, b, s, lo, hi)
        assert abs(log_z[i].item() - ref_z) <= 2e-5 * (1 + abs(ref_z) + abs(U + b)), regime
        assert abs(a[i].item() - ref_a) <= 1e-3 * math.sqrt(ref_c) + 1e-7 * (hi - lo), regime
        assert abs(c[i].item() / ref_c - 1) <= 1e-3, regime


def test_truncated_gaussian_log_prob_is_normalised():
    cases = [(0.0, 0.0), (3.0, -40.0), (1e3, 1.0), (5.0, 10.0), (-45.0, 0.5)]
    U, V = _t([c[0] for c in cases]), _t([c[1] for c in cases])
    lo, hi = -1.0, 0.25
    tg = TruncatedGaussian(U, V, lo, hi)
    x = torch.linspace(lo, hi, 7, dtype=F64)[:, None].expand(7, len(cases))
    lp = tg.log_prob(x)
    for i, (u, v) in enumerate(cases):
        log_norm = tilted_reference(u, v, lo, hi)[0]
        ref = -0.5 * v * x[:, i] ** 2 + u * x[:, i] - log_norm
        torch.testing.assert_close(lp[:, i], ref, atol=1e-9 * (1 + abs(log_norm)), rtol=1e-10)
    outside = tg.log_prob(_t([[lo - 1e-3] * 5, [hi + 1e-3] * 5]))
    assert (outside == -math.inf).all()
    assert (tg.log_partition(torch.zeros_like(U), torch.zeros_like(U)) == 0).all()


def _central_difference(fn, param, h):
    return (fn(param + h) - fn(param - h)) / (2 * h)


GRAD_CASES = [
    c for c in TG_CASES if c[-1] not in ("very sharp mode inside", "sharp mode at the bound")
]


def test_truncated_gaussian_gradients():
    lo, hi = -2.0, 3.0
    tg, B, A = _tg(GRAD_CASES, lo, hi)
    U, V = tg.U, tg.V
    x = lo + (hi - lo) * torch.linspace(0.05, 0.95, len(GRAD_CASES), dtype=F64)
    analytic_z, analytic_p = tg.grad_log_partition(B, A), tg.grad_log_prob(x)
    # autograd through the log-normalisers
    Ug, Vg = U.clone().requires_grad_(), V.clone().requires_grad_()
    auto = torch.autograd.grad(
        TruncatedGaussian(Ug, Vg, lo, hi).log_partition(B, A).sum(), (Ug, Vg)
    )
    auto_p = torch.autograd.grad(TruncatedGaussian(Ug, Vg, lo, hi).log_prob(x).sum(), (Ug, Vg))
    for name, g_z, g_p in zip(("U", "V"), auto, auto_p, strict=True):
        torch.testing.assert_close(analytic_z[name], g_z, atol=1e-9, rtol=1e-7)
        torch.testing.assert_close(analytic_p[name], g_p, atol=1e-9, rtol=1e-7)
    # central finite differences (step relative to the scale of each parameter)
    hu, hv = 1e-6 * (1 + U.abs()), 1e-6 * (1 + V.abs())
    fd = {
        "U": _central_difference(
            lambda u: TruncatedGaussian(u, V, lo, hi).log_partition(B, A), U, hu
        ),
        "V": _central_difference(
            lambda v: TruncatedGaussian(U, v, lo, hi).log_partition(B, A), V, hv
        ),
    }
    fd_p = {
        "U": _central_difference(lambda u: TruncatedGaussian(u, V, lo, hi).log_prob(x), U, hu),
        "V": _central_difference(lambda v: TruncatedGaussian(U, v, lo, hi).log_prob(x), V, hv),
    }
    for name in ("U", "V"):
        torch.testing.assert_close(analytic_z[name], fd[name], atol=2e-6, rtol=2e-6)
        torch.testing.assert_close(analytic_p[name], fd_p[name], atol=2e-6, rtol=2e-6)


SAMPLE_CASES = [
    (0.0, 0.0, "uniform"),
    (1.0, -2.0, "near-flat, A + V < 0"),
    (-1e3, 1.0, "centre -1e3"),
    (0.0, -200.0, "mass at both bounds"),
    (3e4, 6e4, "very sharp mode inside"),
    (-3.0, -40.0, "Dawson"),
]


def _check_draws(x, a, c, n):
    x = x.double()
    mean, var = x.mean(0), x.var(0)
    m4 = ((x - mean) ** 4).mean(0)
    assert ((mean - a).abs() <= 5 * (c / n).sqrt()).all(), (mean, a)
    assert ((var - c).abs() <= 5 * ((m4 - var**2) / n).sqrt()).all(), (var, c)


@pytest.mark.slow
def test_truncated_gaussian_sampling():
    n, lo, hi = 200_000, 0.0, 1.0
    U, V = _t([c[0] for c in SAMPLE_CASES]), _t([c[1] for c in SAMPLE_CASES])
    tg = TruncatedGaussian(U, V, lo, hi)
    B = torch.zeros(n, len(SAMPLE_CASES), dtype=F64)
    x = tg.sample(B, B, generator=torch.Generator().manual_seed(0))
    assert x.shape == B.shape and ((x >= lo) & (x <= hi)).all()
    _check_draws(x, *tg.moments(B[0], B[0]), n)
    # the same seed gives the same draws, another seed other draws
    small = B[:1000]
    first = tg.sample(small, small, generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, tg.sample(small, small, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(
        first, tg.sample(small, small, generator=torch.Generator().manual_seed(8))
    )


def test_truncated_gaussian_sampling_float32_and_far_tails():
    n, lo, hi = 50_000, -1.0, 0.25
    U = _t([1e5, -1e5, 20.0, 0.5], F32)
    V = _t([100.0, 100.0, -1e-6, -3000.0], F32)
    tg = TruncatedGaussian(U, V, lo, hi)
    B = torch.zeros(n, 4, dtype=F32)
    x = tg.sample(B, B, generator=torch.Generator().manual_seed(1))
    assert x.dtype == F32 and torch.isfinite(x).all() and ((x >= lo) & (x <= hi)).all()
    a, c = TruncatedGaussian(U.double(), V.double(), lo, hi).moments(B[0].double(), B[0].double())
    _check_draws(x, a, c, n)


# -------------------------------------------------------------------------- Gauss-Bernoulli

# (rho, U, V, B, A)
TGB_CASES = [
    (0.5, 0.0, 0.0, 0.0, 0.0),
    (0.3, 2.0, 1.0, 1.0, -1.0 + 1e-9),
    (1e-9, 1.0, 2.0, 0.5, 1.0),
    (1.0 - 1e-9, 1.0, 2.0, 0.5, 1.0),
    (0.0, 1.0, 2.0, 0.5, 1.0),
    (1.0, 1.0, 2.0, 0.5, 1.0),
    (0.7, -3.0, -40.0, 1.0, 2.0),
    (0.2, 1000.0, 1.0, 0.5, 0.0),
    (0.2, -1000.0, 1.0, -0.5, 0.0),
    (0.6, 45.0, 0.5, 5.0, 0.5),
    (1e-6, 1e5, 100.0, 3.0, 0.0),
    (0.4, 0.0, -200.0, 0.0, 0.0),
    (0.9, 200.0, 400.0, 1.0, 2.0),
]


def tgb_reference(rho, U, V, B, A, lo, hi):
    """Q of eq. (93) tilted by e^{-A x^2/2 + B x}, straight from the definition."""
    log_norm = tilted_reference(U, V, lo, hi)[0]
    log_q, mean_g, var_g = tilted_reference(U + B, V + A, lo, hi)
    z_g = math.exp(log_q - log_norm)  # int TG(x) e^{-A x^2/2 + B x} dx
    z = (1 - rho) + rho * z_g
    second = rho * z_g * (var_g + mean_g**2) / z
    mean = rho * z_g * mean_g / z
    return math.log(z), mean, second - mean**2


def _tgb(cases, lo, hi, dtype=F64):
    rho, U, V, B, A = (_t([c[i] for c in cases], dtype) for i in range(5))
    return TruncatedGaussBernoulli(rho, U, V, lo, hi), B, A


@pytest.mark.parametrize("lo,hi", [(0.0, 1.0), (-2.0, 3.0)])
def test_truncated_gauss_bernoulli_against_quadrature(lo, hi):
    tgb, B, A = _tgb(TGB_CASES, lo, hi)
    log_z, (a, c) = tgb.log_partition(B, A), tgb.moments(B, A)
    for i, case in enumerate(TGB_CASES):
        ref_z, ref_a, ref_c = tgb_reference(*case, lo, hi)
        assert abs(log_z[i].item() - ref_z) <= 1e-9 * (1 + abs(ref_z)), case
        assert abs(a[i].item() - ref_a) <= 1e-8 * math.sqrt(ref_c) + 1e-300, case
        assert abs(c[i].item() - ref_c) <= 1e-8 * ref_c + 1e-300, case
        assert lo <= a[i].item() <= hi and 0 <= c[i].item() <= (hi - lo) ** 2 / 4
    tgb32, B32, A32 = _tgb(TGB_CASES, lo, hi, F32)
    out32 = (tgb32.log_partition(B32, A32), *tgb32.moments(B32, A32))
    assert all(torch.isfinite(t).all() and t.dtype == F32 for t in out32)
    torch.testing.assert_close(out32[0].double(), log_z, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(out32[1].double(), a, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(out32[2].double(), c, atol=1e-9, rtol=1e-3)


def test_truncated_gauss_bernoulli_log_prob():
    lo, hi = -2.0, 3.0
    tgb, _, _ = _tgb(TGB_CASES, lo, hi)
    lp0 = tgb.log_prob(torch.zeros(len(TGB_CASES), dtype=F64))
    torch.testing.assert_close(lp0, torch.log1p(-tgb.rho))
    x = torch.full((len(TGB_CASES),), 0.5, dtype=F64)
    expected = torch.log(tgb.rho) + tgb.gaussian.log_prob(x)
    torch.testing.assert_close(tgb.log_prob(x), expected)
    assert (tgb.log_prob(torch.full_like(x, 3.5)) == -math.inf).all()
    assert (tgb.log_partition(torch.zeros_like(x), torch.zeros_like(x)).abs() < 1e-15).all()
    with pytest.raises(NotImplementedError, match="no binary-RBM energy"):
        tgb.energy_normaliser()


def test_truncated_gauss_bernoulli_gradients():
    lo, hi = -2.0, 3.0
    cases = [c for c in TGB_CASES if 1e-3 < c[0] < 1 - 1e-3]
    tgb, B, A = _tgb(cases, lo, hi)
    x = torch.where(torch.arange(len(cases)) % 2 == 0, 0.0, 0.7).to(F64)
    names = ("rho", "U", "V")
    params = [tgb.rho, tgb.U, tgb.V]
    grads_z, grads_p = tgb.grad_log_partition(B, A), tgb.grad_log_prob(x)

    def build(values):
        return TruncatedGaussBernoulli(*values, lo, hi)

    leaves = [p.clone().requires_grad_() for p in params]
    auto_z = torch.autograd.grad(build(leaves).log_partition(B, A).sum(), leaves)
    auto_p = torch.autograd.grad(build(leaves).log_prob(x).sum(), leaves)
    for k, name in enumerate(names):
        torch.testing.assert_close(grads_z[name], auto_z[k], atol=1e-9, rtol=1e-7)
        torch.testing.assert_close(grads_p[name], auto_p[k], atol=1e-9, rtol=1e-7)
        h = (1e-7 if name == "rho" else 1e-6) * (1 + params[k].abs())

        def moved(delta, k=k):
            values = list(params)
            values[k] = values[k] + delta
            return build(values)

        fd_z = (moved(h).log_partition(B, A) - moved(-h).log_partition(B, A)) / (2 * h)
        fd_p = (moved(h).log_prob(x) - moved(-h).log_prob(x)) / (2 * h)
        torch.testing.assert_close(grads_z[name], fd_z, atol=2e-6, rtol=2e-6)
        torch.testing.assert_close(grads_p[name], fd_p, atol=2e-6, rtol=2e-6)


def test_truncated_gauss_bernoulli_rho_limits():
    U, V = _t([1.0, 1.0]), _t([2.0, 2.0])
    tgb = TruncatedGaussBernoulli(_t([0.0, 1.0]), U, V)
    B, A = _t([0.5, 0.5]), _t([1.0, 1.0])
    a, c = tgb.moments(B, A)
    a_g, c_g = tgb.gaussian.moments(B, A)
    assert a[0] == 0 and c[0] == 0
    torch.testing.assert_close(a[1], a_g[1])
    torch.testing.assert_close(c[1], c_g[1])
    torch.testing.assert_close(tgb.log_partition(B, A)[1], tgb.gaussian.log_partition(B, A)[1])
    assert torch.isfinite(tgb.grad_log_partition(B, A)["rho"]).all()


def test_truncated_gauss_bernoulli_sampling():
    n, lo, hi = 200_000, -1.0, 2.0
    rho, U, V = _t([0.3, 0.8, 0.5]), _t([0.0, -1e3, 0.0]), _t([0.0, 1.0, -200.0])
    tgb = TruncatedGaussBernoulli(rho, U, V, lo, hi)
    B = torch.zeros(n, 3, dtype=F64) + _t([0.5, 0.0, 1.0])
    A = torch.zeros_like(B)
    x = tgb.sample(B, A, generator=torch.Generator().manual_seed(5))
    assert ((x >= lo) & (x <= hi)).all()
    a, c = tgb.moments(B[0], A[0])
    _check_draws(x, a, c, n)
    t = tgb.gaussian._stats(B[0], A[0])
    p_on = tgb._mix(t.log_z)[1]
    frac = (x != 0).double().mean(0)
    assert ((frac - p_on).abs() <= 5 * (p_on * (1 - p_on) / n).sqrt()).all()
    first = tgb.sample(B[:500], A[:500], generator=torch.Generator().manual_seed(6))
    again = tgb.sample(B[:500], A[:500], generator=torch.Generator().manual_seed(6))
    assert torch.equal(first, again)


def test_bounds_are_validated():
    z = torch.zeros(2, dtype=F64)
    with pytest.raises(ValueError):
        TruncatedGaussian(z, z, 1.0, 1.0)
    with pytest.raises(ValueError):
        TruncatedGaussian(z, z, 0.0, math.inf)
    with pytest.raises(ValueError):
        TruncatedGaussBernoulli(z, z, z, 0.5, 1.0)
    tg = TruncatedGaussian(z, z, -1.0, 2.0)
    assert tg.config() == {"lower": -1.0, "upper": 2.0} and set(tg.params()) == {"U", "V"}
    assert tg.to(dtype=F32).U.dtype == F32 and tg.size == 2


# -------------------------------------------------------------------------- properties

magnitudes = st.one_of(
    st.floats(-1e6, 1e6),
    st.builds(lambda s, e: s * 10.0**e, st.sampled_from([-1.0, 1.0]), st.floats(-12, 6)),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(magnitudes, magnitudes, magnitudes, magnitudes), min_size=1, max_size=8),
    st.sampled_from([(0.0, 1.0), (-2.0, 3.0), (-1.0, 0.0), (0.5, 4.0)]),
    st.sampled_from([F64, F32]),
)
def test_truncated_gaussian_moments_are_valid(rows, bounds, dtype):
    lo, hi = bounds
    B, A, U, V = (_t([r[i] for r in rows], dtype) for i in range(4))
    tg = TruncatedGaussian(U, V, lo, hi)
    a, c = tg.moments(B, A)
    assert torch.isfinite(a).all() and torch.isfinite(c).all()
    assert ((a >= lo) & (a <= hi)).all()
    assert ((c >= 0) & (c <= (hi - lo) ** 2 / 4)).all()
    assert torch.isfinite(tg.log_partition(B, A)).all()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 1.0), magnitudes, magnitudes, magnitudes, magnitudes),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([(0.0, 1.0), (-2.0, 3.0), (-1.0, 0.0)]),
    st.sampled_from([F64, F32]),
)
def test_truncated_gauss_bernoulli_moments_are_valid(rows, bounds, dtype):
    lo, hi = bounds
    rho, B, A, U, V = (_t([r[i] for r in rows], dtype) for i in range(5))
    tgb = TruncatedGaussBernoulli(rho, U, V, lo, hi)
    a, c = tgb.moments(B, A)
    assert torch.isfinite(a).all() and torch.isfinite(c).all()
    assert ((a >= lo) & (a <= hi)).all()
    assert ((c >= 0) & (c <= (hi - lo) ** 2 / 4)).all()
    assert torch.isfinite(tgb.log_partition(B, A)).all()


def test_moments_broadcast_over_batches():
    tg = TruncatedGaussian(_t([0.5, -1.0, 3.0]), _t([1.0, -2.0, 0.0]))
    B = torch.from_numpy(np.linspace(-3, 3, 12).reshape(4, 3))
    a, c = tg.moments(B, torch.zeros(3, dtype=F64))
    assert a.shape == c.shape == (4, 3)


# -------------------------------------------------------------------------- fast paths

# Regime thresholds of the truncated Gaussian (see the table in tapmachine.core.priors): the closed
# form holds for g <= G and width >= W, the two-tail form for g > G and width >= W, the general
# (careful) regimes everywhere. g is the heavier bound in units of sqrt(2) standard deviations
# from the mode, width = h sqrt(2 (A + V)) the box in the same units.
G, W = truncnorm.FAST_G, truncnorm.FAST_WIDTH
THRESHOLD_POINTS = [
    (g, w)
    for g in (G - 1e-9, G + 1e-9, G - 0.1, G + 0.1)
    for w in (W - 1e-9, W + 1e-9, W + 0.05, 1.0, 3.0)
] + [(g, w) for g in (-40.0, -4.0, -1.0, 0.0, 1.0) for w in (W - 1e-9, W + 1e-9, 1.0, 5.0)]


def _tilted_at(points, lo, hi):
    """(B, A) of Q with the given (g, width), leaning on ``upper`` (even rows) or ``lower``."""
    h, mid = 0.5 * (hi - lo), 0.5 * (hi + lo)
    g, w = _t([p[0] for p in points]), _t([p[1] for p in points])
    s = 0.5 * (w / h) ** 2
    c = g * torch.sqrt(2.0 * s) + h * s
    c = torch.where(torch.arange(len(points)) % 2 == 0, c, -c)
    return c + s * mid, s


def _by_path(monkeypatch, path, B, A, lo, hi):
    """ln Z, mean and variance of exp(-A x^2/2 + B x) on [lo, hi] through one regime only."""
    fast_g, fast_w = {"closed": (G, W), "tail": (-math.inf, W), "general": (G, math.inf)}[path]
    monkeypatch.setattr(truncnorm, "FAST_G", fast_g)
    monkeypatch.setattr(truncnorm, "FAST_WIDTH", fast_w)
    tg = TruncatedGaussian(torch.zeros_like(B), torch.zeros_like(B), lo, hi)  # uniform P
    out = (tg.log_partition(B, A), *tg.moments(B, A))
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("lo,hi", [(0.0, 1.0), (-2.0, 3.0)])
def test_fast_paths_agree_with_careful_at_thresholds(monkeypatch, lo, hi):
    """Closed form, two-tail form and the careful regimes agree on both sides of G and W."""
    B, A = _tilted_at(THRESHOLD_POINTS, lo, hi)
    res = {
        path: _by_path(monkeypatch, path, B, A, lo, hi) for path in ("closed", "tail", "general")
    }
    g = _t([p[0] for p in THRESHOLD_POINTS])
    near_g = (g - G).abs() <= 0.2  # where the two-tail form is also valid
    pairs = [("closed", "general", g <= G + 0.2), ("tail", "general", near_g)]
    pairs.append(("closed", "tail", near_g))
    for first, second, valid in pairs:
        (z1, a1, c1), (z2, a2, c2) = res[first], res[second]
        assert ((z1 - z2).abs() <= 1e-14 * (1 + z2.abs()))[valid].all(), (first, second)
        assert ((a1 - a2).abs() <= 1e-13 * c2.sqrt())[valid].all(), (first, second)
        assert ((c1 / c2 - 1).abs() <= 2e-12)[valid].all(), (first, second)


def test_paths_with_and_without_autograd_agree():
    """The in-place (no autograd) and out-of-place (autograd) evaluations agree to rounding.

    Both run the same operations in slightly different orders; the closed forms amplify that
    by up to ~5e3 (variance at the corner of their region), and ln Z is a difference of
    anchored log-normalisers of size up to ~(|U + B| + |V + A|) max|bound|^2.
    """
    g = torch.Generator().manual_seed(4)
    n = 4000
    U = torch.randn(n, dtype=F64, generator=g) * 10.0 ** torch.randint(-2, 4, (n,), generator=g)
    V = torch.randn(n, dtype=F64, generator=g) * 10.0 ** torch.randint(-3, 4, (n,), generator=g)
    B, A = torch.randn(3, n, dtype=F64, generator=g), torch.randn(3, n, dtype=F64, generator=g)
    rho = torch.rand(n, dtype=F64, generator=g)
    for lo, hi in BOUNDS[:2]:
        m = max(abs(lo), abs(hi))
        scale = 1.0 + (U.abs() + B.abs()) * m + (V.abs() + A.abs()) * m * m
        plain = TruncatedGaussian(U, V, lo, hi)
        tracked = TruncatedGaussian(U.clone().requires_grad_(), V, lo, hi)
        z, z_tracked = plain.log_partition(B, A), tracked.log_partition(B, A)
        assert z_tracked.requires_grad
        assert ((z - z_tracked.detach()).abs() <= 1e-14 * scale).all()
        pairs = [*zip(plain.moments(B, A), tracked.moments(B, A), strict=True)]
        grads = [plain.grad_log_partition(B, A), tracked.grad_log_partition(B, A)]
        pairs += [(grads[0][k], grads[1][k]) for k in ("U", "V")]
        mix = TruncatedGaussBernoulli(rho, U, V, min(lo, 0.0), hi)
        mix_tracked = TruncatedGaussBernoulli(rho, U.clone().requires_grad_(), V, min(lo, 0.0), hi)
        pairs += [*zip(mix.moments(B, A), mix_tracked.moments(B, A), strict=True)]
        for x, y in pairs:
            assert y.requires_grad
            torch.testing.assert_close(x, y.detach(), atol=1e-12, rtol=1e-12)


def _common_regime(dtype, seed=0, K=50, N=200):
    """The regime of TAP inference on real-valued data: B ~ N(0, 1), A ~ -U(0, 0.1),
    U ~ N(0, 1), V ~ U(0.5, 1.5), bounds [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    U, V = torch.randn(N, generator=g), 0.5 + torch.rand(N, generator=g)
    B, A = torch.randn(K, N, generator=g), -0.1 * torch.rand(K, N, generator=g)
    return tuple(t.to(dtype) for t in (U, V, B, A))


def test_float32_is_float64_rounded_once_in_the_common_regime():
    """Float32 inputs are combined in float64: the results are the float64 ones, rounded."""
    U, V, B, A = _common_regime(F32)
    tg32 = TruncatedGaussian(U, V)
    tg64 = TruncatedGaussian(U.double(), V.double())
    B64, A64 = B.double(), A.double()
    for x, y in zip(tg32.moments(B, A), tg64.moments(B64, A64), strict=True):
        assert x.dtype == F32 and torch.equal(x, y.float())
    assert torch.equal(tg32.log_partition(B, A), tg64.log_partition(B64, A64).float())
    g32, g64 = tg32.grad_log_partition(B, A), tg64.grad_log_partition(B64, A64)
    assert all(torch.equal(g32[k], g64[k].float()) for k in g32)


# (U, V, regime) with B = A = 0 on [0, 1]: the closed regime of the sampler
CLOSED_SAMPLE_CASES = [
    (0.5, 1.0, "mode inside, wide"),
    (4.0, 1.0, "mode 3 sd beyond upper"),
    (-2.0, 1.0, "mode 2 sd below lower"),
    (20.0, 40.0, "sharp mode in the middle"),
    (1.0, 0.2, "box 0.45 sd wide"),
]


@pytest.mark.parametrize("dtype", [F64, F32])
def test_truncated_gaussian_sampling_closed_regime(dtype):
    from scipy.stats import kstest, truncnorm

    n, lo, hi = 40_000, 0.0, 1.0
    U = _t([c[0] for c in CLOSED_SAMPLE_CASES], dtype)
    V = _t([c[1] for c in CLOSED_SAMPLE_CASES], dtype)
    tg = TruncatedGaussian(U, V, lo, hi)
    B = torch.zeros(n, len(CLOSED_SAMPLE_CASES), dtype=dtype)
    x = tg.sample(B, B, generator=torch.Generator().manual_seed(2))
    assert x.dtype == dtype and ((x >= lo) & (x <= hi)).all()
    _check_draws(x, *tg.moments(B[0].double(), B[0].double()), n)
    for i, (u, v, regime) in enumerate(CLOSED_SAMPLE_CASES):
        mu, sd = u / v, 1 / math.sqrt(v)
        ref = truncnorm((lo - mu) / sd, (hi - mu) / sd, loc=mu, scale=sd)
        assert kstest(x[:, i].double().numpy(), ref.cdf).pvalue > 1e-3, regime


def test_powers_by_doubling_are_the_powers():
    """``_powers``' product tree is x^k within k eps (against ``pow``, within an ulp of exact),
    as the sequential product is, and with autograd its gradient is that of x^k."""
    x = torch.linspace(-0.9, 0.9, 1001, dtype=F64)
    for n in (1, 2, 3, 20, 30):
        tree = truncnorm._powers(x, n)
        assert tree.shape == (n, x.numel())
        k = torch.arange(1, n + 1, dtype=F64).unsqueeze(1)
        exact = x.unsqueeze(0) ** k
        bound = k * torch.finfo(F64).eps * exact.abs()
        assert ((tree - exact).abs() <= bound).all()
    tracked = x.clone().requires_grad_()
    truncnorm._powers(tracked, 5)[4].sum().backward()
    torch.testing.assert_close(tracked.grad, 5.0 * x**4)


def test_laplace_fraction_against_mpmath():
    """``_mills_cf`` against c1 from 90-digit erfcx (sqrt(pi) erfcx z = 1/(z + (1/2)/(z + c1))):
    relative error about 1e-15 for z >= 2, 1e-11 down to z = 1.5."""
    z = torch.cat([torch.linspace(1.5, 2.0, 26, dtype=F64), torch.logspace(0.31, 8, 99, dtype=F64)])
    with mp.workdps(90):

        def c1(v):
            v = mp.mpf(v)
            inverse = 1 / (mp.sqrt(mp.pi) * mp.erfc(v) * mp.exp(v * v))
            return float((mp.mpf(1) / 2) / (inverse - v) - v)

        reference = torch.tensor([c1(v) for v in z.tolist()], dtype=F64)
    rel = ((truncnorm._mills_cf(z) - reference) / reference).abs()
    assert rel[z >= 2.0].max() < 1.5e-15
    assert rel.max() < 1e-11


def test_prior_normaliser_follows_parameters_changed_in_place():
    """The prior's own normaliser is kept between moment evaluations (``_prior_tilt``), yet an
    in-place update of U or V, also one through ``.data`` that bumps no version counter, is
    never served the old value: the moments match a freshly built prior's."""
    g = torch.Generator().manual_seed(7)
    N = 300
    U, V = torch.randn(N, dtype=F64, generator=g) * 3.0, torch.randn(N, dtype=F64, generator=g)
    rho = 0.1 + 0.8 * torch.rand(N, dtype=F64, generator=g)
    B, A = torch.randn(4, N, dtype=F64, generator=g) * 4.0, -torch.rand(4, N, dtype=F64)
    prior = TruncatedGaussBernoulli(rho, U, V, 0.0, 1.0)

    def fresh():
        return TruncatedGaussBernoulli(rho.clone(), U.clone(), V.clone(), 0.0, 1.0)

    for update in (
        lambda: U.data.add_(0.5),
        lambda: V.data.mul_(-1.0),
        lambda: U.add_(torch.randn(N, dtype=F64, generator=g)),
    ):
        first = prior.moments(B, A)
        for x, y in zip(prior.moments(B, A), first, strict=True):  # served from the cache
            torch.testing.assert_close(x, y, rtol=0.0, atol=0.0)
        update()
        truncnorm_reference = fresh()
        truncated._PRIOR_TILTS.clear()
        expected = truncnorm_reference.moments(B, A)
        prior.moments(B, A)  # repopulate with the new values, then compare a second read
        for x, y in zip(prior.moments(B, A), expected, strict=True):
            torch.testing.assert_close(x, y, rtol=0.0, atol=0.0)
        assert not all(torch.equal(x, y) for x, y in zip(first, expected, strict=True))
    z = prior.gaussian.log_partition(B, A)
    torch.testing.assert_close(prior.gaussian.log_partition(B, A), z, rtol=0.0, atol=0.0)


def test_careful_regimes_without_autograd_are_careful_exactly(monkeypatch):
    """Without autograd, ``anchored`` partitions the elements outside the closed regime once and
    feeds the tail regime the closed form's own setup (``_careful_pieces``); its results must be
    those of ``_careful`` on the gathered elements, bit for bit (a training run resumed across the
    change relies on it), in both careful regimes and in either native precision."""

    def gathered(setup, ok, args, h, dtype, log_z, moments):
        idx = (~ok).reshape(-1).nonzero().squeeze(1)
        flat = (a.reshape(-1)[idx] for a in args)
        return [(idx, truncnorm._careful(*flat, h, dtype, log_z, moments))]

    g = torch.Generator().manual_seed(11)
    n = 20000
    b = torch.randn(n, dtype=F64, generator=g) * 10.0 ** torch.randint(-2, 4, (n,), generator=g)
    s = torch.randn(n, dtype=F64, generator=g) * 10.0 ** torch.randint(-3, 4, (n,), generator=g)
    for lo, hi in BOUNDS:
        mid, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
        ac = (b - s * mid).abs()
        _, g1, _, width, ok = truncnorm.closed_setup(ac - h * s, ac + h * s, s, h)
        tail = (~ok) & (g1 > truncnorm.FAST_G) & (width >= truncnorm.FAST_WIDTH)
        assert tail.sum() > 1000 and ((~ok) & ~tail).sum() > 1000  # both careful regimes
        for native in (F64, F32):
            for log_z, moments in ((True, True), (True, False), (False, True)):
                args = (lo, hi, native, log_z, moments, True)
                with monkeypatch.context() as m:
                    m.setattr(truncnorm, "_careful_pieces", gathered)
                    want = truncnorm.anchored(b.clone(), s.clone(), *args)
                got = truncnorm.anchored(b.clone(), s.clone(), *args)
                for x, y in zip(got, want, strict=True):
                    assert (x is None and y is None) or torch.equal(x, y)
