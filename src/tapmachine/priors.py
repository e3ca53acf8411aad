"""Unit priors of generalised RBMs (first paper, App. C).

Every prior P(x; theta) describes one layer of units; each parameter is a tensor of shape (N,)
(one value per unit) and every method broadcasts over leading batch dimensions. The central object
is the tilted distribution

    Q(x; B, A, theta) = P(x; theta) exp(-A x^2 / 2 + B x) / Z(B, A; theta),

whose mean and variance are the TAP update functions f_a, f_c (eqs. 78, 81, 113-114) and whose
normaliser ``Z(B, A; theta)`` -- relative to P, so that Z(0, 0) = 1 -- enters the TAP free energy
(eq. 36) and the log-likelihood (eq. 39).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import logsigmoid, softplus

__all__ = ["Prior", "Bernoulli", "Spin", "TruncatedGaussian", "TruncatedGaussBernoulli"]


@dataclasses.dataclass(frozen=True, eq=False)
class Prior(abc.ABC):
    """Interface shared by every unit prior.

    Subclasses are frozen dataclasses whose tensor fields named in ``param_names`` are the
    trainable parameters; other fields (bounds) are fixed. ``replace`` returns an updated copy, so
    training never mutates a prior in place.
    """

    param_names = ()

    @property
    def size(self) -> int:
        """Number of units N."""
        return getattr(self, self.param_names[0]).shape[-1]

    def params(self) -> dict[str, Tensor]:
        """The trainable parameters by name."""
        return {name: getattr(self, name) for name in self.param_names}

    def replace(self, **changes) -> Prior:
        """A copy with some fields replaced (parameters or bounds)."""
        return dataclasses.replace(self, **changes)

    def to(self, device=None, dtype=None) -> Prior:
        """A copy with every parameter tensor moved to ``device``/``dtype``."""
        return self.replace(
            **{k: v.to(device=device, dtype=dtype) for k, v in self.params().items()}
        )

    def config(self) -> dict:
        """The non-tensor fields (bounds): enough, with ``params``, to rebuild the prior."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self.param_names
        }

    @abc.abstractmethod
    def moments(self, B: Tensor, A: Tensor) -> tuple[Tensor, Tensor]:
        """Mean f_a and variance f_c of Q(x; B, A)."""

    @abc.abstractmethod
    def log_partition(self, B: Tensor, A: Tensor) -> Tensor:
        """ln Z(B, A): log normaliser of Q relative to P, so ln Z(0, 0) = 0."""

    @abc.abstractmethod
    def log_prob(self, x: Tensor) -> Tensor:
        """ln P(x; theta), elementwise (a log-density for continuous units)."""

    @abc.abstractmethod
    def grad_log_partition(self, B: Tensor, A: Tensor) -> dict[str, Tensor]:
        """d ln Z(B, A) / d theta for each parameter, elementwise (shape of B)."""

    @abc.abstractmethod
    def grad_log_prob(self, x: Tensor) -> dict[str, Tensor]:
        """d ln P(x; theta) / d theta for each parameter, elementwise (shape of x)."""

    @abc.abstractmethod
    def sample(self, B: Tensor, A: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One draw from Q(x; B, A) per element."""

    def mean(self, B: Tensor) -> Tensor:
        """Conditional mean f(B) = f_a(B, 0) of eq. (15)."""
        return self.moments(B, torch.zeros_like(B))[0]


@dataclasses.dataclass(frozen=True, eq=False)
class Bernoulli(Prior):
    """Binary {0, 1} units, P(x; U) = exp(U x) / (1 + e^U) (eqs. 110-118)."""

    U: Tensor
    param_names = ("U",)

    def _field(self, B: Tensor, A: Tensor) -> Tensor:
        # x^2 = x on {0, 1}, so the quadratic tilt is a shift of the field (eq. 113).
        return self.U + B - 0.5 * A

    def moments(self, B, A):
        a = torch.sigmoid(self._field(B, A))
        return a, a * (1.0 - a)

    def log_partition(self, B, A):
        """Eq. (112): ln(1 + e^{U + B - A/2}) - ln(1 + e^U)."""
        return softplus(self._field(B, A)) - softplus(self.U)

    def log_prob(self, x):
        return x * logsigmoid(self.U) + (1.0 - x) * logsigmoid(-self.U)

    def grad_log_partition(self, B, A):
        """Eq. (116): f_a(B, A; U) - sigm(U)."""
        return {"U": torch.sigmoid(self._field(B, A)) - torch.sigmoid(self.U)}

    def grad_log_prob(self, x):
        """Eq. (115): x - sigm(U)."""
        return {"U": x - torch.sigmoid(self.U)}

    def sample(self, B, A, generator=None):
        p = torch.sigmoid(self._field(B, A))
        return torch.bernoulli(p, generator=generator)


@dataclasses.dataclass(frozen=True, eq=False)
class Spin(Prior):
    """Ising {-1, +1} units, P(x; U) = exp(U x) / (2 cosh U).

    Since x^2 = 1 the quadratic tilt A only enters the normaliser as a constant e^{-A/2}; it
    cancels in Q, so f_a = tanh(U + B) and f_c = 1 - f_a^2.
    """

    U: Tensor
    param_names = ("U",)

    def moments(self, B, A):
        a = torch.tanh(self.U + B)
        return a, 1.0 - a * a

    def log_partition(self, B, A):
        """ln cosh(U + B) - ln cosh(U) - A/2."""
        return _log_cosh(self.U + B) - _log_cosh(self.U) - 0.5 * A

    def log_prob(self, x):
        return self.U * x - _log_cosh(self.U) - math.log(2.0)

    def grad_log_partition(self, B, A):
        return {"U": torch.tanh(self.U + B) - torch.tanh(self.U) + 0.0 * A}

    def grad_log_prob(self, x):
        return {"U": x - torch.tanh(self.U)}

    def sample(self, B, A, generator=None):
        p = torch.sigmoid(2.0 * (self.U + B)) + 0.0 * A
        return 2.0 * torch.bernoulli(p, generator=generator) - 1.0


def _log_cosh(z: Tensor) -> Tensor:
    """ln cosh z without overflow: |z| + ln(1 + e^{-2|z|}) - ln 2."""
    z = z.abs()
    return z + softplus(-2.0 * z) - math.log(2.0)


# ----------------------------------------------------------------------------------------------
# Truncated Gaussian units (App. C.1-C.2).
#
# Every quantity of a tilted truncated Gaussian reduces to one "segment" problem: the density
#
#     f(v) proportional to exp(-kappa v - q v^2 / 2)   on   0 <= v <= L,
#
# with v the distance from one end of the box, kappa the decay rate there and q the precision of
# either sign (q < 0 is the Erfi branch of eqs. 73, 75). For Q (linear coefficient b = B + U,
# precision s = A + V, eq. 74) measured from ``upper``: kappa = b - s upper, q = s, L = upper -
# lower (the decay rate at the other end, s lower - b, is formed from b and s as well, never from
# kappa). On t = 1 - 2 v / L in [-1, 1] the density is exp(p t - q_t t^2 / 2) with
# p = kappa L / 2 + q L^2 / 4 and q_t = q L^2 / 4; reflecting t -> -t makes p >= 0, so the mass
# leans towards the end t = 1 (the "anchor"), and every log-normaliser is taken relative to the
# density there and every mean is a distance from it: a distribution squeezed against either bound
# keeps full relative precision, and nothing of size (B + U)^2 / (A + V) is ever formed.
#
# Regimes of the reflected problem (p >= 0, u = 1 - t in [0, 2]):
#   box   p <= 4 and |q_t| <= 8 (near-flat, which contains A + V -> 0 at moderate B + U and
#         V -> 0): the closed forms (78, 81) cancel catastrophically, so a 24-point Gauss-Legendre
#         rule (error far below 1e-16 for integrands this mild) gives ln Z, mean and variance.
#   else  the integral over [-1, 1] is a signed sum of two "pieces" anchored at the two ends,
#             int_0^ext exp(-k v - q v^2 / 2) dv,   k = decay rate at that end,
#         q > 0: semi-infinite Gaussian tails, the far one subtracted (d+ of eq. 75);
#         q < 0: pieces running from each end to the minimum of the convex exponent (d- of eq.
#         75), added, or subtracted when the minimum lies beyond the far end;
#         the subtraction never cancels by more than a factor 1 / (1 - e^-8) outside the box.
#   A piece is evaluated as
#     tail    k > 0 and |q| <= 0.01 k^2: asymptotic series of erfcx / Dawson in w = q / k^2
#             (20 terms, truncation error < 1e-17): centres (B + U)/(A + V) far outside the box
#             (the situation of eqs. 91-92), and the exponential limit A + V -> 0;
#     gauss   q > 0 otherwise: log-erfcx, or log-erfc for modes inside;
#     convex  q < 0 otherwise: Dawson function, or quadrature when the piece is short.
# ----------------------------------------------------------------------------------------------

_GL_ORDER = 24  # Gauss-Legendre nodes
_BOX_P = 4.0  # near-flat box: p <= _BOX_P and |q_t| <= _BOX_Q
_BOX_Q = 8.0
_TAIL_W = 0.01  # asymptotic series when |q| <= _TAIL_W kappa^2 (erfcx argument >= 7.07)
_TAIL_TERMS = 20
_SHORT_X = 2.0  # convex pieces with X = kappa / sqrt(2 |q|) <= _SHORT_X use quadrature
_DAWSON_H = 0.2  # Rybicki step: error ~ exp(-(pi / 2h)^2) ~ 1e-27
_DAWSON_TERMS = 17
_CF_TERMS = 40  # depth of the continued fraction of erfcx (moments of Gaussian pieces)
_NEWTON_STEPS = 8  # safeguarded Newton steps of the inverse-CDF sampler
_SQRT_PI = math.sqrt(math.pi)


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

    Each ``fn`` receives only its own elements, so no branch is ever evaluated outside its domain:
    no inf/nan is produced and autograd stays clean (unlike ``torch.where`` on full tensors).
    """
    shape = torch.broadcast_shapes(*(a.shape for a in args))
    args = [a.expand(shape) for a in args]
    outs = None
    for mask, fn in branches:
        mask = mask.expand(shape)
        res = fn(*(a[mask] for a in args))
        if outs is None:
            outs = [torch.zeros(shape, dtype=r.dtype, device=r.device) for r in res]
        outs = [o.masked_scatter(mask, r) for o, r in zip(outs, res, strict=True)]
    return tuple(outs)


@functools.lru_cache(maxsize=16)
def _gauss_legendre(dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """Nodes s_i in (0, 1) and log-weights of the Gauss-Legendre rule on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(_GL_ORDER)
    s = torch.as_tensor(0.5 * (x + 1.0), dtype=dtype, device=device)
    return s, torch.as_tensor(np.log(0.5 * w), dtype=dtype, device=device)


def _quadrature(kappa: Tensor, q: Tensor, length: Tensor, moments: bool = True):
    """ln int_0^L e^{-kappa v - q v^2/2} dv (and mean, variance of v) by Gauss-Legendre.

    Accurate to rounding while the exponent varies by at most ~40 over [0, L] (the near-flat box,
    short convex pieces); the variance is summed about the mean, so nothing cancels.
    """
    s, log_w = _gauss_legendre(kappa.dtype, kappa.device)
    kl = (kappa * length).unsqueeze(-1)
    half_ql = (0.5 * q * length * length).unsqueeze(-1)
    expo = log_w - s * (kl + half_ql * s)
    log_sum = torch.logsumexp(expo, dim=-1)
    log_z = log_sum + torch.log(length)
    if not moments:
        return (log_z,)
    prob = torch.exp(expo - log_sum.unsqueeze(-1))
    mean = (prob * s).sum(-1)
    var = (prob * (s - mean.unsqueeze(-1)) ** 2).sum(-1)
    return log_z, length * mean, length * length * var


def _tail_piece(kappa: Tensor, q: Tensor, moments: bool = True):
    """Piece int_0^ext e^{-kappa v - q v^2/2} dv for kappa > 0, |w| = |q| / kappa^2 <= 0.01.

    Both erfcx (q > 0) and Dawson (q < 0) pieces share the asymptotic expansion
    kappa * int = T(w) = sum_n (-1)^n (2n-1)!! w^n (20 terms: error < 1e-17). With H1 = w T'/T
    and H2 = w^2 T''/T, d/dkappa gives mean = (1 + 2 H1) / kappa and
    var = (1 + 6 H1 + 4 H2 - 4 H1^2) / kappa^2, without the cancellation of the closed forms
    (eq. 92 addresses the same limit with a Taylor series of Erf).
    """
    w = q / (kappa * kappa)
    term = torch.ones_like(w)
    t0, t1, t2 = torch.ones_like(w), torch.zeros_like(w), torch.zeros_like(w)
    for n in range(1, _TAIL_TERMS + 1):
        term = term * w * float(-(2 * n - 1))
        t0 = t0 + term
        if moments:
            t1 = t1 + float(n) * term
            t2 = t2 + float(n * (n - 1)) * term
    log_z = torch.log(t0) - torch.log(kappa)
    if not moments:
        return (log_z,)
    h1, h2 = t1 / t0, t2 / t0
    mean = (1.0 + 2.0 * h1) / kappa
    var = (1.0 + 6.0 * h1 + 4.0 * h2 - 4.0 * h1 * h1) / (kappa * kappa)
    return log_z, mean, var


def _gauss_piece(kappa: Tensor, q: Tensor, moments: bool = True):
    """Semi-infinite piece int_0^inf e^{-kappa v - q v^2/2} dv for q > 0 (one Erf of eq. 75).

    With z = kappa / sqrt(2q) and s = v sqrt(q/2) the integral is sqrt(pi / 2q) erfcx(z) and
    the density e^{-2zs - s^2}: with lambda = 1/(sqrt(pi) erfcx(z)), <s> = r = lambda - z and
    var s = 1/2 - r lambda (the one-sided forms of eqs. 78, 81). For z < 0 (mode inside)
    erfcx(z) = e^{z^2} erfc(z) is taken in log form. Where lambda - z cancels (z >= 3 in
    float64, z >= 1.5 in lower precision), r and var s come from Laplace's continued fraction
    sqrt(pi) erfcx(z) = 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + ...)))): r = (1/2)/(z + c1) and
    var s = r (c1 - r), c1 = 1/(z + (3/2)/(z + ...)) (40 levels).
    """
    z = kappa / torch.sqrt(2.0 * q)
    inside = z < 0
    zp, zn = z.clamp(min=0.0), z.clamp(max=0.0)
    ex = torch.special.erfcx(zp)
    ec = torch.special.erfc(zn)
    log_z = 0.5 * torch.log(0.5 * math.pi / q)
    log_z = log_z + torch.where(inside, zn * zn + torch.log(ec), torch.log(ex))
    if not moments:
        return (log_z,)
    lam = torch.where(inside, torch.exp(-zn * zn) / (_SQRT_PI * ec), 1.0 / (_SQRT_PI * ex))
    r = lam - z
    var_s = 0.5 - r * lam
    z_cf = 3.0 if z.dtype == torch.float64 else 1.5
    zc = z.clamp(min=z_cf)
    c = torch.zeros_like(zc)
    for n in range(_CF_TERMS, 0, -1):
        c = (0.5 * (n + 1)) / (zc + c)
    r_cf = 0.5 / (zc + c)
    far = z >= z_cf
    r, var_s = torch.where(far, r_cf, r), torch.where(far, r_cf * (c - r_cf), var_s)
    scale2 = 2.0 / q
    return log_z, r * torch.sqrt(scale2), var_s * scale2


def _dawson(x: Tensor, derivatives: bool = True) -> tuple[Tensor, ...]:
    """Dawson's function F(x) = e^{-x^2} int_0^x e^{t^2} dt (and F', F'') for x >= 0.5.

    Rybicki's sampling formula F(x) = pi^{-1/2} sum_{n odd} e^{-(x - n h)^2} / n, recentred on
    the nearest even multiple of h (34 terms), differentiated term by term, which keeps F' =
    1 - 2xF and F'' = -2F - 2xF' free of cancellation (relative errors ~1e-15 at h = 0.2).
    Erfi(x) = 2 pi^{-1/2} e^{x^2} F(x) (eq. 73).
    """
    n0 = 2.0 * torch.round(x / (2.0 * _DAWSON_H))
    xp = x - n0 * _DAWSON_H
    f, f1, f2 = torch.zeros_like(x), torch.zeros_like(x), torch.zeros_like(x)
    for j in range(-(2 * _DAWSON_TERMS - 1), 2 * _DAWSON_TERMS, 2):
        y = xp - j * _DAWSON_H
        e = torch.exp(-y * y) / (n0 + j)
        f = f + e
        if derivatives:
            f1 = f1 - 2.0 * y * e
            f2 = f2 + (4.0 * y * y - 2.0) * e
    if not derivatives:
        return (f / _SQRT_PI,)
    return f / _SQRT_PI, f1 / _SQRT_PI, f2 / _SQRT_PI


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
    relative precision when |q| >> |p - q|.
    """
    sign = torch.where(rate_b > 0, -torch.ones_like(p), torch.ones_like(p))
    a = _piece(rate_a, q, moments)
    b = _piece(-sign * rate_b, q, moments)  # |rate_b|, differentiable at 0 like the sum
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


def _draw(rate0, rate1, q, length, u_side, w) -> tuple[Tensor, Tensor]:
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


class _Tilted(NamedTuple):
    """Statistics of Q(x; B, A) and P(x) for a truncated Gaussian layer (same shape as B)."""

    log_z: Tensor  # ln Z_Q relative to P (eq. 75 divided by Z_TG)
    a: Tensor  # f_a of Q (eq. 78)
    c: Tensor  # f_c of Q (eq. 81)
    a_p: Tensor  # <x> under P
    c_p: Tensor  # var x under P


@dataclasses.dataclass(frozen=True, eq=False)
class TruncatedGaussian(Prior):
    """Truncated Gaussian units, P(x) proportional to exp(-V x^2/2 + U x) on [lower, upper].

    Eqs. (71-73): U = mu / sigma^2 and V = 1 / sigma^2 of the untruncated Gaussian; any real V
    is allowed (V < 0 is the Erfi form, eq. 73), and so is any A + V in Q (eq. 74), which is again
    a truncated Gaussian with linear coefficient B + U and precision A + V. The bounds are fixed,
    finite, lower < upper.

    Numerics: see the regime table above ``_GL_ORDER``. In short: Gauss-Legendre in the near-flat
    box (A + V -> 0, V -> 0), log-erfcx / log-erfc and the Dawson function elsewhere, and their
    asymptotic series (not the paper's Taylor series of eq. 92) when the centre
    (B + U)/(A + V) is far outside the box; everything is relative to the heavier bound.

    Paper erratum: the A + V < 0 branch of eq. (78) has the wrong sign; with
    h_x = sqrt(|A+V|/2)(x - (B+U)/(A+V)) the mean is
    (B+U)/(A+V) + sqrt(2/(pi |A+V|)) (e^{h_w^2} - e^{h_a^2}) / d_-. Eq. (82) is ln(1/Z_TG).
    """

    U: Tensor
    V: Tensor
    lower: float = 0.0
    upper: float = 1.0
    param_names = ("U", "V")

    def __post_init__(self):
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError(f"bounds must be finite, got [{self.lower}, {self.upper}]")
        if not self.lower < self.upper:
            raise ValueError(f"need lower < upper, got [{self.lower}, {self.upper}]")

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def _segment(self, b: Tensor, s: Tensor) -> _Segment:
        """exp(-s x^2/2 + b x) on [lower, upper] as a segment measured from ``upper``."""
        b, s = torch.broadcast_tensors(b, s)
        rate_upper, rate_lower = b - s * self.upper, s * self.lower - b
        return _segment(rate_upper, rate_lower, s, torch.full_like(b, self.width))

    def _moments(self, seg: _Segment) -> tuple[Tensor, Tensor]:
        """Mean and variance in x, the mean measured from the bound the mass leans on."""
        a = torch.where(seg.flip, self.lower + seg.dist, self.upper - seg.dist)
        return a.clamp(self.lower, self.upper), seg.var.clamp(0.0, 0.25 * self.width**2)

    def _bound(self, flip: Tensor, like: Tensor) -> Tensor:
        """``lower`` where ``flip`` else ``upper``, as a tensor like ``like``."""
        return torch.where(
            flip, torch.full_like(like, self.lower), torch.full_like(like, self.upper)
        )

    def _stats(self, B: Tensor, A: Tensor) -> _Tilted:
        """ln Z_Q (eq. 75) and the moments of Q and P, in one pass."""
        sq, sp = self._segment(self.U + B, self.V + A), self._segment(self.U, self.V)
        # ln Z_Q = [E_Q(x_Q) - E_P(x_P)] + (ln int relative to the anchors x_Q, x_P), with
        # E(x) = -s x^2/2 + b x, E_Q - E_P = B x - A x^2/2 and E_P(upper) - E_P(lower) = 2 p_P:
        # no large terms cancel, e.g. for P near uniform and Q squeezed against a bound.
        x = self._bound(sq.flip, sq.p)
        shift = B * x - 0.5 * A * x * x
        shift = shift - torch.where(sq.flip != sp.flip, 2.0 * sp.tilt(), 0.0)
        a, c = self._moments(sq)
        a_p, c_p = self._moments(sp)
        return _Tilted(shift + sq.log_z - sp.log_z, a, c, a_p, c_p)

    def moments(self, B, A):
        """f_a (eq. 78) and f_c (eq. 81): mean and variance of Q(x; B, A)."""
        return self._moments(self._segment(self.U + B, self.V + A))

    def log_partition(self, B, A):
        """ln Z_Q of eq. (75): ln int P(x) e^{-A x^2/2 + B x} dx (0 at B = A = 0)."""
        return self._stats(B, A).log_z

    def log_prob(self, x):
        """ln TG(x; U, V) of eqs. (72-73): a log-density on [lower, upper], -inf outside."""
        sp = self._segment(self.U, self.V)
        dist = torch.where(sp.flip, x - self.lower, self.upper - x)
        rate = torch.where(sp.flip, self.V * self.lower - self.U, self.U - self.V * self.upper)
        # ln TG = E(x) - E(anchor) - ln int e^{E - E(anchor)}, E(x) - E(anchor) = -rate d - V d^2/2
        lp = -rate * dist - 0.5 * self.V * dist * dist - sp.log_z
        inside = (x >= self.lower) & (x <= self.upper)
        return torch.where(inside, lp, -math.inf)

    def grad_log_partition(self, B, A):
        """Eqs. (85-86): d ln Z_Q / dU = f_a - <x>_P, d/dV = -(f_c + f_a^2 - <x^2>_P) / 2."""
        t = self._stats(B, A)
        return {"U": t.a - t.a_p, "V": -0.5 * ((t.c - t.c_p) + (t.a - t.a_p) * (t.a + t.a_p))}

    def grad_log_prob(self, x):
        """Eqs. (83-84): d ln TG / dU = x - <x>_P, d/dV = -(x^2 - <x^2>_P) / 2."""
        a_p, c_p = self._moments(self._segment(self.U, self.V))
        return {"U": x - a_p, "V": -0.5 * ((x - a_p) * (x + a_p) - c_p)}

    @torch.no_grad()
    def sample(self, B, A, generator=None):
        """Exact draws from Q by inverting its CDF (log-survival Newton, see ``_draw``)."""
        b, s = torch.broadcast_tensors(self.U + B, self.V + A)
        u_side = torch.rand(b.shape, generator=generator, dtype=b.dtype, device=b.device)
        w = 1.0 - torch.rand(b.shape, generator=generator, dtype=b.dtype, device=b.device)
        length = torch.full_like(b, self.width)
        rates = (b - s * self.upper, s * self.lower - b)
        from_upper, dist = _draw(*rates, s, length, u_side, w)
        x = torch.where(from_upper, self.upper - dist, self.lower + dist)
        return x.clamp(self.lower, self.upper)


@dataclasses.dataclass(frozen=True, eq=False)
class TruncatedGaussBernoulli(Prior):
    """Truncated Gauss-Bernoulli units: TGB(x) = (1 - rho) delta(x) + rho TG(x; U, V) (eq. 93).

    A spike at 0 of mass 1 - rho and, with probability rho, the truncated Gaussian of
    ``TruncatedGaussian`` on [lower, upper], which must contain 0 (App. C.2). rho is the mixture
    weight of the *normalised* TG, as in eq. (93), so that P[x != 0] = rho and Z_Q = 1 - rho +
    rho Z_{Q,TG} (eq. 96, Z_{Q,TG} from eq. 75).

    ``log_prob`` is the log-density with respect to (counting measure at 0) + Lebesgue: at
    x == 0 exactly it is ln(1 - rho), the log-mass of the spike; elsewhere ln rho + ln TG(x)
    (-inf outside [lower, upper]). A draw from the Gaussian part is 0 with probability zero.

    Eqs. (94-95, 99-101) normalise differently (Z_TGB = 1 - rho + rho Z_TG, with an unnormalised
    Gaussian) from eq. (93); both agree only if Z_TG = 1, which eq. (106) assumes. This class
    follows eq. (93), the definition, with which eqs. (96-97), the first line of (98), and (107)
    agree; its derivatives are those of its own ``log_prob`` and ``log_partition``.
    """

    rho: Tensor
    U: Tensor
    V: Tensor
    lower: float = 0.0
    upper: float = 1.0
    param_names = ("rho", "U", "V")

    def __post_init__(self):
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError(f"bounds must be finite, got [{self.lower}, {self.upper}]")
        if not self.lower <= 0.0 <= self.upper or not self.lower < self.upper:
            raise ValueError(
                f"need lower <= 0 <= upper, lower < upper, got [{self.lower}, {self.upper}]"
            )

    @property
    def gaussian(self) -> TruncatedGaussian:
        """The truncated Gaussian part TG(x; U, V)."""
        return TruncatedGaussian(self.U, self.V, self.lower, self.upper)

    def _mix(self, log_z_tg: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """ln Z_Q = ln(1 - rho + rho Z_{Q,TG}) (eq. 96), P_Q[x != 0] = rho Z_{Q,TG} / Z_Q (eq. 95
        under Q) and its complement P_Q[x = 0] = (1 - rho) / Z_Q, each without cancellation."""
        log_rho, log_off = torch.log(self.rho), torch.log1p(-self.rho)
        log_z = torch.logaddexp(log_off, log_rho + log_z_tg)
        on = torch.exp(log_rho + log_z_tg - log_z).clamp(0.0, 1.0)
        return log_z, on, torch.exp(log_off - log_z).clamp(0.0, 1.0)

    def moments(self, B, A):
        """Eqs. (97-98): f_a = pi a_TG, f_c = pi c_TG + pi (1 - pi) a_TG^2, pi = P_Q[x != 0].

        (Eq. 98's second line drops the square on f_a^TG; the first line is the right one.)
        """
        t = self.gaussian._stats(B, A)
        _, on, off = self._mix(t.log_z)
        a = on * t.a
        c = on * t.c + on * off * t.a * t.a
        return a.clamp(self.lower, self.upper), c.clamp(0.0, 0.25 * (self.upper - self.lower) ** 2)

    def log_partition(self, B, A):
        """Eq. (96): ln(1 - rho + rho Z_{Q,TG}), 0 at B = A = 0."""
        return self._mix(self.gaussian.log_partition(B, A))[0]

    def log_prob(self, x):
        """ln(1 - rho) at x == 0, ln rho + ln TG(x) elsewhere (see the class docstring)."""
        cont = torch.log(self.rho) + self.gaussian.log_prob(x)
        return torch.where(x == 0, torch.log1p(-self.rho), cont)

    def grad_log_partition(self, B, A):
        """Eq. (107) for rho, i.e. (Z_{Q,TG} - 1) / Z_Q; pi times eqs. (85-86) for U, V."""
        t = self.gaussian._stats(B, A)
        log_z, pi, _ = self._mix(t.log_z)
        # (Z_TG - 1) / Z_Q without overflow: sign(l) (1 - e^{-|l|}) e^{max(l, 0) - ln Z_Q}
        l = t.log_z
        d_rho = torch.sign(l) * -torch.expm1(-l.abs()) * torch.exp(l.clamp(min=0.0) - log_z)
        d_v = -0.5 * ((t.c - t.c_p) + (t.a - t.a_p) * (t.a + t.a_p))
        return {"rho": d_rho, "U": pi * (t.a - t.a_p), "V": pi * d_v}

    def grad_log_prob(self, x):
        """-1/(1 - rho) at x == 0; 1/rho and eqs. (83-84) of the TG part elsewhere.

        (Eq. 106 of the paper has delta(x) where 1 - delta(x) belongs: d/drho ln(1 - rho) < 0.)
        """
        g = self.gaussian.grad_log_prob(x)
        zero = x == 0
        rho = self.rho.expand_as(g["U"])
        return {
            "rho": torch.where(zero, -1.0 / (1.0 - rho), 1.0 / rho),
            "U": torch.where(zero, 0.0, g["U"]),
            "V": torch.where(zero, 0.0, g["V"]),
        }

    @torch.no_grad()
    def sample(self, B, A, generator=None):
        """A spike/slab choice with P_Q[x != 0] (eq. 95 under Q), then an exact TG draw from Q."""
        t = self.gaussian._stats(B, A)
        pi = self._mix(t.log_z)[1]
        x = self.gaussian.sample(B, A, generator=generator)
        on = torch.rand(pi.shape, generator=generator, dtype=pi.dtype, device=pi.device) < pi
        return torch.where(on, x, 0.0)
