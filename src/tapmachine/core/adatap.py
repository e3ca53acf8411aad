"""Adaptive TAP (adaTAP, Opper & Winther 2001) by VAMP: first paper, App. D, Alg. 3.

A layered binary machine (``tapmachine.core.machine``) is written on its joint coupling matrix J,
symmetric with the blocks W_l and W_l^T of eq. (125) (for an RBM J = [[0, W], [W^T, 0]]), and
its unit priors P_i (Bernoulli {0, 1} or Spin {-1, +1}, fields U included). VAMP splits the
model into a prior node (the product of the P_i) and a Gaussian node (exp(x^T J x / 2)) and
iterates, for every row (initialisation) k independently,

    prior node:        a_1 = f_a(B_1, A_1),  c_1 = f_c(B_1, A_1)            (Alg. 3, lines 1-2)
                       A_2 = 1 / c_1 - A_1,  B_2 = a_1 / c_1 - B_1           (lines 3-4)
    Gaussian node:     C_2 = (diag(A_2) - J)^{-1},  a_2 = C_2 (B_2 + H)      (lines 5-6)
                       A_1 = 1 / diag(C_2) - A_2,  B_1 = a_2 / diag(C_2) - B_2   (lines 7-8)

with f_a, f_c the prior's moments of Q(x) ~ P(x) exp(-A x^2 / 2 + B x) (``Prior.moments``).
For Bernoulli units f_a = sigm(U + B - A / 2) and c = a (1 - a), so a_1 / c_1 = 1 / (1 - a_1):
Alg. 3's line 4 is this formula. Alg. 3 puts the fields in H and uses a flat prior; here they
stay in the prior (H = 0), which is the same algorithm with B_1 shifted by H (the fixed points
coincide), and makes B_1, A_1 exactly TAP's fields B, A (``tapmachine.core.tap``). At a fixed point
a_1 = a_2, c_1 = diag(C_2), and (a_1, c_1, B_1, A_1) take the place of TAP's (a, c, B, A) in the
free energy and gradients (App. D: "these quantities are then incorporated to our training
algorithm Alg. 2"). Expanding C_2 to second order in J gives A_1 = -sum_j J_ij^2 c_j, TAP's
eq. (33): adaTAP and TAP agree at weak coupling.

The cost is the inverse in each iteration. diag(A_2) differs between rows, so C_2 is one N x N
inverse per row and no factorisation is shared between rows; what is batched is the K
factorisations of an iteration, done in one ``torch.linalg`` call on a (K, n, n) stack. For
a bipartite machine (an RBM) the Schur complement onto the smaller layer (size n) gives the
same C_2 exactly (``_gaussian_bipartite``): with the larger layer e eliminated,

    S = diag(A_2k) - W_ke D_e^{-1} W_ek,     diag C_kk = diag S^{-1},
    diag C_ee = 1 / A_2e + rowsum((D_e^{-1} W_ek) * (D_e^{-1} W_ek S^{-1})),

which costs O(K N_e n^2) instead of O(K N^3). Deeper machines use the joint N x N matrix
(``_gaussian_joint``), the literal Alg. 3.

Both invert a symmetric matrix (``_symmetric_inverse``): by Cholesky where it is positive
definite, as it is when the Gaussian node is a proper Gaussian, and by LU for the rows where it
is not (VAMP's A_2 can leave it indefinite mid-iteration). The Cholesky inverse is the same
matrix at about half the LU inverse's operations (n^3 against 2 n^3): for the (100, 500, 500)
stack of Fig. 10's RBM, 0.41 s of CPU on one thread against 1.02 s.

Damping (App. D: 0.5 in Fig. 10) mixes the new Gaussian-node messages (A_1, B_1) with the old.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.errors import TapmachineError
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap import SolverSettings, TAPState

__all__ = ["AdaTAPError", "SUPPORTED_PRIORS", "check_machine", "joint_couplings", "solve"]

#: Priors Alg. 3 is written for (binary units).
SUPPORTED_PRIORS = (Bernoulli, Spin)


class AdaTAPError(TapmachineError, ValueError):
    """adaTAP cannot run on this machine (a prior it does not implement)."""


def check_machine(machine: BoltzmannMachine) -> None:
    """Raise ``AdaTAPError`` unless every layer is Bernoulli or Spin (Alg. 3 is binary)."""
    for l, prior in enumerate(machine.priors):
        if not isinstance(prior, SUPPORTED_PRIORS):
            raise AdaTAPError(
                f"adaTAP (Alg. 3) is implemented for Bernoulli and Spin units; layer {l} has a "
                f"{type(prior).__name__} prior"
            )


def joint_couplings(machine: BoltzmannMachine) -> Tensor:
    """The symmetric (N, N) joint coupling matrix J of eq. (125), N = sum_l N_l."""
    sizes = machine.sizes
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    J = torch.zeros(offsets[-1], offsets[-1], dtype=machine.dtype, device=machine.device)
    for l, W in enumerate(machine.weights):
        r, s = slice(offsets[l], offsets[l + 1]), slice(offsets[l + 1], offsets[l + 2])
        J[r, s] = W
        J[s, r] = W.T
    return J


def _symmetric_inverse(M: Tensor) -> Tensor:
    """The inverse of each symmetric matrix of the (K, n, n) stack ``M``.

    Cholesky (``cholesky_ex``, then ``cholesky_inverse``) on every matrix; the matrices whose
    factorisation fails (not positive definite) are inverted by LU instead.
    """
    L, info = torch.linalg.cholesky_ex(M)
    inverse = torch.cholesky_inverse(L)
    indefinite = info != 0
    if bool(indefinite.any()):
        inverse[indefinite] = torch.linalg.inv(M[indefinite])
    return inverse


def _gaussian_joint(J: Tensor, A2: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """diag(C_2) and C_2 b for C_2 = (diag(A_2) - J)^{-1}, one row per batch row.

    One batched inverse of the (K, N, N) stack (each row has its own diagonal).
    """
    M = (-J).expand(A2.shape[0], -1, -1).clone()
    M.diagonal(dim1=-2, dim2=-1).add_(A2)
    C = _symmetric_inverse(M)
    return torch.diagonal(C, dim1=-2, dim2=-1), (C @ b.unsqueeze(-1)).squeeze(-1)


def _gaussian_bipartite(W: Tensor, A2v: Tensor, A2h: Tensor, bv: Tensor, bh: Tensor):
    """diag(C_2) and C_2 b of an RBM's Gaussian node by the Schur complement (exact).

    The larger layer (visible if Nv >= Nh) is eliminated: with D_e = diag(A_2e) and W_ek the
    couplings to the kept layer, S = D_k - W_ek^T D_e^{-1} W_ek (K stacked n x n matrices, one
    batched inverse). The means solve S x_k = b_k + W_ek^T D_e^{-1} b_e, x_e = D_e^{-1}(b_e +
    W_ek x_k). Returns (diag_v, diag_h, mean_v, mean_h).
    """
    swap = W.shape[0] < W.shape[1]
    if swap:  # keep the visible layer (the smaller one) instead
        W, A2v, A2h, bv, bh = W.T, A2h, A2v, bh, bv
    V = W.unsqueeze(0) / A2v.unsqueeze(-1)  # D_e^{-1} W, (K, Ne, n)
    S = torch.matmul(W.T, V).neg_()  # (K, n, n)
    S.diagonal(dim1=-2, dim2=-1).add_(A2h)
    S_inv = _symmetric_inverse(S)
    VS = torch.matmul(V, S_inv)  # (K, Ne, n)
    diag_e = 1.0 / A2v + torch.einsum("ken,ken->ke", V, VS)
    diag_k = torch.diagonal(S_inv, dim1=-2, dim2=-1)
    rhs = bh + torch.matmul(V.transpose(1, 2), bv.unsqueeze(-1)).squeeze(-1)
    x_k = torch.matmul(S_inv, rhs.unsqueeze(-1)).squeeze(-1)
    x_e = bv / A2v + torch.matmul(V, x_k.unsqueeze(-1)).squeeze(-1)
    if swap:
        return diag_k, diag_e, x_k, x_e
    return diag_e, diag_k, x_e, x_k


def _split(t: Tensor, sizes) -> list[Tensor]:
    return list(torch.split(t, list(sizes), dim=1))


def solve(
    machine: BoltzmannMachine,
    a_visible: Tensor,
    damping: float = SolverSettings.damping,
    tol: float = SolverSettings.tol,
    max_iter: int = SolverSettings.max_iter,
    A1: Tensor | None = None,
    B1: Tensor | None = None,
    method: str = "auto",
) -> TAPState:
    """Iterate Alg. 3 (VAMP adaTAP) from K initialisations at once; a ``TAPState``.

    Parameters
    ----------
    machine : BoltzmannMachine with Bernoulli or Spin layers
    a_visible : Tensor (K, N_0)
        Data initialisations (eq. 37). Unless ``A1``/``B1`` are given, the iteration starts
        from the naive mean-field fields of the configuration m = (a_visible, f_a(W_0^T
        a_visible, 0), ...) (each hidden layer the conditional mean given the layer below):
        A_1 = 0 and B_1 = J m, so the first prior update is one naive mean-field sweep from the
        data point.
    damping : float in [0, 1)
        A_1, B_1 <- damping * old + (1 - damping) * new after each Gaussian-node update
        (the first update is undamped).
    tol, max_iter
        A row converges when the mean squared change of a_1 over all units falls below ``tol``;
        it is then frozen (no longer iterated). At most ``max_iter`` iterations.
    A1, B1 : Tensor (K, N), optional
        Explicit initial messages of the prior node (all layers side by side).
    method : "auto", "joint" or "bipartite"
        How C_2 is computed: the joint N x N inverse, or (RBMs only) the exact Schur complement
        onto the smaller layer; "auto" picks the Schur complement for RBMs.

    Returns
    -------
    TAPState
        a = a_1, c = c_1, A = A_1, B = B_1 per layer (the prior-node quantities, which satisfy
        a = f_a(B, A) as in TAP), per-row iteration counts and the converged mask.
    """
    check_machine(machine)
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    if method not in ("auto", "joint", "bipartite"):
        raise ValueError(f"method must be auto, joint or bipartite, got {method!r}")
    bipartite = machine.n_layers == 2 and method != "joint"
    if method == "bipartite" and machine.n_layers != 2:
        raise ValueError("method='bipartite' needs an RBM (two layers)")
    dtype, device, sizes = machine.dtype, machine.device, machine.sizes
    x = torch.as_tensor(a_visible, dtype=dtype, device=device)
    if x.dim() != 2 or x.shape[1] != sizes[0]:
        raise ValueError(f"a_visible must have shape (K, {sizes[0]}), got {tuple(x.shape)}")
    K, N = x.shape[0], sum(sizes)
    priors = machine.priors

    with torch.no_grad():
        J = joint_couplings(machine)
        if B1 is None:
            m = [x]
            for l in range(1, machine.n_layers):
                B = m[-1] @ machine.weights[l - 1]
                m.append(priors[l].moments(B, torch.zeros_like(B))[0])
            B1 = torch.cat(m, dim=1) @ J
        B1 = torch.as_tensor(B1, dtype=dtype, device=device).expand(K, N).clone()
        A1 = (
            torch.zeros(K, N, dtype=dtype, device=device)
            if A1 is None
            else torch.as_tensor(A1, dtype=dtype, device=device).expand(K, N).clone()
        )

        def prior_node(A1, B1):
            Bs, As = _split(B1, sizes), _split(A1, sizes)
            parts = [p.moments(b, a) for p, b, a in zip(priors, Bs, As, strict=True)]
            a1 = torch.cat([p[0] for p in parts], dim=1)
            c1 = torch.cat([p[1] for p in parts], dim=1).clamp_min(torch.finfo(dtype).tiny)
            return a1, c1

        a1, c1 = prior_node(A1, B1)
        out = [a1.clone(), c1.clone(), A1.clone(), B1.clone()]
        iterations = torch.full((K,), max_iter, dtype=torch.long, device=device)
        converged = torch.zeros(K, dtype=torch.bool, device=device)
        active = torch.arange(K, device=device)
        for t in range(1, max_iter + 1):
            A2 = 1.0 / c1 - A1
            B2 = a1 / c1 - B1
            if bipartite:
                n0 = sizes[0]
                dv, dh, mv, mh = _gaussian_bipartite(
                    machine.W, A2[:, :n0], A2[:, n0:], B2[:, :n0], B2[:, n0:]
                )
                diag, a2 = torch.cat([dv, dh], dim=1), torch.cat([mv, mh], dim=1)
            else:
                diag, a2 = _gaussian_joint(J, A2, B2)
            A1_new = 1.0 / diag - A2
            B1_new = a2 / diag - B2
            keep = damping if t > 1 else 0.0
            A1 = torch.lerp(A1_new, A1, keep)
            B1 = torch.lerp(B1_new, B1, keep)
            a_new, c1 = prior_node(A1, B1)
            step = (a_new - a1).square().mean(1)
            a1 = a_new
            done = step < tol
            last = t == max_iter
            if bool(done.any()) or last:
                rows = torch.ones_like(done) if last else done
                target = active[rows]
                for o, v in zip(out, (a1, c1, A1, B1), strict=True):
                    o[target] = v[rows]
                converged[active[done]] = True
                iterations[active[done]] = t
                if last:
                    break
                keep_rows = ~done
                if not bool(keep_rows.any()):
                    break
                active = active[keep_rows]
                a1, c1, A1, B1 = a1[keep_rows], c1[keep_rows], A1[keep_rows], B1[keep_rows]

    a, c, A, B = (_split(o, sizes) for o in out)
    return TAPState(a=a, c=c, A=A, B=B, iterations=iterations, converged=converged)
