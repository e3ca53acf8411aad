"""Initialisation and unit conventions of UCD-LMI (Secs. 4.1, 4.3, App. B).

- Simplified centering (Sec. 4.1): units in {-1, +1} (``Spin`` priors) instead of {0, 1}; data
  in {0, 1} are mapped by x -> 2x - 1 (``to_spin``), and the indicator of Alg. 1 becomes a sign
  (``target.binary_mode``).
- Orthogonal weights (Sec. 4.3): W drawn uniformly (Haar) from the (semi-)orthogonal matrices
  (Mezzadri 2006: QR of a Gaussian matrix with the signs of R's diagonal folded into Q), so that
  W^T W = I (Nv >= Nh) or W W^T = I (Nv < Nh). The paper gives no further scale: ``gain`` = 1.
- Units and step size: with s = 2b - 1 the spin machine (W, U) is the {0, 1} machine
  (4W, 2U - 2 W 1 - 2 W^T 1) (``spin_to_binary``). Since dL/dW = 4 dL/dW' for W' = 4W, an SGD
  step of size lr on W moves W' by 16 lr dL/dW' (plus field terms): 16 times the step a {0, 1}
  machine takes at the same lr. The paper's lr 1e-2 goes with {0, 1} units (the authors'
  released code), so config ``learning_rate`` of the spin models is smaller (README departures).
- Biases (App. B): drawn from Logistic(0, 0.5), to break the symmetry E(v, h) = E(-v, -h) that
  zero biases give spins.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin

__all__ = ["orthogonal", "logistic", "to_spin", "random_machine", "spin_to_binary"]


def orthogonal(
    rows: int, cols: int, generator: torch.Generator, dtype=torch.float32, gain: float = 1.0
) -> Tensor:
    """A Haar-random (semi-)orthogonal rows x cols matrix times ``gain`` (Sec. 4.3, Mezzadri)."""
    if rows < 1 or cols < 1:
        raise ValueError(f"orthogonal needs positive sizes, got {rows} x {cols}")
    big, small = max(rows, cols), min(rows, cols)
    a = torch.randn(big, small, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1.0
    q = q * signs
    w = q if rows >= cols else q.T
    return (gain * w).to(dtype)


def logistic(n: int, generator: torch.Generator, scale: float = 0.5, dtype=torch.float32) -> Tensor:
    """n draws from Logistic(0, scale) (App. B: scale 0.5), by inversion: scale ln(u / (1 - u))."""
    u = torch.rand(n, generator=generator, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
    return (scale * torch.log(u / (1.0 - u))).to(dtype)


def to_spin(x: Tensor) -> Tensor:
    """{0, 1} -> {-1, +1}: the simplified centering of Sec. 4.1 applied to data."""
    return 2.0 * x - 1.0


def random_machine(
    sizes: Sequence[int],
    generator: torch.Generator,
    units: str = "spin",
    bias: str = "logistic",
    gain: float = 1.0,
    dtype=torch.float32,
) -> BoltzmannMachine:
    """A machine as UCD-LMI initialises it: orthogonal couplings, Logistic(0, 0.5) biases.

    ``units``: "spin" ({-1, +1}, Sec. 4.1) or "binary" ({0, 1}); ``bias``: "logistic" (App. B)
    or "zero". Two sizes make an RBM, more a DBM.
    """
    if len(sizes) < 2:
        raise ValueError(f"a machine needs at least two layers, got sizes {list(sizes)}")
    if units not in ("spin", "binary"):
        raise ValueError(f"units must be 'spin' or 'binary', got {units!r}")
    if bias not in ("logistic", "zero"):
        raise ValueError(f"bias must be 'logistic' or 'zero', got {bias!r}")
    weights = [
        orthogonal(a, b, generator, dtype, gain) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    cls = Spin if units == "spin" else Bernoulli
    biases = [
        logistic(n, generator, dtype=dtype) if bias == "logistic" else torch.zeros(n, dtype=dtype)
        for n in sizes
    ]
    priors = [cls(b) for b in biases]
    return BoltzmannMachine(priors=tuple(priors), weights=tuple(weights))


def spin_to_binary(machine: BoltzmannMachine) -> BoltzmannMachine:
    """The {0, 1} machine with the same distribution as a {-1, +1} one (s = 2b - 1).

    -E = sum_l s_l^T W_l s_{l+1} + sum_l U_l^T s_l; substituting s = 2b - 1 gives, up to a
    constant, sum_l b_l^T (4 W_l) b_{l+1} + sum_l b_l^T U'_l with
    U'_l = 2 U_l - 2 W_l 1 - 2 W_{l-1}^T 1 (the terms of the layers that exist).
    """
    if not all(isinstance(p, Spin) for p in machine.priors):
        raise ValueError("spin_to_binary needs a machine of {-1, +1} (Spin) units")
    weights = machine.weights
    fields = []
    for l, prior in enumerate(machine.priors):
        u = 2.0 * prior.U
        if l < len(weights):
            u = u - 2.0 * weights[l].sum(1)
        if l > 0:
            u = u - 2.0 * weights[l - 1].sum(0)
        fields.append(Bernoulli(u))
    return BoltzmannMachine(priors=tuple(fields), weights=tuple(4.0 * w for w in weights))
