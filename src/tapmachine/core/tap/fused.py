"""Alg. 1's per-layer elementwise update as one fused kernel (``torch.compile``), with an eager
fallback: ``solve(..., fuse=True)``.

A damped sweep's layer update after its two matmuls (eqs. 33-34, the moments and the damping)
is about ten elementwise passes over a (K, N) tensor in eager PyTorch; compiled, it is one.
Only binary priors (Bernoulli, spin) are fused: their moments are closed forms and their
parameters are passed as tensors, so a new prior object after each training step reuses the
compiled kernel. Compilation happens once per process and kernel variant (shapes are
dynamic); if it fails or ``torch.compile`` is unavailable, the eager update runs instead.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import Tensor

from tapmachine.core.priors import Bernoulli, Spin

__all__ = ["layer_update", "fused_layer_update", "fusable"]

_log = logging.getLogger(__name__)


def _binary_moments(B: Tensor, A: Tensor, U: Tensor, spin: bool) -> tuple[Tensor, Tensor]:
    """f_a, f_c of a binary unit: eqs. (113-114) for Bernoulli {0, 1}, tanh(U + B) for spins."""
    if spin:
        a = torch.tanh(U + B)
        return a, 1.0 - a * a
    a = torch.sigmoid(U + B - 0.5 * A)
    return a, a - a * a


def layer_update(
    A: Tensor,
    field: Tensor,
    a_old: Tensor,
    c_old: Tensor,
    U: Tensor,
    keep_a: float,
    keep_c: float,
    spin: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One layer's update of Alg. 1 after its matmuls: B = field + A a_old (eq. 34), the
    moments f_a, f_c (eqs. 113-114), a <- a_old + (1 - keep_a) (f_a - a_old),
    c <- lerp(f_c, c_old, keep_c). Returns (B, a, c, step) with step each row's squared damped
    step of the means, sum_i ((1 - keep_a) (f_a - a_old))^2."""
    B = field + A * a_old
    a_new, c_new = _binary_moments(B, A, U, spin)
    diff = a_new - a_old
    step = (diff * diff).sum(1) * ((1.0 - keep_a) * (1.0 - keep_a))
    a = a_old + (1.0 - keep_a) * diff
    c = c_new + keep_c * (c_old - c_new)
    return B, a, c, step


_compiled = None
_failed = False


def fusable(prior) -> bool:
    """Whether ``prior``'s update has a fused kernel (binary priors)."""
    return isinstance(prior, Bernoulli | Spin)


def fused_layer_update(A, field, a_old, c_old, prior, keep_a, keep_c):
    """``layer_update`` compiled for ``prior`` (``fusable``), or eager if compilation failed.

    The inductor compiles in this process (``compile_threads`` 1) so that a job uses no more
    cores than it was given.
    """
    global _compiled, _failed
    args = (A, field, a_old, c_old, prior.U, float(keep_a), float(keep_c), isinstance(prior, Spin))
    if not _failed:
        try:
            if _compiled is None:
                import torch._inductor.config as inductor_config

                inductor_config.compile_threads = 1
                _compiled = torch.compile(layer_update, dynamic=True)
            return _compiled(*args)
        except Exception as exc:  # any compiler failure: eager from now on
            _failed = True
            warnings.warn(f"torch.compile failed ({exc!r:.200}); eager TAP updates", stacklevel=2)
            _log.warning("torch.compile of the TAP update failed: %r", exc)
    return layer_update(*args)
