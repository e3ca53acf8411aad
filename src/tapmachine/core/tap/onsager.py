"""Validity of the second-order (TAP) expansion: the size of the Onsager term at a solution."""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.tap.state import TAPState

__all__ = ["onsager_strength", "onsager_spectral_radius"]


def onsager_strength(machine: BoltzmannMachine, state: TAPState, per_coupling: bool = False):
    """Size of the Onsager term at each row of ``state``: max_i c_i sum_j W_ij^2 c_j, (K,).

    The TAP free energy (eq. 31; eq. 36 for an RBM) keeps the expansion in the couplings to
    second order, whose term is (1/2) sum_ij W_ij^2 c_i c_j, and the TAP equations give each
    unit the reaction field A_i = -sum_j W_ij^2 c_j (eq. 33; for an RBM A_i^v = -sum_j W_ij^2
    c_j^h and A_j^h = -sum_i W_ij^2 c_i^v, Alg. 1). The matrix S_ij = c_i W_ij^2 c_j (over
    all units of all layers, nonzero between neighbouring layers only) has row sums
    c_i sum_j W_ij^2 c_j = -c_i A_i, and this function returns the largest row sum of each
    row of ``state``:

        max over layers l and units i of c_li (sum_{m neighbour of l} sum_j W_lm,ij^2 c_mj).

    S is similar to the matrix c_i^2 W_ij^2 (conjugated by diag(c)) whose spectral radius
    below 1 is the condition under which the expansion converges and a TAP solution is stable
    against the spin-glass response, Plefka's (1982) beta^2 (1/N) sum_i (1 - m_i^2)^2 <= 1 for
    the SK model (the paper cites it for the convergence condition of the TAP equation); the
    largest row sum bounds that spectral radius from above (a nonnegative matrix). Values well
    below 1: the second-order free energy is in its range of validity; near or above 1 it may
    not be, and fixed points may be spurious.

    The variances are the state's own c (a clamped visible layer has c = 0 and contributes
    nothing). With ``per_coupling`` the result is a list with one (K,) tensor per coupling
    W_l, the largest row sum over the units of layers l and l + 1 of that coupling's term
    alone (for an RBM the single entry equals the total).
    """
    with torch.no_grad():
        squares = [W.detach() * W.detach() for W in machine.weights]
        c = [t.detach() for t in state.c]
        # towards[l]: sum_j W_l,ij^2 c_{l+1,j} for units i of layer l; back[l]: for layer l + 1.
        towards = [torch.mm(c[l + 1], S.T) for l, S in enumerate(squares)]
        back = [torch.mm(c[l], S) for l, S in enumerate(squares)]
        if per_coupling:
            return [
                torch.maximum((c[l] * towards[l]).amax(1), (c[l + 1] * back[l]).amax(1))
                for l in range(len(squares))
            ]
        worst = None
        for l in range(len(c)):
            field = torch.zeros_like(c[l])
            if l < len(squares):
                field += towards[l]
            if l > 0:
                field += back[l - 1]
            row = (c[l] * field).amax(1)
            worst = row if worst is None else torch.maximum(worst, row)
        return worst


def onsager_spectral_radius(
    machine: BoltzmannMachine, state: TAPState, iterations: int = 50
) -> Tensor:
    """Spectral radius of S_ij = c_i W_ij^2 c_j at each row of ``state``, shape (K,).

    The quantity that ``onsager_strength`` bounds from above (its largest row sum): the
    condition under which the expansion converges and a solution is stable is that it stays
    below 1 (Plefka 1982 for the SK model). S couples neighbouring layers only, so it is
    bipartite (odd against even layers) and its eigenvalues come in +- pairs; the power
    iteration runs on S^2, whose largest eigenvalue rho^2 belongs to the Perron vectors of both
    parts, from a positive start, all rows at once, and rho is the square root of the last
    Rayleigh quotient. It converges as (lambda_2 / rho)^(2 t): on trained binary-MNIST RBMs
    (Nh = 25 and 500) 20 iterations agreed with 1,000 to 1e-9, 50 to machine precision. Each
    iteration costs four matrix products per layer pair.
    """
    with torch.no_grad():
        squares = [W.detach() * W.detach() for W in machine.weights]
        c = [t.detach() for t in state.c]

        def apply(x):
            y = [torch.zeros_like(xl) for xl in x]
            for l, S in enumerate(squares):
                y[l] += c[l] * torch.mm(c[l + 1] * x[l + 1], S.T)
                y[l + 1] += c[l + 1] * torch.mm(c[l] * x[l], S)
            return y

        def normalised(y):
            norm = torch.sqrt(sum((t * t).sum(1) for t in y)).clamp_min(1e-300)
            return [t / norm[:, None] for t in y]

        x = normalised([torch.ones_like(t) for t in c])
        for _ in range(iterations):
            x = normalised(apply(apply(x)))
        y = apply(apply(x))
        return sum((a * b).sum(1) for a, b in zip(x, y, strict=True)).clamp_min(0.0).sqrt()
