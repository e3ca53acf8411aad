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

Alg. 3's lines 7-8 are computed without their subtractions (``_messages``), on the
symmetrically scaled matrix (``_unit_scale``). As written, A_1 = 1 / diag(C_2) - A_2 subtracts
two numbers of the size of A_2 = 1 / c_1 - A_1, which is large where a unit is saturated
(c_1 small). At Fig. 10's RBM (Nh = 500) after 43 epochs of adaTAP-10, with W scaled by 1.2
(sigma_max(W) 4.6 -> 5.5, where its training went), the literal form's messages reach 3e29 in
float32 and 2e273 in float64, and its magnetisations differ from the subtraction-free form's
float64 ones by 1 (units at the opposite saturation); the subtraction-free form agrees with
them to 1.5e-4 in float32. In the literal form, those trainings (float32, on a GPU) stopped at
epochs 42-44, one on a singular matrix, one on non-finite couplings. Trained on from
adaTAP-10's epoch-43 couplings on a CPU (10 iterations, batches of 100, lr 1e-3), the literal
form's couplings were not finite after 16 steps; the subtraction-free form's were after 50
steps, one epoch, past the batch where the GPU run stopped (sigma_max 4.61 -> 5.01, the exact
pseudo-likelihood of 1,000 images -188.74 -> -187.82).

A row whose Gaussian node has no inverse (a singular diag(A_2) - J) or hands back a message
that is not finite keeps its last state and stops, not converged (``TAPState.converged``):
what it hands on is the last iterate at which both nodes were defined. Alg. 3 says nothing of
this case; rows that never meet it iterate as before.

Damping (App. D: 0.5 in Fig. 10) mixes the new Gaussian-node messages (A_1, B_1) with the old.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.errors import TapmachineError
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap import SolverSettings, TAPState

__all__ = [
    "AdaTAPError",
    "NUMERICS_VERSION",
    "SUPPORTED_PRIORS",
    "check_machine",
    "joint_couplings",
    "solve",
]

#: Version of Alg. 3's arithmetic, part of the resume fingerprint of a run with
#: ``inference: adatap`` (``train.resume.fingerprint``): 2 is the subtraction-free Gaussian
#: node, whose numbers differ from the literal form's.
NUMERICS_VERSION = 2

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


def _symmetric_inverse(M: Tensor) -> tuple[Tensor, Tensor]:
    """The inverse of each symmetric matrix of the (K, n, n) stack ``M``, and a (K,) mask of
    the matrices that have one.

    Cholesky (``cholesky_ex``, then ``cholesky_inverse``) on every matrix; the matrices whose
    factorisation fails (not positive definite) are inverted by LU instead (``inv_ex``), and a
    singular one is marked False (its slice of the result is not an inverse).
    """
    L, info = torch.linalg.cholesky_ex(M)
    invertible = torch.ones(M.shape[0], dtype=torch.bool, device=M.device)
    indefinite = info != 0
    if not bool(indefinite.any()):
        return torch.cholesky_inverse(L), invertible
    # a failed factor can hold zeros, which cholesky_inverse refuses
    L = torch.where(
        indefinite[:, None, None], torch.eye(M.shape[-1], dtype=M.dtype, device=M.device), L
    )
    inverse = torch.cholesky_inverse(L)
    lu_inverse, lu_info = torch.linalg.inv_ex(M[indefinite])
    inverse[indefinite] = lu_inverse
    invertible[indefinite] = lu_info == 0
    return inverse, invertible


def _messages(
    A2: Tensor,
    B2: Tensor,
    r: Tensor,
    coupled_mean: Tensor,
    diag_C: Tensor | None = None,
    mean: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Alg. 3's lines 7-8 without their subtractions: A_1 = -A_2 r / (1 + r) and
    B_1 = (J a_2 - B_2 r) / (1 + r), with r = diag(J C_2) and ``coupled_mean`` = J a_2.

    From (diag(A_2) - J) C_2 = I: diag(C_2) = (1 + r) / A_2, and a_2 = C_2 B_2 solves
    A_2 a_2 = B_2 + J a_2, so 1 / diag(C_2) - A_2 and a_2 / diag(C_2) - B_2 are these. Written
    as in Alg. 3, each subtracts two numbers of the size of A_2 = 1 / c_1 - A_1, which agree to
    all but a few digits where a unit is saturated (c_1 small): in float32 a unit with
    c_1 = 1e-26 gets A_1 wrong by about 1e19. Where |A_2| < 1 (given ``diag_C`` = diag(C_2)
    and ``mean`` = a_2) the lines are taken as written: nothing large cancels there, and at
    A_2 = 0 the form above is 0 / 0.
    """
    A1, B1 = -A2 * r / (1.0 + r), (coupled_mean - B2 * r) / (1.0 + r)
    if diag_C is None:
        return A1, B1
    small = A2.abs() < 1.0
    return (
        torch.where(small, 1.0 / diag_C - A2, A1),
        torch.where(small, mean / diag_C - B2, B1),
    )


def _unit_scale(A2: Tensor) -> tuple[Tensor, Tensor]:
    """s = max(|A_2|, 1)^{-1/2} and A_2 s^2: the symmetric scaling that takes diag(A_2) - J to
    diag(A_2 s^2) - s J s, whose diagonal is +-1 where |A_2| >= 1 (a saturated unit's A_2 is
    large), so that the inverse's small entries are computed to their own precision. The
    messages do not depend on the scaling (r = diag(J C_2) = diag(J~ C~) for any s)."""
    s = A2.abs().clamp_min(1.0).rsqrt()
    return s, A2 * s * s


def _gaussian_joint(J: Tensor, A2: Tensor, B2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Alg. 3's Gaussian node (lines 5-8) on the joint matrix: the new A_1, B_1 and the (K,)
    mask of the rows whose matrix diag(A_2) - J has an inverse.

    One batched inverse of the (K, N, N) stack (each row has its own diagonal), scaled
    (``_unit_scale``): with J~ = s J s and C~ = (diag(A_2 s^2) - J~)^{-1}, C_2 = s C~ s,
    r = diag(J C_2) = diag(J~ C~) and J a_2 = s^{-1} J~ C~ (s B_2) (``_messages``).
    """
    s, scaled_A2 = _unit_scale(A2)
    Js = J * s.unsqueeze(-1) * s.unsqueeze(-2)  # (K, N, N)
    M = Js.neg()
    M.diagonal(dim1=-2, dim2=-1).add_(scaled_A2)
    Cs, invertible = _symmetric_inverse(M)
    r = (Js * Cs).sum(-1)  # diag(J~ C~): both symmetric
    a_scaled = torch.matmul(Cs, (s * B2).unsqueeze(-1))  # s^{-1} a_2
    coupled = torch.matmul(Js, a_scaled).squeeze(-1) / s
    # where |A_2| < 1, s = 1: C~ and s^{-1} a_2 are C_2 and a_2 there
    diag_C = torch.diagonal(Cs, dim1=-2, dim2=-1)
    A1, B1 = _messages(A2, B2, r, coupled, diag_C, a_scaled.squeeze(-1))
    return A1, B1, invertible


def _gaussian_bipartite(W: Tensor, A2v: Tensor, A2h: Tensor, B2v: Tensor, B2h: Tensor):
    """An RBM's Gaussian node by the Schur complement (exact): the new A_1 and B_1 of the
    visible and hidden layers, and the (K,) mask of the rows whose Schur complement has an
    inverse.

    The larger layer e (visible if Nv >= Nh) is eliminated onto the kept layer k (which needs
    A_2e != 0). Scaled as in ``_unit_scale`` (s_e, s_k; g = 1 / (A_2 s^2), +-1 where |A_2| >=
    1), W~ = s_e W s_k and S~ = diag(A_2k s_k^2) - P~ with P~ = W~^T diag(g_e) W~ (K stacked
    n x n matrices, one batched inverse T~ = S~^{-1}); then the kept layer has
    r_k = diag(P~ T~) and the eliminated one r_e = g_e diag(W~ T~ W~^T). The means:
    s_k^{-1} x_k = T~ s_k (B_2k + W^T B_2e / A_2e), x_e = (B_2e + W x_k) / A_2e, and J a_2 is
    (W x_k, W^T x_e) (``_messages``).
    """
    swap = W.shape[0] < W.shape[1]
    if swap:  # keep the visible layer (the smaller one) instead
        W, A2v, A2h, B2v, B2h = W.T, A2h, A2v, B2h, B2v
    se, scaled_e = _unit_scale(A2v)
    sk, scaled_k = _unit_scale(A2h)
    g_e = 1.0 / scaled_e
    Ws = (W.unsqueeze(0) * se.unsqueeze(-1)).mul_(sk.unsqueeze(-2))  # W~, (K, Ne, n)
    # g_e is 1 wherever A_2e >= 1, which for binary units (1 / c_1 >= 4) is nearly everywhere
    Wg = Ws if bool((g_e == 1.0).all()) else Ws * g_e.unsqueeze(-1)
    P = torch.matmul(Ws.transpose(1, 2), Wg)  # P~, (K, n, n)
    S = P.neg()
    S.diagonal(dim1=-2, dim2=-1).add_(scaled_k)
    T, invertible = _symmetric_inverse(S)
    r_k = (P * T).sum(-1)  # diag(P~ T~): both symmetric
    WT = torch.matmul(Ws, T)  # (K, Ne, n)
    r_e = g_e * (WT * Ws).sum(-1)
    u = (B2v / A2v) @ W  # W^T A_2e^{-1} B_2e, (K, n)
    x_k = sk * torch.matmul(T, (sk * (B2h + u)).unsqueeze(-1)).squeeze(-1)
    Wx = x_k @ W.T  # W x_k, (K, Ne)
    # the kept layer's J a_2 = W^T x_e = u + P x_k, with P = s_k^{-1} P~ s_k^{-1}
    coupled_k = u + torch.matmul(P, (x_k / sk).unsqueeze(-1)).squeeze(-1) / sk
    A1e, B1e = _messages(A2v, B2v, r_e, Wx)  # the elimination has divided by A_2e already
    diag_T = torch.diagonal(T, dim1=-2, dim2=-1)  # diag(T) where |A_2k| < 1 (s_k = 1)
    A1k, B1k = _messages(A2h, B2h, r_k, coupled_k, diag_T, x_k)
    if swap:
        return A1k, A1e, B1k, B1e, invertible
    return A1e, A1k, B1e, B1k, invertible


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
                A1v, A1h, B1v, B1h, defined = _gaussian_bipartite(
                    machine.W, A2[:, :n0], A2[:, n0:], B2[:, :n0], B2[:, n0:]
                )
                A1_new, B1_new = torch.cat([A1v, A1h], dim=1), torch.cat([B1v, B1h], dim=1)
            else:
                A1_new, B1_new, defined = _gaussian_joint(J, A2, B2)
            defined &= A1_new.isfinite().all(1) & B1_new.isfinite().all(1)
            undefined = ~defined.unsqueeze(1)  # these rows keep their state and stop
            A1_new = torch.where(undefined, A1, A1_new)
            B1_new = torch.where(undefined, B1, B1_new)
            keep = damping if t > 1 else 0.0
            A1 = torch.lerp(A1_new, A1, keep)
            B1 = torch.lerp(B1_new, B1, keep)
            a_new, c1 = prior_node(A1, B1)
            step = (a_new - a1).square().mean(1)
            a1 = a_new
            done = (step < tol) & defined
            stopped = done | ~defined
            last = t == max_iter
            if bool(stopped.any()) or last:
                rows = torch.ones_like(done) if last else stopped
                target = active[rows]
                for o, v in zip(out, (a1, c1, A1, B1), strict=True):
                    o[target] = v[rows]
                converged[active[done]] = True
                iterations[active[stopped]] = t
                if last:
                    break
                keep_rows = ~stopped
                if not bool(keep_rows.any()):
                    break
                active = active[keep_rows]
                a1, c1, A1, B1 = a1[keep_rows], c1[keep_rows], A1[keep_rows], B1[keep_rows]

    a, c, A, B = (_split(o, sizes) for o in out)
    return TAPState(a=a, c=c, A=A, B=B, iterations=iterations, converged=converged)
