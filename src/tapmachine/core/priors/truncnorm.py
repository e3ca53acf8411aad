# Over 500 lines, one concept: every regime below reduces to the same segment problem.
"""Special functions of the tilted truncated Gaussian (App. C.1-C.2): log-normalisers, means,
variances and samples, numerically stable in every regime (see the table below)."""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

# ----------------------------------------------------------------------------------------------
# Truncated Gaussian units (App. C.1-C.2).
#
# Every quantity of a tilted truncated Gaussian reduces to one "segment" problem: the density
#
#     f(v) proportional to exp(-kappa v - q v^2 / 2)   on   0 <= v <= L,
#
# with v the distance from one end of the box, kappa the decay rate there and q the precision of
# either sign (q < 0 is the Erfi branch of eqs. 73, 75). For Q (linear coefficient b = B + U,
# precision s = A + V, eq. 74) on [lower, upper] = [mid - h, mid + h], write c = b - s mid (the
# linear coefficient about the centre of the box): the density leans towards ``upper`` where
# c >= 0 and towards ``lower`` where c < 0. That bound is the "anchor": every log-normaliser is
# taken relative to the density there and every mean is a distance from it, so a distribution
# squeezed against either bound keeps full relative precision, and nothing of size
# (B + U)^2 / (A + V) is ever formed. Seen from the anchor, kappa = |c| - s h (the decay rate into
# the box) and the decay rate at the other bound looking back is |c| + s h. On t = 1 - v / h in
# [-1, 1] the density is exp(p t - q_t t^2 / 2) with p = h |c| >= 0 (the "tilt": f(anchor) /
# f(other bound) = e^{2p}) and q_t = s h^2.
#
# Regimes, in the order they are tried (g = kappa / sqrt(2 s): the anchor in units of sqrt(2)
# standard deviations from the mode, negative for modes inside the box; the width of the box in
# the same units is g_far - g = h sqrt(2 s)):
#   closed   s > 0, g <= FAST_G and h sqrt(2 s) >= FAST_WIDTH: the mode is inside the box or at
#            most 3.5 standard deviations beyond the anchor, and the box is at least 0.42
#            standard deviations wide. Truncated-normal closed forms with two erfc, in float64
#            whatever the input precision (``closed_form``): against 40-digit references, at
#            most 7e-13 relative error in the variance (at the corner g = 2.5, width 0.3; ~1e-15
#            for modes well inside), 3e-14 standard deviations in the mean, 4e-16 in ln Z. The
#            common regime of TAP inference, and the only one evaluated on every element.
#   tail     s > 0, g > FAST_G, h sqrt(2 s) >= FAST_WIDTH: the mode lies beyond the anchor.
#            The difference of two one-sided Gaussian tails with Laplace's continued fraction
#            for both (``_gauss_tail``; relative errors < 1e-14 everywhere): centres
#            (B + U)/(A + V) outside the box, up to the situation of eqs. 91-92.
#   general  the rest (A + V <= 0, or a box narrower than 0.42 standard deviations):
#     box    p <= 4 and |q_t| <= 8 (near-flat, which contains A + V -> 0 at moderate B + U and
#            V -> 0): the closed forms cancel catastrophically, so a 24-point Gauss-Legendre
#            rule (error ~1e-15 for integrands this mild) gives ln Z, mean and variance.
#     else   the integral over [-1, 1] is a signed sum of two "pieces" anchored at the two ends,
#                int_0^ext exp(-k v - q v^2 / 2) dv,   k = decay rate at that end,
#            q > 0: semi-infinite Gaussian tails, the far one subtracted (d+ of eq. 75);
#            q < 0: pieces running from each end to the minimum of the convex exponent (d- of
#            eq. 75), added, or subtracted when the minimum lies beyond the far end;
#            the subtraction never cancels by more than a factor 1 / (1 - e^-8) outside the box.
#     A piece is evaluated as
#       tail    k > 0 and |q| <= 0.01 k^2: asymptotic series of erfcx / Dawson in w = q / k^2
#               (20 terms, truncation error < 1e-17): the exponential limit A + V -> 0, and
#               centres far outside the box with A + V < 0;
#       gauss   q > 0 otherwise: log-erfcx, or log-erfc for modes inside, with Laplace's
#               continued fraction far out;
#       convex  q < 0 otherwise: Dawson function, or quadrature when the piece is short.
#   The general regimes run in the input precision; "closed" and "tail" in float64.
# Each branch is evaluated on its own elements only (gathered by index, scattered back), and a
# branch with no elements costs nothing. Without autograd the closed form runs on every element
# (the others are overwritten) with its temporaries reused in place: on large tensors, fresh
# allocations (page faults) would otherwise cost as much as the arithmetic.
# ----------------------------------------------------------------------------------------------

FAST_G = 2.5  # closed form while kappa / sqrt(2 s) <= FAST_G ...
FAST_WIDTH = 0.3  # ... and h sqrt(2 s) >= FAST_WIDTH (see the table above)
SAMPLE_G = 10.0  # the sampler's closed form (ndtri) reaches as far as kappa / sqrt(2 s) <= 10
_GL_ORDER = 24  # Gauss-Legendre nodes
_QUAD_CENTRES = (0.0, 0.25, 0.5, 0.75, 1.0)  # second moments of the quadrature, in units of L
_BOX_P = 4.0  # near-flat box: p <= _BOX_P and |q_t| <= _BOX_Q
_BOX_Q = 8.0
_TAIL_W = 0.01  # asymptotic series when |q| <= _TAIL_W kappa^2 (erfcx argument >= 7.07)
_TAIL_TERMS = 20
_SHORT_X = 2.0  # convex pieces with X = kappa / sqrt(2 |q|) <= _SHORT_X use quadrature
_DAWSON_H = 0.2  # Rybicki step: error ~ exp(-(pi / 2h)^2) ~ 1e-27
_DAWSON_TERMS = 17
_CF_TERMS = 60  # depth of the continued fraction of erfcx (Gaussian pieces and tails)
_NEWTON_STEPS = 8  # safeguarded Newton steps of the inverse-CDF sampler
_SQRT_PI = math.sqrt(math.pi)
_SQRT2 = math.sqrt(2.0)


def wide(x: Tensor) -> Tensor:
    """``x`` in float64 if it is a lower-precision float (the closed forms cancel by up to ~1e4)."""
    return x.to(torch.float64) if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else x


class _Segment(NamedTuple):
    """Log-normaliser and moments of exp(-kappa v - q v^2 / 2) on [0, L].

    ``log_z`` is ln int_0^L f(v) dv / f(anchor); the anchor is v = L where ``flip`` is True and
    v = 0 elsewhere; ``p`` is the signed dimensionless tilt (``flip`` is p < 0); ``dist`` is the
    mean distance from the anchor and ``var`` the variance.
    """

    log_z: Tensor
    flip: Tensor
    p: Tensor
    dist: Tensor | None
    var: Tensor | None

    def tilt(self) -> Tensor:
        """|p|, written so that its derivative follows the anchor (also at p = 0)."""
        return torch.where(self.flip, -self.p, self.p)

    def log_z0(self) -> Tensor:
        """ln int_0^L f(v) dv / f(0): f(L) / f(0) = e^{-2p}."""
        return self.log_z + torch.where(self.flip, 2.0 * self.tilt(), 0.0)


def _piecewise(branches, *args) -> tuple[Tensor, ...]:
    """Assemble elementwise results from (mask, fn) branches that partition the inputs.

    Each ``fn`` receives only its own elements, flattened (gathered by index), so no branch is
    ever evaluated outside its domain: no inf/nan is produced and autograd stays clean (unlike
    ``torch.where`` on full tensors). A branch without elements is skipped; one holding every
    element receives the inputs without a gather.
    """
    shape = torch.broadcast_shapes(*(a.shape for a in args))
    flat = [a.expand(shape).reshape(-1) for a in args]
    n = flat[0].numel()
    outs = None
    for mask, fn in branches:
        idx = mask.expand(shape).reshape(-1).nonzero().squeeze(1)
        if idx.numel() == 0:
            continue
        if idx.numel() == n:
            outs = list(fn(*flat))
            break
        res = fn(*(a[idx] for a in flat))
        if outs is None:
            outs = [r.new_zeros(n) for r in res]
        outs = [o.index_put((idx,), r) for o, r in zip(outs, res, strict=True)]
    if outs is None:  # no elements at all
        outs = list(branches[-1][1](*flat))
    return tuple(o.reshape(shape) for o in outs)


@functools.lru_cache(maxsize=16)
def _gauss_legendre(dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """Exponent map and weight rows of the Gauss-Legendre rule on [0, 1].

    With nodes s_i and weights w_i: ``expo @ [kappa L, q L^2 / 2]`` is -s_i (kappa L + q L^2
    s_i / 2) at every node, and the rows of ``rows`` are w_i, w_i s_i and w_i (s_i - c)^2 for
    each centre c of ``_QUAD_CENTRES``. (Nodes run along the first axis: the products are then
    short-and-wide matrix products, several times faster than tall-and-skinny ones.)
    """
    x, w = np.polynomial.legendre.leggauss(_GL_ORDER)
    s, w = 0.5 * (x + 1.0), 0.5 * w
    expo = np.stack([-s, -s * s], axis=1)
    rows = np.stack([w, w * s] + [w * (s - c) ** 2 for c in _QUAD_CENTRES])
    return (
        torch.as_tensor(expo, dtype=dtype, device=device),
        torch.as_tensor(rows, dtype=dtype, device=device),
    )


def _quadrature(kappa: Tensor, q: Tensor, length: Tensor, moments: bool = True):
    """ln int_0^L e^{-kappa v - q v^2/2} dv (and mean, variance of v) by Gauss-Legendre.

    Accurate to rounding while the exponent varies by at most ~40 over [0, L]. It is used in the
    near-flat box and on short convex pieces only, where the exponent stays within [-9, 4] of
    its value at v = 0, so the node values e^{expo} are formed without a max-shift and every sum
    over nodes is one matrix product: the integral, the mean, and the second moments about the
    centres 0, L/4, ..., L. The variance is taken about the centre nearest to the mean, where it
    cancels by a factor 2 at most.
    """
    expo, rows = _gauss_legendre(kappa.dtype, kappa.device)
    shape = kappa.shape
    x = torch.stack([kappa * length, 0.5 * q * length * length]).reshape(2, -1)
    e = (expo @ x).exp_()  # (nodes, elements)
    if not moments:
        return (torch.log(rows[0] @ e).reshape(shape) + torch.log(length),)
    sums = (rows @ e).reshape(-1, *shape)
    z = sums[0]
    mean = sums[1] / z
    k = torch.round(mean * (len(_QUAD_CENTRES) - 1)).clamp(0, len(_QUAD_CENTRES) - 1).long()
    centre = k.to(mean.dtype) / (len(_QUAD_CENTRES) - 1)
    second = sums[2:].gather(0, k.unsqueeze(0)).squeeze(0) / z
    var = second - (mean - centre) ** 2
    return torch.log(z) + torch.log(length), length * mean, length * length * var


@functools.lru_cache(maxsize=16)
def _tail_coefficients(dtype: torch.dtype, device: torch.device) -> Tensor:
    """Rows a_n, n a_n, n (n - 1) a_n of T(w) = sum_n a_n w^n, a_n = (-1)^n (2n - 1)!!."""
    a = [1.0]
    for n in range(1, _TAIL_TERMS + 1):
        a.append(-a[-1] * (2 * n - 1))
    n = np.arange(_TAIL_TERMS + 1, dtype=np.float64)
    a = np.array(a)
    return torch.as_tensor(np.stack([a, n * a, n * (n - 1) * a]), dtype=dtype, device=device)


def _powers(x: Tensor, n: int) -> Tensor:
    """Rows x^1 .. x^n of the flattened ``x``, shape (n, x.numel()).

    Without autograd by repeated doubling (rows k+1 .. 2k are rows 1 .. k times x^k, written
    in place): log2(n) contiguous products, 2-3x faster on CPU than a cumulative product along
    the first axis, which is strided across the elements. Each power is a product tree, within k
    eps of x^k as the sequential product is. With autograd, the cumulative product.
    """
    flat = x.reshape(-1)
    if torch.is_grad_enabled() and flat.requires_grad:
        return flat.expand(n, -1).cumprod(0)
    powers = flat.new_empty(n, flat.numel())
    powers[0] = flat
    k = 1
    while k < n:
        m = min(k, n - k)
        torch.mul(powers[:m], powers[k - 1], out=powers[k : k + m])
        k += m
    return powers


def _tail_piece(kappa: Tensor, q: Tensor, moments: bool = True):
    """Piece int_0^ext e^{-kappa v - q v^2/2} dv for kappa > 0, |w| = |q| / kappa^2 <= 0.01.

    Both erfcx (q > 0) and Dawson (q < 0) pieces share the asymptotic expansion
    kappa * int = T(w) = sum_n (-1)^n (2n-1)!! w^n (20 terms: error < 1e-17). With H1 = w T'/T
    and H2 = w^2 T''/T, d/dkappa gives mean = (1 + 2 H1) / kappa and
    var = (1 + 6 H1 + 4 H2 - 4 H1^2) / kappa^2, without the cancellation of the closed forms
    (eq. 92 addresses the same limit with a Taylor series of Erf). The powers of w are
    ``_powers`` and the three sums one matrix product.
    """
    w = q / (kappa * kappa)
    coef = _tail_coefficients(w.dtype, w.device)
    powers = _powers(w, _TAIL_TERMS)  # w^1 .. w^20, one row each
    if not moments:
        t0 = torch.addmm(coef[:1, :1], coef[:1, 1:], powers).reshape(w.shape)
        return (torch.log(t0) - torch.log(kappa),)
    t0, t1, t2 = (torch.addmm(coef[:, :1], coef[:, 1:], powers).reshape(3, *w.shape)).unbind(0)
    log_z = torch.log(t0) - torch.log(kappa)
    h1, h2 = t1 / t0, t2 / t0
    mean = (1.0 + 2.0 * h1) / kappa
    var = (1.0 + 6.0 * h1 + 4.0 * h2 - 4.0 * h1 * h1) / (kappa * kappa)
    return log_z, mean, var


@functools.lru_cache(maxsize=16)
def _cf_coefficients(device: torch.device) -> Tensor:
    """Coefficients (2, 1 + _CF_TERMS / 2), float64, of c1 = u P(u^2) / Q(u^2), u = 1/z.

    c1 = 1/(z + (3/2)/(z + 2/(z + ...))) truncated after _CF_TERMS levels is A(z) / B(z), the
    convergent of the recurrences A_k = z A_{k-1} + a_k A_{k-2} (same for B), a_k = (k + 1)/2.
    Both have nonnegative coefficients and a definite parity, so after division by
    z^_CF_TERMS they become u P(u^2) and Q(u^2) with P, Q of nonnegative coefficients (computed
    exactly, then rounded; rows: P padded with a zero, Q), whose sums never cancel.
    """
    n = _CF_TERMS
    prev = ([Fraction(1)], [Fraction(0)])  # A_{-1}, B_{-1}
    cur = ([Fraction(0)], [Fraction(1)])  # A_0, B_0
    for k in range(1, n + 1):
        a_k = Fraction(k + 1, 2)
        nxt = []
        for p_cur, p_prev in zip(cur, prev, strict=True):
            poly = [Fraction(0)] * (max(len(p_cur) + 1, len(p_prev)))
            for i, v in enumerate(p_cur):
                poly[i + 1] += v
            for i, v in enumerate(p_prev):
                poly[i] += a_k * v
            nxt.append(poly)
        prev, cur = cur, tuple(nxt)
    # coefficient of u^m after division by z^n is that of z^(n - m); A has only odd m, B even m
    by_u = [[p[n - m] if n - m < len(p) else Fraction(0) for m in range(n + 1)] for p in cur]
    rows = [by_u[0][1::2] + [Fraction(0)], by_u[1][0::2]]
    return torch.tensor(
        [[float(c) for c in row] for row in rows], dtype=torch.float64, device=device
    )


def _mills_cf(z: Tensor) -> Tensor:
    """c1 = 1/(z + (3/2)/(z + 2/(z + ...))) for z >= 1.5, in float64 (_CF_TERMS levels).

    Laplace's continued fraction sqrt(pi) erfcx(z) = 1/(z + (1/2)/(z + c1)) evaluated as
    u P(u^2) / Q(u^2), u = 1/z (``_cf_coefficients``): ``_powers`` and one matrix product
    instead of a loop; relative error about 1e-15 for z >= 2 (< 1e-11 at z = 1.5; tests
    against 90-digit erfcx).
    """
    u = 1.0 / wide(z)
    v = u * u
    powers = _powers(v, _CF_TERMS // 2)  # v^1 .. v^(n/2), one row each
    coef = _cf_coefficients(v.device)
    num, den = torch.addmm(coef[:, :1], coef[:, 1:], powers)
    return u * (num / den).reshape(u.shape)


def _mills_far(z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ln(sqrt(pi) erfcx z), r = lambda - z and var s of ``_gauss_piece`` by Laplace's fraction.

    With c1 = ``_mills_cf``(z): r = (1/2)/(z + c1), sqrt(pi) erfcx(z) = 1/(z + r) and
    var s = r (c1 - r), none of which cancels.
    """
    c = _mills_cf(z).to(z.dtype)
    r = 0.5 / (z + c)
    return -torch.log(z + r), r, r * (c - r)


def _mills_near(z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ln(sqrt(pi) erfcx z), r = lambda - z and var s = 1/2 - r lambda from erfcx / erfc."""
    inside = z < 0
    zp, zn = z.clamp(min=0.0), z.clamp(max=0.0)
    ex = torch.special.erfcx(zp)
    ec = torch.special.erfc(zn)
    log_e = torch.where(inside, zn * zn + torch.log(_SQRT_PI * ec), torch.log(_SQRT_PI * ex))
    lam = torch.where(inside, torch.exp(-zn * zn) / (_SQRT_PI * ec), 1.0 / (_SQRT_PI * ex))
    r = lam - z
    return log_e, r, 0.5 - r * lam


def _gauss_piece(kappa: Tensor, q: Tensor, moments: bool = True):
    """Semi-infinite piece int_0^inf e^{-kappa v - q v^2/2} dv for q > 0 (one Erf of eq. 75).

    With z = kappa / sqrt(2q) and s = v sqrt(q/2) the integral is sqrt(pi / 2q) erfcx(z) and
    the density e^{-2zs - s^2}: with lambda = 1/(sqrt(pi) erfcx(z)), <s> = r = lambda - z and
    var s = 1/2 - r lambda (the one-sided forms of eqs. 78, 81). For z < 0 (mode inside)
    erfcx(z) = e^{z^2} erfc(z) is taken in log form. Where lambda - z cancels (z >= 2 in
    float64, z >= 1.5 in lower precision), everything comes from Laplace's continued fraction
    instead (``_mills_far``), erfcx included.
    """
    z = kappa / torch.sqrt(2.0 * q)
    far = z >= (2.0 if z.dtype == torch.float64 else 1.5)
    log_e, r, var_s = _piecewise([(far, _mills_far), (~far, _mills_near)], z)
    log_z = log_e - 0.5 * torch.log(2.0 * q)
    if not moments:
        return (log_z,)
    scale2 = 2.0 / q
    return log_z, r * torch.sqrt(scale2), var_s * scale2


@functools.lru_cache(maxsize=16)
def _dawson_offsets(dtype: torch.dtype, device: torch.device) -> Tensor:
    """The odd offsets n = -(2N - 1), ..., 2N - 1 of Rybicki's sum (N = _DAWSON_TERMS)."""
    return torch.arange(-(2 * _DAWSON_TERMS - 1), 2 * _DAWSON_TERMS, 2, dtype=dtype, device=device)


def _dawson(x: Tensor, derivatives: bool = True) -> tuple[Tensor, ...]:
    """Dawson's function F(x) = e^{-x^2} int_0^x e^{t^2} dt (and F', F'') for x >= 0.5.

    Rybicki's sampling formula F(x) = pi^{-1/2} sum_{n odd} e^{-(x - n h)^2} / n, recentred on
    the nearest even multiple of h (34 terms, summed along a trailing axis), differentiated term
    by term, which keeps F' = 1 - 2xF and F'' = -2F - 2xF' free of cancellation (relative errors
    ~1e-15 at h = 0.2). Erfi(x) = 2 pi^{-1/2} e^{x^2} F(x) (eq. 73).
    """
    j = _dawson_offsets(x.dtype, x.device)
    n0 = 2.0 * torch.round(x / (2.0 * _DAWSON_H))
    y = (x - n0 * _DAWSON_H).unsqueeze(-1) - _DAWSON_H * j
    e = torch.exp(-y * y) / (n0.unsqueeze(-1) + j)
    f = e.sum(-1) / _SQRT_PI
    if not derivatives:
        return (f,)
    ye = y * e
    f1 = -2.0 * ye.sum(-1) / _SQRT_PI
    f2 = ((4.0 * y * ye - 2.0 * e).sum(-1)) / _SQRT_PI
    return f, f1, f2


def _convex_piece(kappa: Tensor, k: Tensor, moments: bool = True):
    """Piece int_0^{kappa/k} e^{-kappa v + k v^2/2} dv (q = -k < 0) up to the exponent's minimum.

    With X = kappa / sqrt(2k) and s = v sqrt(k/2) the density is e^{-2Xs + s^2} on [0, X], of
    integral F(X) (Dawson). Writing I(beta) = int_0^X e^{-2 beta s + s^2} ds = F(beta) +
    e^{X^2 - 2 beta X} F(X - beta) and differentiating at beta = X (eps = e^{-X^2}):
    <s> = (eps - F') / (2F),  <s^2> = (F'' + 4 X eps) / (4F),
    var s = (F (F'' + 4 X eps) - (F' - eps)^2) / (4 F^2), which cancels by a factor ~2 only.
    Used for 2 < X < 7.07.
    """
    x = kappa / torch.sqrt(2.0 * k)
    fs = _dawson(x, derivatives=moments)
    f = fs[0]
    scale2 = 2.0 / k
    log_z = 0.5 * torch.log(scale2) + torch.log(f)
    if not moments:
        return (log_z,)
    f1, f2 = fs[1], fs[2]
    eps = torch.exp(-x * x)
    mean_s = (eps - f1) / (2.0 * f)
    var_s = (f * (f2 + 4.0 * x * eps) - (f1 - eps) ** 2) / (4.0 * f * f)
    return log_z, mean_s * torch.sqrt(scale2), var_s * scale2


def _piece(kappa: Tensor, q: Tensor, moments: bool = True):
    """(ln integral, mean, var) of the piece anchored at an end with decay rate ``kappa``.

    Semi-infinite for q >= 0, up to the minimum v = kappa / |q| of the exponent for q < 0.
    """
    tiny = torch.finfo(kappa.dtype).tiny
    tail = (kappa > 0) & (q.abs() <= _TAIL_W * kappa * kappa)
    gauss = ~tail & (q > 0)
    convex = ~tail & ~gauss
    short = convex & (kappa <= _SHORT_X * torch.sqrt(2.0 * (-q).clamp(min=0.0)))
    branches = [
        (tail, lambda kp, qq: _tail_piece(kp, qq, moments)),
        (gauss, lambda kp, qq: _gauss_piece(kp, qq, moments)),
        (short, lambda kp, qq: _quadrature(kp, qq, (kp / -qq).clamp(min=tiny), moments)),
        (convex & ~short, lambda kp, qq: _convex_piece(kp, -qq, moments)),
    ]
    return _piecewise(branches, kappa, q)


def _two_pieces(p, q, rate_a, rate_b, moments: bool = True):
    """int_0^2 e^{-(p - q) u - q u^2/2} du (p >= 0, outside the box) from its two end pieces.

    Near piece: rate ``rate_a`` = p - q at u = 0. Far piece at u = 2, of relative weight e^{-2p}:
    rate |rate_b|, rate_b = p + q, subtracted (it extends beyond u = 2) when rate_b > 0, else
    added (it runs back to the minimum). Mean and variance combine as a signed mixture (law of
    total variance). The rates are passed in, not recomputed from p and q, to keep their
    relative precision when |q| >> |p - q|. Both pieces go through ``_piece`` as one batch.
    """
    sign = 1.0 - 2.0 * (rate_b > 0).to(p.dtype)
    n = p.shape[0]
    both = _piece(torch.cat([rate_a, -sign * rate_b]), torch.cat([q, q]), moments)
    a, b = [t[:n] for t in both], [t[n:] for t in both]  # |rate_b|: differentiable at 0
    ratio = sign * torch.exp(b[0] - a[0] - 2.0 * p)
    log_z = a[0] + torch.log1p(ratio)
    if not moments:
        return (log_z,)
    wa = 1.0 / (1.0 + ratio)
    wb = ratio * wa
    mean_b = 2.0 - sign * b[1]
    mean = wa * a[1] + wb * mean_b
    var = wa * a[2] + wb * b[2] + wa * wb * (a[1] - mean_b) ** 2
    return log_z, mean, var


def _symmetric(p, q, rate_a, rate_b, moments: bool = True):
    """ln int_0^2 e^{-(p - q) u - q u^2/2} du (and mean, variance of u) for p >= 0."""
    box = (p <= _BOX_P) & (q.abs() <= _BOX_Q)
    branches = [
        (box, lambda pp, qq, ra, rb: _quadrature(ra, qq, torch.full_like(pp, 2.0), moments)),
        (~box, lambda pp, qq, ra, rb: _two_pieces(pp, qq, ra, rb, moments)),
    ]
    return _piecewise(branches, p, q, rate_a, rate_b)


def _segment(rate0: Tensor, rate1: Tensor, q: Tensor, length: Tensor, moments: bool = True):
    """Log-normaliser and moments of f(v) = exp(-rate0 v - q v^2/2) on [0, L] (all regimes).

    ``rate1`` = -(rate0 + q L) is the decay rate at v = L looking back (-f'/f there); both are
    passed so that each keeps the precision it has in the caller. Without ``moments`` only
    ``log_z`` is computed (``dist`` and ``var`` are then None).
    """
    half = 0.5 * length
    qt = q * half * half
    p = 0.5 * half * (rate0 - rate1)
    flip = p < 0
    rate_a = half * torch.where(flip, rate1, rate0)
    rate_b = -half * torch.where(flip, rate0, rate1)
    out = _symmetric(torch.where(flip, -p, p), qt, rate_a, rate_b, moments)
    log_z = out[0] + torch.log(half)
    if not moments:
        return _Segment(log_z, flip, p, None, None)
    return _Segment(log_z, flip, p, half * out[1], half * half * out[2])


def _log_survival(rate0, rate1, q, length, d) -> tuple[Tensor, Tensor]:
    """ln S(d) - ln f(0) and ln S(d) - ln f(d), S(d) = int_d^L f, f(v) = e^{-rate0 v - q v^2/2}."""
    rest = _segment(rate0 + q * d, rate1, q, length - d, moments=False).log_z0()
    return -rate0 * d - 0.5 * q * d * d + rest, rest


def _invert_survival(rate0, rate1, q, length, w, log_total) -> Tensor:
    """Solve S(d) = w S(0), S(d) = int_d^L e^{-rate0 v - q v^2/2} dv, for d in [0, L].

    Inverse-CDF sampling in log-survival form: psi(d) = ln S(d) - ln(w S(0)), where S(d) is itself
    a segment problem (rates rate0 + q d and rate1, length L - d), so psi is accurate in every
    regime, and psi'(d) = -f(d) / S(d). Safeguarded Newton (bisection when a step leaves the
    bracket) from a truncated-exponential, exponential-quadratic or Gaussian quantile; for a
    pure exponential psi is linear and one step is exact. ``log_total`` is ln S(0) - ln f(0).
    """
    e = -torch.log(w)
    trunc = -torch.log1p((1.0 - w) * torch.expm1(-rate0 * length)) / rate0
    trunc = torch.where((rate0 * length).abs() < 1e-6, (1.0 - w) * length, trunc)
    quad = 2.0 * e / (rate0 + torch.sqrt(rate0 * rate0 + 2.0 * q * e))
    mode, sd = -rate0 / q, torch.rsqrt(q)  # Gaussian truncated at the anchor only
    gauss = mode - sd * torch.special.ndtri(w * torch.special.ndtr(mode / sd))
    guess = torch.where(q > 0, torch.where(rate0 > 0, torch.minimum(quad, trunc), gauss), trunc)
    guess = torch.where((guess > 0) & (guess < length), guess, (1.0 - w) * length)
    target = torch.log(w) + log_total
    lo, hi, d = torch.zeros_like(length), length, guess
    for _ in range(_NEWTON_STEPS):
        log_s, rest = _log_survival(rate0, rate1, q, length, d)
        psi = log_s - target
        above = psi > 0
        lo = torch.where(above, d, lo)
        hi = torch.where(above, hi, d)
        step = d + psi * torch.exp(rest)
        ok = (step >= lo) & (step <= hi) & (step < length)
        d = torch.where(ok, step, 0.5 * (lo + hi))
    return d


def draw(rate0, rate1, q, length, u_side, w) -> tuple[Tensor, Tensor]:
    """One draw per element from exp(-rate0 v - q v^2/2) on [0, L] (``rate1`` as in _segment).

    Returns (from_start, dist): the draw is v = dist where ``from_start``, else v = L - dist, so
    draws close to either end keep full precision. The draw is taken from the anchor end; for
    convex exponents whose minimum lies inside, an end is picked first (uniform ``u_side``
    against the exact mass ratio) and the draw is taken from that end, within its monotone piece.
    """
    half = 0.5 * length
    qt = q * half * half
    pa = (0.5 * half * (rate0 - rate1)).abs()
    flip = rate0 < rate1
    near, far = torch.where(flip, rate1, rate0), torch.where(flip, rate0, rate1)
    two_sided = (qt < 0) & (pa + qt <= 0)
    k = torch.where(two_sided, -q, torch.ones_like(q))
    mid = torch.where(two_sided, (near / k).clamp(max=length), length)
    far_len = (length - mid).clamp(min=torch.finfo(length.dtype).tiny)
    zero = torch.zeros_like(near)
    near_end = torch.where(two_sided, zero, far)
    far_start = far.clamp(min=0.0)  # >= 0 where two_sided; unused elsewhere
    near_mass = _segment(near, near_end, q, mid, moments=False).log_z0()
    far_mass = _segment(far_start, zero, q, far_len, moments=False).log_z0()
    pick_far = two_sided & (u_side < torch.sigmoid(far_mass - near_mass - 2.0 * pa))
    start = torch.where(pick_far, far_start, near)
    end = torch.where(pick_far, zero, near_end)
    span = torch.where(pick_far, far_len, mid)
    log_total = torch.where(pick_far, far_mass, near_mass)
    dist = _invert_survival(start, end, q, span, w, log_total)
    return flip == pick_far, dist


def closed_setup(kappa, kappa_far, s, h: float):
    """f = 1/sqrt(2 s), g1, g2, the width g2 - g1 = h sqrt(2 s) and the closed-regime mask.

    ``kappa`` and ``kappa_far`` = kappa + 2 h s are the decay rates at the anchor and at the
    other bound looking back (see ``closed_form``). Where s <= 0, f, g and the width are inf or
    nan and the mask is False.
    """
    f = torch.mul(s, 2.0).rsqrt_()
    g1, g2 = kappa * f, kappa_far * f
    width = torch.mul(s, f).mul_(2.0 * h)
    ok = (g1 <= FAST_G) & (width >= FAST_WIDTH)
    return f, g1, g2, width, ok


def closed_form(f, g1, g2, width, log_z: bool, moments: bool, w=None) -> list[Tensor]:
    """The "closed" regime: exp(-kappa v - s v^2/2) on [0, 2h] for s > 0, by erfc.

    In tau = sqrt(s/2) v + g1 the density is e^{-tau^2} on [g1, g2], g = kappa / sqrt(2 s)
    (``closed_setup``): with D = erfc(g1) - erfc(g2) and R_i = e^{-g_i^2} / (sqrt(pi) D),

        ln int f / f(anchor) = g1^2 + ln(sqrt(pi / (2 s)) D),
        <tau> - g1 = R1 - R2 - g1,   var tau = 1/2 - (R1 - R2)(R1 - R2 - g1) - (g2 - g1) R2,

    the truncated-normal forms of eqs. (78, 81). They cancel as the box narrows (var tau ->
    (g2 - g1)^2 / 12) and as the mode recedes beyond the anchor (var tau -> 1 / (4 g1^2)), so they
    are used only for g1 <= FAST_G and g2 - g1 = h sqrt(2 s) >= FAST_WIDTH, where they lose at
    most ~5e3 ulps of float64 (at the corner g1 = 2.5, g2 - g1 = 0.3; ~10 ulps for modes inside
    a box a few standard deviations wide). Callers pass float64.

    Returns ln int f / f(anchor) if ``log_z``, the mean distance from the anchor and the
    variance if ``moments``, and, given uniforms ``w`` in (0, 1], inverse-CDF draws of the
    distance from the anchor: erfc(tau) = erfc(g2) + w D, solved with ndtri on whichever of
    erfc(tau), erfc(-tau) = erfc(-g1) + (1 - w) D is <= 1. Outside the mask of
    ``closed_setup`` the values are meaningless. ``_closed_form_`` is the same computation
    with in-place temporaries, for inputs without autograd.
    """
    ec1, ec2 = torch.special.erfc(g1), torch.special.erfc(g2)
    d = ec1 - ec2
    out = []
    if log_z:
        out.append(g1 * g1 + torch.log(_SQRT_PI * f * d))
    if moments:
        k = 1.0 / (_SQRT_PI * d)
        r1, r2 = torch.exp(-g1 * g1) * k, torch.exp(-g2 * g2) * k
        m = r1 - r2
        dist = m - g1
        var = 0.5 - m * dist - width * r2
        out += [(2.0 * f) * dist, (4.0 * f * f) * var]
    if w is not None:
        y = ec2 + w * d
        y_far = torch.special.erfc(-g1) + (1.0 - w) * d
        z = torch.special.ndtri(0.5 * torch.minimum(y, y_far))
        tau = torch.where(y <= y_far, -z, z) / _SQRT2
        out.append((2.0 * f) * (tau - g1))
    return out


def _closed_form_(f, g1, g2, width, log_z: bool, moments: bool) -> list[Tensor]:
    """``closed_form`` (without draws) overwriting its inputs g1, g2 and width as scratch.

    On large tensors most of the time of an out-of-place version goes into fresh allocations
    (page faults), so this twin reuses buffers; it must not see autograd, and the results may
    alias the inputs. Same formulas; only the order of a few additions differs.
    """
    d = torch.special.erfc(g1)
    ec2 = torch.special.erfc(g2)
    d.sub_(ec2)
    out = []
    if log_z:
        out.append(torch.mul(d, f).mul_(_SQRT_PI).log_().addcmul_(g1, g1))
    if moments:
        k = d.mul_(_SQRT_PI).reciprocal_()
        r1 = torch.mul(g1, g1).neg_().exp_().mul_(k)
        r2 = torch.mul(g2, g2, out=ec2).neg_().exp_().mul_(k)
        m = r1.sub_(r2)
        dist = torch.sub(m, g1, out=g2)
        var = width.mul_(r2).addcmul_(m, dist).neg_().add_(0.5)
        out += [dist.mul_(f).mul_(2.0), var.mul_(f).mul_(f).mul_(4.0)]
    return out


def _gauss_tail(f, g1, g2, width, log_z: bool, moments: bool) -> list[Tensor]:
    """The "tail" regime: ``closed_form``'s problem for g1 > FAST_G, g2 - g1 >= FAST_WIDTH.

    The mode lies beyond the anchor, so e^{-tau^2} on [g1, g2] is the one-sided tail from g1
    minus that from g2, of relative weight w = e^{-(g2^2 - g1^2)} lambda_1 / lambda_2 <= 0.2,
    lambda = 1/(sqrt(pi) erfcx g) = g + r. Each tail has mean distance r = (1/2)/(g + c1) from
    its start and variance r (c1 - r) (``_mills_cf`` for both g at once), and the two combine
    as a signed mixture (law of total variance) that cancels by a factor ~5 at most. Float64.
    """
    z = torch.stack([g1, g2])
    c = _mills_cf(z)
    r = 0.5 / (z + c)
    lam = z + r
    w = torch.exp(-width * (g1 + g2)) * lam[0] / lam[1]
    out = [torch.log(f / lam[0]) + torch.log1p(-w)] if log_z else []
    if moments:
        v = r * (c - r)
        wa = 1.0 / (1.0 - w)
        wb = -w * wa
        far = width + r[1]
        dist = wa * r[0] + wb * far
        var = wa * v[0] + wb * v[1] + wa * wb * (r[0] - far) ** 2
        out += [(2.0 * f) * dist, (4.0 * f * f) * var]
    return out


def _careful(kappa, kappa_far, s, tilt, h: float, dtype: torch.dtype, log_z: bool, moments: bool):
    """The regimes after "closed" in the table above, on a subset, as autograd needs them.

    Inputs as for ``closed_setup`` plus the tilt p = h |c|; returns (ln int f / f(anchor),)
    and/or (mean distance from the anchor, variance), in the dtype of ``kappa``. The "tail"
    regime is computed in float64, the others in ``dtype``. Each regime sees only its own
    elements (``_piecewise``), so no gradient passes through values outside its domain; without
    autograd, ``_careful_pieces`` gives the same values with less gathering.
    """

    def tail(k, kf, ss, _):
        f, g1, g2, width, _ = closed_setup(k, kf, ss, h)
        return _gauss_tail(f, g1, g2, width, log_z, moments)

    with torch.no_grad():
        _, g1, _, width, _ = closed_setup(kappa, kappa_far, s, h)
        is_tail = _is_tail(g1, width)
    return _piecewise(
        [(is_tail, tail), (~is_tail, lambda *a: _general(*a, h, dtype, log_z, moments))],
        kappa,
        kappa_far,
        s,
        tilt,
    )


def _is_tail(g1: Tensor, width: Tensor) -> Tensor:
    """The "tail" regime's elements (``closed_setup``'s g1 and width; False where s <= 0)."""
    return (g1 > FAST_G) & (width >= FAST_WIDTH)


def _general(kappa, kappa_far, s, tilt, h: float, dtype: torch.dtype, log_z: bool, moments: bool):
    """The "general" regime (``_symmetric`` in ``dtype``), results in the dtype of ``kappa``."""
    wide = kappa.dtype
    args = (tilt, s * (h * h), h * kappa, h * kappa_far)
    out = _symmetric(*(a.to(dtype) for a in args), moments=moments)
    res = [(out[0] + math.log(h)).to(wide)] if log_z else []
    if moments:
        res += [(h * out[1]).to(wide), (h * h * out[2]).to(wide)]
    return res


def _careful_pieces(setup, ok, args, h: float, dtype: torch.dtype, log_z: bool, moments: bool):
    """``_careful`` without autograd, on the elements outside the closed regime ``ok``: a list
    of (flat indices, results) per regime that has elements.

    The partition is taken once on the whole tensors, and the "tail" regime reads the
    ``closed_setup`` already computed (``setup``: f, g1, g2, width) instead of gathering its
    inputs and computing it again: elementwise the same operations, so the same values as
    ``_careful``, with a third of its gathers and scatters. ``setup`` must be read before the
    closed form overwrites it.
    """
    f, g1, g2, width = (t.reshape(-1) for t in setup)
    closed = ok.reshape(-1)
    tail = _is_tail(g1, width)
    general = ~(closed | tail)
    pieces = []
    tail_idx, general_idx = tail.nonzero().squeeze(1), general.nonzero().squeeze(1)
    if tail_idx.numel():
        sub = _gauss_tail(f[tail_idx], g1[tail_idx], g2[tail_idx], width[tail_idx], log_z, moments)
        pieces.append((tail_idx, sub))
    if general_idx.numel():
        sub = _general(*(a.reshape(-1)[general_idx] for a in args), h, dtype, log_z, moments)
        pieces.append((general_idx, sub))
    return pieces


class Tilt(NamedTuple):
    """exp(-s x^2/2 + b x) on [lower, upper], seen from its anchor (see the table above)."""

    sign: Tensor  # +1 where the anchor is ``upper`` (c >= +0), -1 where it is ``lower``
    rate: Tensor  # kappa = |c| - s h: decay rate at the anchor, into the box
    tilt: Tensor  # p = h |c|: ln f(anchor) - ln f(other bound) = 2 p
    log_z: Tensor | None  # ln int f / f(anchor)
    dist: Tensor | None  # mean distance from the anchor
    var: Tensor | None  # variance


def anchored(
    b, s, lower: float, upper: float, native, log_z=True, moments=True, owned=False
) -> Tilt:
    """``Tilt`` of exp(-s x^2/2 + b x) on [lower, upper] (b, s float64 or wider; broadcast).

    The closed form is evaluated where it is accurate, the careful regimes (in dtype ``native``)
    on the other elements only. Without autograd the closed form runs on every element and the
    others are overwritten, and with ``owned`` (b and s are temporaries of the caller, which
    get overwritten) the temporaries are reused in place; with autograd, each side gets
    only its own elements. ``sign`` (the sign bit of c, so -1 at c = -0.0) carries no gradient,
    so derivatives follow the anchor, also at c = 0.
    """
    b, s = torch.broadcast_tensors(b, s)
    mid, h = 0.5 * (lower + upper), 0.5 * (upper - lower)
    grad = torch.is_grad_enabled() and (b.requires_grad or s.requires_grad)
    inplace = owned and not grad and (log_z or moments)
    if inplace:
        b, s = b.contiguous(), s.contiguous()  # no copy for the caller's fresh temporaries
        c = b.add_(s, alpha=-mid) if mid != 0.0 else b
        sign = torch.ones_like(c).copysign_(c)
        ac = c.abs_()
        tilt = torch.mul(ac, h)
        kappa_far = torch.add(ac, s, alpha=h)
        kappa = ac.sub_(s, alpha=h)
    else:
        c = b - s * mid if mid != 0.0 else b
        sign = torch.ones_like(c).copysign_(c.detach())
        ac = sign * c
        tilt = h * ac
        kappa, kappa_far = ac - h * s, ac + h * s
    if not (log_z or moments):
        return Tilt(sign, kappa, tilt, None, None, None)
    args = (kappa, kappa_far, s, tilt)
    if grad:
        with torch.no_grad():
            ok = closed_setup(kappa, kappa_far, s, h)[-1]

        def closed(k, kf, ss, _):
            return closed_form(*closed_setup(k, kf, ss, h)[:-1], log_z, moments)

        outs = _piecewise(
            [(ok, closed), (~ok, lambda *a: _careful(*a, h, native, log_z, moments))], *args
        )
    else:
        *setup, ok = closed_setup(kappa, kappa_far, s, h)
        pieces = (
            [] if bool(ok.all()) else _careful_pieces(setup, ok, args, h, native, log_z, moments)
        )
        outs = (_closed_form_ if inplace else closed_form)(*setup, log_z, moments)
        for idx, sub in pieces:
            for o, r in zip(outs, sub, strict=True):
                o.view(-1)[idx] = r
    outs = list(outs)
    return Tilt(
        sign,
        kappa,
        tilt,
        outs.pop(0) if log_z else None,
        outs[0] if moments else None,
        outs[1] if moments else None,
    )
