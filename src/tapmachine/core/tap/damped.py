"""One sweep of Alg. 1: each layer's fields (eqs. 33-34) and damped moment update, batched;
and the same sweep with each unit's damping set by a Newton step on its Onsager self-feedback
(``newton_sweep``)."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussBernoulli
from tapmachine.core.tap.fused import fusable, fused_layer_update

__all__ = ["neighbour_fields", "layer_fields", "sweep", "newton_sweep", "mean_bounds"]


def neighbour_fields(l, a, c, weights, neg_squares):
    """A_l of eq. (33) and the coupling field sum_m W_lm a_m of eq. (34) from the neighbours of
    layer ``l`` (batched matmuls). ``neg_squares`` holds -W * W, so A comes straight out of the
    matmuls."""
    n_couplings = len(weights)
    A = None
    field = None
    if l > 0:
        A = torch.mm(c[l - 1], neg_squares[l - 1])
        field = torch.mm(a[l - 1], weights[l - 1])
    if l < n_couplings:
        if A is None:
            A = torch.mm(c[l + 1], neg_squares[l].T)
            field = torch.mm(a[l + 1], weights[l].T)
        else:
            A.addmm_(c[l + 1], neg_squares[l].T)
            field.addmm_(a[l + 1], weights[l].T)
    return A, field


def layer_fields(l, a, c, weights, neg_squares):
    """(A_l, B_l) of eqs. (33)-(34) from the neighbours of layer ``l``; the Onsager reaction
    term of B uses the layer's previous mean a_l."""
    A, field = neighbour_fields(l, a, c, weights, neg_squares)
    return A, field.addcmul_(A, a[l])


def sweep(
    a, c, A, B, order, weights, neg_squares, priors, tilt, keep_a, keep_c, fuse=False
) -> Tensor:
    """One sweep of Alg. 1 over the layers in ``order``, in place on the lists a, c, A, B.

    Each layer l gets A_l, B_l from its neighbours (eqs. 33-34; ``tilt`` adds the visible
    layer's external field), then a_l <- a_l + (1 - keep_a[l]) (f_a - a_l) and
    c_l <- lerp(f_c, c_l, keep_c[l]). Returns each row's sum over the layers of the squared
    damped step of the means (the numerator of ``solve``'s criterion). With ``fuse`` the
    elementwise part of each untilted binary layer's update is one compiled kernel
    (``fused.fused_layer_update``; same numbers up to rounding).
    """
    step = torch.zeros(a[order[0]].shape[0], dtype=a[order[0]].dtype, device=a[order[0]].device)
    for l in order:
        if fuse and fusable(priors[l]) and (l > 0 or tilt is None):
            A[l], field = neighbour_fields(l, a, c, weights, neg_squares)
            B[l], a[l], c[l], s = fused_layer_update(
                A[l], field, a[l], c[l], priors[l], keep_a[l], keep_c[l]
            )
            step += s
            continue
        A[l], B[l] = layer_fields(l, a, c, weights, neg_squares)
        if l == 0 and tilt is not None:
            for field, extra in zip((A[0], B[0]), tilt, strict=True):
                if extra is not None:
                    field.add_(extra)
        a_new, c_new = priors[l].moments(B[l], A[l])
        # a <- a + (1 - damping) (f_a - a); the squared step is taken from the same
        # difference (one pass fewer than lerp, subtract, square, sum).
        diff = a_new.sub_(a[l])
        step += torch.linalg.vector_norm(diff, dim=1).square_().mul_((1.0 - keep_a[l]) ** 2)
        a[l] = torch.add(a[l], diff, alpha=1.0 - keep_a[l])
        if keep_c[l] > 0.0:
            c_new = c_new.lerp_(c[l], keep_c[l])
        c[l] = c_new
    return step


def mean_bounds(prior) -> tuple[float, float]:
    """The interval that holds a unit's mean: the convex hull of its prior's support."""
    if isinstance(prior, Bernoulli):
        return 0.0, 1.0
    if isinstance(prior, Spin):
        return -1.0, 1.0
    lower, upper = float(prior.lower), float(prior.upper)
    if isinstance(prior, TruncatedGaussBernoulli):  # an atom at 0 besides [lower, upper]
        lower, upper = min(lower, 0.0), max(upper, 0.0)
    return lower, upper


def newton_sweep(
    a, c, A, B, order, weights, neg_squares, priors, tilt, fresh, damping, relaxation=1.0
) -> Tensor:
    """One sweep over the layers in ``order`` with a per-unit Newton damping, in place on a, c,
    A, B.

    Given its neighbours, unit i's update in Alg. 1 is a_i <- g(a_i) = f_a(A_i a_i + h_i, A_i)
    (eqs. 33-35): its own mean enters only through the Onsager term, with slope
    g'(a_i) = A_i f_c <= 0 (f_c = d f_a / dB is Q's variance for every prior here, Q being
    exponential in B; A_i <= 0). One Newton step on a_i - g(a_i) = 0 per unit and sweep is

        a_i <- a_i + (f_a - a_i) / (1 - A_i f_c),

    Alg. 1's damped update with the unit's own damping keep = -A f_c / (1 - A f_c) in [0, 1)
    instead of a fixed one: heavy where the self-feedback is strong (|A f_c| reaches tens on
    trained RBMs, where Alg. 1 at 0.5 crawls or cycles), none where it is weak. f_a, f_c are
    Alg. 1's (the fields from the layer's previous mean), so a sweep costs a damped one, and
    the fixed points are Alg. 1's. A single-site tilt (``tilt``, visible layer) adds to the
    fields the moments read but carries no Onsager term, so it is left out of the slope.

    The variances keep Alg. 1's update, c_i <- lerp(f_c, c_i, ``damping``): c_i does not enter
    its own unit's equation (A_i is made of the neighbours' variances), so the Newton argument
    gives it no per-unit slope. Its feedback runs through the neighbouring layers' Onsager
    coefficients, a loop between layers that Alg. 1's fixed damping is there for. Measured
    (docs/tap_solver.md): on trained binary-MNIST RBMs c <- f_c, the per-unit step and the
    fixed damping take the same sweeps within 9%; on an RBM where Alg. 1 cycles (tests'
    ``cycling_rbm``) c <- f_c converges 40% of the rows, the per-unit step all in a median of
    95 sweeps, the fixed damping all in 47.

    ``relaxation`` omega scales the Newton step, a_i <- a_i + omega (f_a - a_i) / (1 - A_i f_c),
    clipped to the support's hull (``mean_bounds``): Ortega and Rheinboldt's one-step SOR-Newton
    method. The units of a layer do not interact given the other layers, so a sweep over the
    layers is a Gauss-Seidel sweep over the units, and omega > 1 over-relaxes it: the Newton
    step removes the self-feedback, over-relaxation speeds up the slow modes between layers
    (``solve``'s ``"newton_sor"``).

    ``fresh`` = (fresh_a, fresh_c), one bool per layer: that quantity is a placeholder (the
    first sweep of a defaulted one) and takes a full step, as in ``sweep``. Returns each row's
    sum over the layers of the squared residual f_a - a times (1 - ``damping``)^2: with
    ``solve``'s criterion it bounds the residual as Alg. 1's damped step at ``damping`` does.
    """
    step = torch.zeros(a[order[0]].shape[0], dtype=a[order[0]].dtype, device=a[order[0]].device)
    for l in order:
        A_self, B[l] = layer_fields(l, a, c, weights, neg_squares)
        A[l] = A_self
        if l == 0 and tilt is not None:
            A[0] = A_self if tilt[0] is None else A_self + tilt[0]
            if tilt[1] is not None:
                B[0] = B[0].add_(tilt[1])
        a_new, c_new = priors[l].moments(B[l], A[l])
        gain = torch.addcmul(torch.ones_like(c_new), A_self, c_new, value=-1.0).reciprocal_()
        if relaxation != 1.0:
            gain.mul_(relaxation)
        diff = a_new.sub_(a[l])
        step += torch.linalg.vector_norm(diff, dim=1).square_().mul_((1.0 - damping) ** 2)
        if fresh[0][l]:
            a[l] = torch.add(a[l], diff)
        elif relaxation > 1.0:
            a[l] = torch.addcmul(a[l], diff, gain).clamp_(*mean_bounds(priors[l]))
        else:
            a[l] = torch.addcmul(a[l], diff, gain)
        c[l] = c_new if fresh[1][l] else c_new.lerp_(c[l], damping)
    return step
