"""One sweep of Alg. 1: each layer's fields (eqs. 33-34) and damped moment update, batched."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.tap.fused import fusable, fused_layer_update

__all__ = ["neighbour_fields", "layer_fields", "sweep"]


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
