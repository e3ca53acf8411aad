"""Truncated Gaussian and truncated Gauss-Bernoulli units (App. C.1-C.3)."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import torch
from torch import Tensor

from tapmachine.core.priors import truncnorm as tn
from tapmachine.core.priors.base import Prior, draw_device


class _Tilted(NamedTuple):
    """Statistics of Q(x; B, A) and P(x) for a truncated Gaussian layer (same shape as B)."""

    log_z: Tensor  # ln Z_Q relative to P (eq. 75 divided by Z_TG)
    a: Tensor  # f_a of Q (eq. 78)
    c: Tensor  # f_c of Q (eq. 81)
    a_p: Tensor  # <x> under P
    c_p: Tensor  # var x under P


_PRIOR_TILTS: list[tuple[tuple, Tensor, Tensor, tn.Tilt]] = []  # most recent first
_PRIOR_TILTS_KEPT = 4


def _prior_tilt(U: Tensor, V: Tensor, lower: float, upper: float, log_z: bool, moments: bool):
    """``anchored`` of the prior P itself, exp(-V x^2/2 + U x) on [lower, upper].

    P does not depend on the fields, yet every moment evaluation of a layer needs its
    normaliser: a TAP solve would recompute it at each sweep, the careful regimes' many small
    operations on a few hundred units costing ~8% of a sweep of real-MNIST visible units.
    Without autograd the last few results are kept, each with a copy of the U and V it was
    computed from, and served (as fresh copies: callers may consume them) while U and V are
    equal to those copies, so an update of the parameters in place, however it is made, is
    never served a stale value.
    """

    def compute():
        return tn.anchored(tn.wide(U), tn.wide(V), lower, upper, U.dtype, log_z, moments)

    if torch.is_grad_enabled() and (U.requires_grad or V.requires_grad):
        return compute()
    key = (lower, upper, log_z, moments, U.dtype, V.dtype, U.device, U.shape, V.shape)
    kept = (
        i
        for i, (k, u, v, _) in enumerate(_PRIOR_TILTS)
        if k == key and torch.equal(u, U) and torch.equal(v, V)
    )
    hit = next(kept, None)
    if hit is None:
        _PRIOR_TILTS.insert(0, (key, U.clone(), V.clone(), compute()))
        del _PRIOR_TILTS[_PRIOR_TILTS_KEPT:]
    else:
        _PRIOR_TILTS.insert(0, _PRIOR_TILTS.pop(hit))
    return tn.Tilt(*(t if t is None else t.clone() for t in _PRIOR_TILTS[0][3]))


@dataclasses.dataclass(frozen=True, eq=False)
class TruncatedGaussian(Prior):
    """Truncated Gaussian units, P(x) proportional to exp(-V x^2/2 + U x) on [lower, upper].

    Eqs. (71-73): U = mu / sigma^2 and V = 1 / sigma^2 of the untruncated Gaussian; any real V
    is allowed (V < 0 is the Erfi form, eq. 73), and so is any A + V in Q (eq. 74), which is again
    a truncated Gaussian with linear coefficient B + U and precision A + V. The bounds are fixed,
    finite, lower < upper.

    Numerics: see the regime table in ``truncnorm``. In short, with A + V > 0 and a box at
    least 0.42 standard deviations wide: the truncated-normal closed forms (two erfc) while the
    mode lies inside the box or at most 3.5 standard deviations beyond the heavier bound -- the
    common regime, ~25 ns per element on one CPU thread -- and the difference of two Gaussian
    tails (Laplace's continued fraction) beyond; both in float64 for every input precision.
    Elsewhere, on those elements only: Gauss-Legendre in the near-flat box (A + V -> 0, V -> 0),
    log-erfcx / log-erfc and the Dawson function, and their asymptotic series (not the paper's
    Taylor series of eq. 92) when the centre (B + U)/(A + V) is far outside the box. Everything
    is relative to the heavier bound. Results are rounded once to the input precision.

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
    def support(self) -> str:
        return f"[{self.lower:g}, {self.upper:g}]"

    def in_support(self, x):
        return (x >= self.lower) & (x <= self.upper)

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def _tilt_q(self, B: Tensor, A: Tensor, log_z: bool, moments: bool) -> tn.Tilt:
        """Q(x; B, A): linear coefficient B + U and precision A + V, summed in float64."""
        native = torch.promote_types(self.U.dtype, B.dtype)
        b, s = tn.wide(self.U) + B, tn.wide(self.V) + A  # fresh: ``anchored`` may overwrite them
        return tn.anchored(b, s, self.lower, self.upper, native, log_z, moments, owned=True)

    def _tilt_p(self, log_z: bool, moments: bool) -> tn.Tilt:
        """The prior P itself (``_prior_tilt``: computed once per value of U and V)."""
        return _prior_tilt(self.U, self.V, self.lower, self.upper, log_z, moments)

    def _anchor(self, t: tn.Tilt) -> Tensor:
        """The bound each element of ``t`` leans on."""
        return (0.5 * (self.lower + self.upper)) + t.sign * (0.5 * self.width)

    def _mean_var(self, t: tn.Tilt) -> tuple[Tensor, Tensor]:
        """Mean and variance in x, the mean measured from the bound the mass leans on.

        Without autograd, ``t.dist`` and ``t.var`` are consumed (overwritten).
        """
        lo, hi, h = self.lower, self.upper, 0.5 * self.width
        if t.dist.requires_grad or t.var.requires_grad:
            a = self._anchor(t) - t.sign * t.dist
            return a.clamp(lo, hi), t.var.clamp(0.0, h * h)
        a = torch.mul(t.sign, h).add_(0.5 * (lo + hi)).addcmul_(t.sign, t.dist, value=-1.0)
        return a.clamp_(lo, hi), t.var.clamp_(0.0, h * h)

    def _log_z(self, B: Tensor, A: Tensor, tq: tn.Tilt, tp: tn.Tilt) -> Tensor:
        """ln Z_Q (eq. 75) from the anchored normalisers of Q and P.

        ln Z_Q = [E_Q(x_Q) - E_P(x_P)] + (ln int relative to the anchors x_Q, x_P), with
        E(x) = -s x^2/2 + b x, E_Q - E_P = B x - A x^2/2 and E_P(upper) - E_P(lower) = 2 p_P:
        no large terms cancel, e.g. for P near uniform and Q squeezed against a bound. Without
        autograd, ``tq.log_z`` is consumed.
        """
        if tq.log_z.requires_grad or tp.log_z.requires_grad:
            x = self._anchor(tq)
            wB, wA = tn.wide(B), tn.wide(A)
            shift = wB * x - 0.5 * wA * x * x - (1.0 - tq.sign * tp.sign) * tp.tilt
            return shift + tq.log_z - tp.log_z
        corr = torch.mul(tq.sign, tp.sign).sub_(1.0).mul_(tp.tilt)
        x = torch.mul(tq.sign, 0.5 * self.width).add_(0.5 * (self.lower + self.upper))
        log_z = tq.log_z.sub_(tp.log_z).add_(corr).addcmul_(B, x)
        return log_z.addcmul_(A, x.mul_(x), value=-0.5)

    def _stats_wide(self, B: Tensor, A: Tensor, moments: bool = True) -> _Tilted:
        """``_stats`` in float64 (for float32 inputs)."""
        tq, tp = self._tilt_q(B, A, True, moments), self._tilt_p(True, moments)
        log_z = self._log_z(B, A, tq, tp)
        if not moments:
            return _Tilted(log_z, None, None, None, None)
        return _Tilted(log_z, *self._mean_var(tq), *self._mean_var(tp))

    def _stats(self, B: Tensor, A: Tensor) -> _Tilted:
        """ln Z_Q (eq. 75) and the moments of Q and P, in one pass (in the dtype of B + U)."""
        dtype = torch.promote_types(self.U.dtype, B.dtype)
        return _Tilted(*(t.to(dtype) for t in self._stats_wide(B, A)))

    def moments(self, B, A):
        """f_a (eq. 78) and f_c (eq. 81): mean and variance of Q(x; B, A)."""
        dtype = torch.promote_types(self.U.dtype, B.dtype)
        a, c = self._mean_var(self._tilt_q(B, A, False, True))
        return a.to(dtype), c.to(dtype)

    def log_partition(self, B, A):
        """ln Z_Q of eq. (75): ln int P(x) e^{-A x^2/2 + B x} dx (0 at B = A = 0)."""
        dtype = torch.promote_types(self.U.dtype, B.dtype)
        tq, tp = self._tilt_q(B, A, True, False), self._tilt_p(True, False)
        return self._log_z(B, A, tq, tp).to(dtype)

    def log_prob(self, x):
        """ln TG(x; U, V) of eqs. (72-73): a log-density on [lower, upper], -inf outside."""
        dtype = torch.promote_types(self.U.dtype, x.dtype)
        tp = self._tilt_p(True, False)
        # ln TG = E(x) - E(anchor) - ln int e^{E - E(anchor)}, E(x) - E(anchor) = -rate d - V d^2/2
        dist = tp.sign * (self._anchor(tp) - tn.wide(x))
        lp = -tp.rate * dist - 0.5 * tn.wide(self.V) * dist * dist - tp.log_z
        inside = (x >= self.lower) & (x <= self.upper)
        return torch.where(inside, lp, -math.inf).to(dtype)

    def grad_log_partition(self, B, A):
        """Eqs. (85-86): d ln Z_Q / dU = f_a - <x>_P, d/dV = -(f_c + f_a^2 - <x^2>_P) / 2."""
        dtype = torch.promote_types(self.U.dtype, B.dtype)
        a, c = self._mean_var(self._tilt_q(B, A, False, True))
        a_p, c_p = self._mean_var(self._tilt_p(False, True))
        if a.requires_grad or a_p.requires_grad:
            d_u = a - a_p
            d_v = -0.5 * ((c - c_p) + d_u * (a + a_p))
        else:  # the same, in place
            d_u = a.sub_(a_p)
            d_v = torch.add(d_u, a_p, alpha=2.0).mul_(d_u).add_(c).sub_(c_p).mul_(-0.5)
        return {"U": d_u.to(dtype), "V": d_v.to(dtype)}

    def grad_log_prob(self, x):
        """Eqs. (83-84): d ln TG / dU = x - <x>_P, d/dV = -(x^2 - <x^2>_P) / 2."""
        dtype = torch.promote_types(self.U.dtype, x.dtype)
        a_p, c_p = self._mean_var(self._tilt_p(False, True))
        xw = tn.wide(x)
        return {
            "U": (xw - a_p).to(dtype),
            "V": (-0.5 * ((xw - a_p) * (xw + a_p) - c_p)).to(dtype),
        }

    @torch.no_grad()
    def sample(self, B, A, generator=None):
        """Exact draws from Q by inverting its CDF.

        With ndtri (``tn.closed_form``) where A + V > 0, the box is at least 0.42 standard
        deviations wide and the mode lies at most 14 standard deviations beyond the heavier
        bound (g <= tn.SAMPLE_G, which covers the closed regime and the near part of the tail
        one; draws within 1e-13 of their spread), elsewhere by log-survival Newton (``tn.draw``),
        on those elements only.
        """
        dtype = torch.promote_types(self.U.dtype, B.dtype)
        b, s = torch.broadcast_tensors(tn.wide(self.U) + B, tn.wide(self.V) + A)
        at = draw_device(generator, b)
        u_side = torch.rand(b.shape, generator=generator, dtype=dtype, device=at).to(b.device)
        w = 1.0 - torch.rand(b.shape, generator=generator, dtype=dtype, device=at).to(b.device)
        t = tn.anchored(b, s, self.lower, self.upper, dtype, False, False)
        h = 0.5 * self.width
        f, g1, g2, width, _ = tn.closed_setup(t.rate, torch.add(t.rate, s, alpha=2.0 * h), s, h)
        ok = (g1 <= tn.SAMPLE_G) & (width >= tn.FAST_WIDTH)
        (dist,) = tn.closed_form(f, g1, g2, width, False, False, tn.wide(w))
        x = (self._anchor(t) - t.sign * dist).clamp_(self.lower, self.upper).to(dtype)
        if not bool(ok.all()):
            idx = (~ok).reshape(-1).nonzero().squeeze(1)
            bs, ss = b.reshape(-1)[idx], s.reshape(-1)[idx]
            rates = ((bs - ss * self.upper).to(dtype), (ss * self.lower - bs).to(dtype))
            length = torch.full_like(rates[0], self.width)
            us, ws = u_side.reshape(-1)[idx], w.reshape(-1)[idx]
            from_upper, d = tn.draw(*rates, ss.to(dtype), length, us, ws)
            xs = torch.where(from_upper, self.upper - d, self.lower + d)
            x.view(-1)[idx] = xs.clamp(self.lower, self.upper)
        return x


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

    Numerics are those of ``TruncatedGaussian`` (one shared pass gives ln Z_{Q,TG} and the
    moments of Q); the mixture is combined in float64 for every input precision.
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
    def support(self) -> str:
        return f"[{self.lower:g}, {self.upper:g}]"

    def in_support(self, x):
        return (x >= self.lower) & (x <= self.upper)

    @property
    def gaussian(self) -> TruncatedGaussian:
        """The truncated Gaussian part TG(x; U, V)."""
        return TruncatedGaussian(self.U, self.V, self.lower, self.upper)

    def _dtype(self, B: Tensor) -> torch.dtype:
        return torch.promote_types(torch.promote_types(self.rho.dtype, self.U.dtype), B.dtype)

    def _mix(self, log_z_tg: Tensor, log_z: bool = True) -> tuple[Tensor | None, Tensor, Tensor]:
        """ln Z_Q = ln(1 - rho + rho Z_{Q,TG}) (eq. 96; None unless ``log_z``), P_Q[x != 0] =
        rho Z_{Q,TG} / Z_Q (eq. 95 under Q) and its complement P_Q[x = 0] = (1 - rho) / Z_Q,
        each without cancellation: the two probabilities are sigmoid(+-t), t = ln rho +
        ln Z_{Q,TG} - ln(1 - rho)."""
        rho = self.rho.to(torch.promote_types(self.rho.dtype, log_z_tg.dtype))
        log_rho, log_off = torch.log(rho), torch.log1p(-rho)
        log_z = torch.logaddexp(log_off, log_rho + log_z_tg) if log_z else None
        t = log_z_tg + (log_rho - log_off)
        return log_z, torch.sigmoid(t), torch.sigmoid(-t)

    def moments(self, B, A):
        """Eqs. (97-98): f_a = pi a_TG, f_c = pi c_TG + pi (1 - pi) a_TG^2, pi = P_Q[x != 0].

        (Eq. 98's second line drops the square on f_a^TG; the first line is the right one.)
        """
        g = self.gaussian
        tq, tp = g._tilt_q(B, A, True, True), g._tilt_p(True, False)
        a_tg, c_tg = g._mean_var(tq)
        _, on, off = self._mix(g._log_z(B, A, tq, tp), log_z=False)
        if a_tg.requires_grad or on.requires_grad:
            a = on * a_tg
            c = on * c_tg + on * off * a_tg * a_tg
        else:  # the same, in place
            c = c_tg.addcmul_(off, a_tg * a_tg).mul_(on)
            a = a_tg.mul_(on)
        dtype = self._dtype(B)
        return (
            a.clamp(self.lower, self.upper).to(dtype),
            c.clamp(0.0, 0.25 * (self.upper - self.lower) ** 2).to(dtype),
        )

    def log_partition(self, B, A):
        """Eq. (96): ln(1 - rho + rho Z_{Q,TG}), 0 at B = A = 0."""
        log_z_tg = self.gaussian._stats_wide(B, A, moments=False).log_z
        return self._mix(log_z_tg)[0].to(self._dtype(B))

    def log_prob(self, x):
        """ln(1 - rho) at x == 0, ln rho + ln TG(x) elsewhere (see the class docstring)."""
        cont = torch.log(self.rho) + self.gaussian.log_prob(x)
        return torch.where(x == 0, torch.log1p(-self.rho), cont)

    def grad_log_partition(self, B, A):
        """Eq. (107) for rho, i.e. (Z_{Q,TG} - 1) / Z_Q; pi times eqs. (85-86) for U, V."""
        t = self.gaussian._stats_wide(B, A)
        log_z, pi, _ = self._mix(t.log_z)
        # (Z_TG - 1) / Z_Q without overflow: sign(l) (1 - e^{-|l|}) e^{max(l, 0) - ln Z_Q}
        l = t.log_z
        d_rho = torch.sign(l) * -torch.expm1(-l.abs()) * torch.exp(l.clamp(min=0.0) - log_z)
        d_u = t.a - t.a_p
        d_v = -0.5 * ((t.c - t.c_p) + d_u * (t.a + t.a_p))
        dtype = self._dtype(B)
        return {"rho": d_rho.to(dtype), "U": (pi * d_u).to(dtype), "V": (pi * d_v).to(dtype)}

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
        pi = self._mix(self.gaussian._stats_wide(B, A, moments=False).log_z, log_z=False)[1]
        x = self.gaussian.sample(B, A, generator=generator)
        pi = pi.to(x.dtype)
        at = draw_device(generator, pi)
        u = torch.rand(pi.shape, generator=generator, dtype=pi.dtype, device=at).to(pi.device)
        on = u < pi
        return torch.where(on, x, 0.0)
