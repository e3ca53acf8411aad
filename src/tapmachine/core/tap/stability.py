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
analysing tens of solutions of an RBM of a few hundred hidden units. ``sweep_radius_krylov``
estimates the same radius without forming the Jacobian: m Jacobian-vector products (forward
mode, all rows at once) and an m x m eigenvalue problem per row (Arnoldi), for many rows of
large machines.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap.state import TAPState

__all__ = [
    "flatten_state",
    "sweep_map",
    "sweep_jacobian",
    "sweep_stability",
    "sweep_radius_krylov",
]


def flatten_state(state: TAPState) -> Tensor:
    """(K, D) rows z = (a_0, c_0, a_1, c_1, ...): the variable Alg. 1's sweep maps."""
    return torch.cat([t for pair in zip(state.a, state.c, strict=True) for t in pair], dim=1)


def _forward_mode(machine: BoltzmannMachine) -> bool:
    """Whether forward-mode differentiation reaches every prior's moments: the binary priors'
    are out of place; the truncated ones' branch on the data and run in place."""
    return all(isinstance(p, Bernoulli | Spin) for p in machine.priors)


def _leading(eigenvalues: Tensor) -> tuple[Tensor, Tensor]:
    """(modulus, value) of each row's eigenvalue of largest modulus, from (K, n) eigenvalues."""
    leading = eigenvalues.gather(1, eigenvalues.abs().argmax(1, keepdim=True))[:, 0]
    return leading.abs(), leading


def sweep_map(
    machine: BoltzmannMachine, damping: float, batched: bool = False
) -> Callable[[Tensor], Tensor]:
    """Phi_d on one flattened state z (1-D, ``flatten_state``'s layout; (K, D) rows with
    ``batched``): one sweep of Alg. 1 (``damped.sweep`` with every quantity given, so every
    update damped), free (no clamped or tilted layer). The fields of eqs. 33-34 are formed out
    of place here (``damped`` forms them in place, which vectorised differentiation cannot
    batch)."""
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

    def phi_rows(z: Tensor) -> Tensor:
        parts = [z[:, lo:hi] for lo, hi in itertools.pairwise(offsets)]
        a, c = parts[0::2], parts[1::2]
        for l in order:
            A, B = fields(l, a, c)
            f_a, f_c = machine.priors[l].moments(B, A)
            a[l] = damping * a[l] + (1.0 - damping) * f_a
            c[l] = damping * c[l] + (1.0 - damping) * f_c
        return torch.cat([t for pair in zip(a, c, strict=True) for t in pair], dim=1)

    return phi_rows if batched else (lambda z: phi_rows(z[None])[0])


def sweep_jacobian(
    machine: BoltzmannMachine, state: TAPState, damping: float, chunk: int = 8
) -> Tensor:
    """(K, D, D) Jacobians of ``sweep_map`` at the rows of ``state``: forward mode, vectorised
    over ``chunk`` rows at a time (memory chunk D^2 numbers); for a prior whose moments branch
    on the data (the truncated Gaussian's tails), which cannot be vectorised, reverse mode one
    output at a time."""
    phi = sweep_map(machine, damping)
    z = flatten_state(state)
    if _forward_mode(machine):
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
    return _leading(torch.linalg.eigvals(sweep_jacobian(machine, state, damping)))


#: Relative size of the part of J v outside the Krylov space below which the space is taken as
#: invariant (Arnoldi's breakdown); rounding leaves about 1e-15, a genuine direction far more.
_BREAKDOWN = 1e-10


def sweep_radius_krylov(
    machine: BoltzmannMachine,
    state: TAPState,
    damping: float,
    krylov_dim: int = 60,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """``sweep_stability``'s spectral radius and leading eigenvalue (K,), estimated from an
    Arnoldi factorisation J V_m = V_m H_m + h v e_m^T of the sweep Jacobian at each row.

    The m = ``krylov_dim`` Krylov vectors of each row come from Jacobian-vector products of the
    batched sweep (forward mode, all rows at once, no D x D matrix; reverse mode twice for a
    prior whose moments are computed in place), started from a random vector (``generator``)
    and orthogonalised twice against the previous ones (classical Gram-Schmidt, repeated). The
    eigenvalues of the small upper Hessenberg H_m (Ritz
    values) approximate the outermost eigenvalues of J first and are J's eigenvalues at m = D
    (the whole space), or as soon as the Krylov space of a row is invariant (breakdown, h = 0,
    which stops that row's growth). For a non-normal J a Ritz value can lie outside the
    spectrum, so an estimate near 1 is checked against ``sweep_stability`` where it decides.
    Cost: m sweeps' worth of products and (K, m, D) memory.
    """
    if krylov_dim < 1:
        raise ValueError(f"krylov_dim must be at least 1, not {krylov_dim}")
    phi = sweep_map(machine, damping, batched=True)
    z = flatten_state(state)
    K, D = z.shape
    if _forward_mode(machine):

        def product(v):
            return torch.func.jvp(phi, (z,), (v,))[1]

    else:  # reverse mode, twice (the moments run out of place only under autograd)

        def product(v):
            return torch.autograd.functional.jvp(phi, z, v)[1]

    m = min(krylov_dim, D)
    v = torch.randn(z.shape, dtype=z.dtype, device=z.device, generator=generator)
    basis = [v / v.norm(dim=1, keepdim=True)]
    H = torch.zeros(K, m, m, dtype=z.dtype, device=z.device)
    for j in range(m):
        w = product(basis[j])
        produced = w.norm(dim=1)
        V = torch.stack(basis, dim=1)  # (K, j + 1, D)
        for _ in range(2):  # twice is enough (Giraud et al. 2005)
            coefficients = torch.einsum("kjd,kd->kj", V, w)
            w = w - torch.einsum("kjd,kj->kd", V, coefficients)
            H[:, : j + 1, j] += coefficients
        if j + 1 == m:
            break
        norm = w.norm(dim=1)
        H[:, j + 1, j] = norm
        # what is left of J v after removing the Krylov space is rounding: the space is invariant
        broken = norm <= _BREAKDOWN * produced
        H[broken, j + 1, j] = 0.0
        basis.append(torch.where(broken[:, None], 0.0, w / norm.clamp_min(1e-300)[:, None]))
    return _leading(torch.linalg.eigvals(H))
