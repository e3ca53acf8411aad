"""Linear stability of TAP fixed points under Alg. 1's damped sweep.

Alg. 1 iterates a map Phi_d of the state (a, c): one sweep (odd layers from their neighbours,
then even layers; eqs. 33-35), each layer's a and c moved to d * old + (1 - d) * new
(``damped.sweep``). Every solution of the TAP equations is a fixed point of Phi_d for every
damping d, but Alg. 1's iterates converge to it only if the spectral radius of Phi_d's Jacobian
there is below 1; above 1 no start reaches it (save a set of measure zero), whatever its basin
under another solver. A real eigenvalue below -1 is a flip: the iterates settle into a two-step
cycle around the fixed point, the cycles seen at damping 0.5 on trained RBMs, which a heavier
damping removes (for a simultaneous update it maps each eigenvalue lambda of the undamped map to
d + (1 - d) lambda).

The Jacobian is dense (D x D with D = 2 sum_l N_l: means and variances of every layer), taken
by forward-mode automatic differentiation of the same layer fields and prior moments the
solver uses, so its cost is D sweeps and one D x D eigenvalue problem per solution: meant for
analysing tens of solutions of an RBM of a few hundred hidden units, not for every row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap.state import TAPState

__all__ = ["flatten_state", "sweep_map", "sweep_jacobian", "sweep_stability"]


def flatten_state(state: TAPState) -> Tensor:
    """(K, D) rows z = (a_0, c_0, a_1, c_1, ...): the variable Alg. 1's sweep maps."""
    return torch.cat([t for pair in zip(state.a, state.c, strict=True) for t in pair], dim=1)


def sweep_map(machine: BoltzmannMachine, damping: float) -> Callable[[Tensor], Tensor]:
    """Phi_d on one flattened state z (1-D, ``flatten_state``'s layout): one sweep of Alg. 1
    (``damped.sweep`` with every quantity given, so every update damped), free (no clamped or
    tilted layer). The fields of eqs. 33-34 are formed out of place here (``damped`` forms
    them in place, which vectorised differentiation cannot batch)."""
    sizes = machine.sizes
    weights = [W.detach() for W in machine.weights]
    squares = [W * W for W in weights]
    order = [l for parity in (1, 0) for l in range(parity, len(sizes), 2)]

    def fields(l, a, c):
        below = [(c[l - 1] @ squares[l - 1], a[l - 1] @ weights[l - 1])] if l > 0 else []
        above = [(c[l + 1] @ squares[l].T, a[l + 1] @ weights[l].T)] if l < len(weights) else []
        A = -sum(s for s, _ in below + above)
        return A, sum(f for _, f in below + above) + A * a[l]

    offsets = [0, *itertools.accumulate(n for n in sizes for _ in "ac")]

    def phi(z: Tensor) -> Tensor:
        parts = [z[None, lo:hi] for lo, hi in itertools.pairwise(offsets)]
        a, c = parts[0::2], parts[1::2]
        for l in order:
            A, B = fields(l, a, c)
            f_a, f_c = machine.priors[l].moments(B, A)
            a[l] = damping * a[l] + (1.0 - damping) * f_a
            c[l] = damping * c[l] + (1.0 - damping) * f_c
        return torch.cat([t[0] for pair in zip(a, c, strict=True) for t in pair])

    return phi


def sweep_jacobian(
    machine: BoltzmannMachine, state: TAPState, damping: float, chunk: int = 8
) -> Tensor:
    """(K, D, D) Jacobians of ``sweep_map`` at the rows of ``state``: forward mode, vectorised
    over ``chunk`` rows at a time (memory chunk D^2 numbers); for a prior whose moments branch
    on the data (the truncated Gaussian's tails), which cannot be vectorised, reverse mode one
    output at a time."""
    phi = sweep_map(machine, damping)
    z = flatten_state(state)
    if all(isinstance(p, Bernoulli | Spin) for p in machine.priors):
        jacobian = torch.func.vmap(torch.func.jacfwd(phi))
        return torch.cat([jacobian(rows) for rows in z.split(chunk)])
    return torch.stack([torch.autograd.functional.jacobian(phi, row) for row in z])


def sweep_stability(
    machine: BoltzmannMachine, state: TAPState, damping: float
) -> tuple[Tensor, Tensor]:
    """Spectral radius (K,) and leading eigenvalue (K,) complex of Alg. 1's sweep Jacobian at
    damping ``damping`` at each row of ``state``; the rows should be fixed points (a radius
    below 1 then means Alg. 1 converges to the row from nearby starts, above 1 that it does not).
    """
    eigenvalues = torch.linalg.eigvals(sweep_jacobian(machine, state, damping))
    leading = eigenvalues.gather(1, eigenvalues.abs().argmax(1, keepdim=True))[:, 0]
    return leading.abs(), leading
