"""Anderson acceleration of the TAP equations on a reduced field map: ``solve(..., solver=
"anderson")``.

The TAP equations of a layered machine (eqs. 33-35) couple each layer only to its neighbours,
and a unit's own mean enters its field only through the Onsager reaction term A_l a_l
(eq. 34). Given its neighbours' moments, each layer's equations are therefore one scalar
equation per unit,

    B = A a + h,   a = f_a(B, A)      (A = -sum (W * W) c <= 0, h = sum W a of the neighbours),

i.e. psi(B) = B - A f_a(B, A) - h = 0 with psi'(B) = 1 - A f_c(B, A) >= 1 (f_c = d f_a / dB is
the variance): exactly one root, bracketed by h + A [upper, lower] of the prior's support, found
by a bracketed Newton iteration (``solve_layer``). Solving the even layers from the odd ones and
then the odd layers from the even ones maps the fields z = (A_l, B_l) of the odd layers to new
ones: G(z). Its fixed points are the TAP solutions, the Onsager self-feedback that makes
Alg. 1 crawl or cycle is solved exactly inside G, and z is small (2 N_1 numbers per row for an
RBM instead of 2 (N_0 + N_1)). ``anderson`` accelerates the iteration of G by Anderson mixing
with a safeguard, after a few of Alg. 1's damped sweeps (docs/tap_solver.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.tap.damped import mean_bounds, neighbour_fields
from tapmachine.core.tap.damped import sweep as damped_sweep
from tapmachine.core.tap.settings import COMPACT_EVERY

__all__ = ["anderson", "solve_layer"]

#: Rows per block: the history holds 2 x memory copies of each row's fields.
_BLOCK_ELEMENTS = 2**24
#: Tikhonov regularisation of the least-squares problem, relative to the trace of its Gram
#: matrix over the memory (scale free: the fields grow with the weights).
_REG = {torch.float32: 1e-6, torch.float64: 1e-10}
#: Safeguard: a row whose residual has not halved (``_DROP``) for ``_PATIENCE`` sweeps stalls
#: (Anderson mixing, a root finder, can settle near a minimum of the residual that is no root
#: instead of following the dynamics to the attractor) and takes plain steps z <- G(z) until
#: its residual is ``_RESUME`` times the stalled one; then it mixes again with a fresh history.
_DROP = 0.5
_PATIENCE = 4
_RESUME = 1e-2
#: Bracketed Newton of ``solve_layer``: at most this many steps, stopping when every |psi| is
#: below ``_NEWTON_TOL`` (relative to 1 + |B|).
_NEWTON_STEPS = 60
_NEWTON_TOL = {torch.float32: 2e-7, torch.float64: 1e-13}
#: Inexact inner solves: a row's Newton iteration also stops once every |psi| is below this
#: factor times the root-mean-square change of the row's means in its last sweep (far from
#: the fixed point the layers need not be solved to rounding error).
_INNER = 0.1
#: Alg. 1's damped sweeps before the mixing starts: the basin a data start falls into under
#: Alg. 1 is chosen in its first sweeps (on bmnist_h25 at epoch 10, 78% / 89% / 92% of rows
#: reached Alg. 1's fixed point after 0 / 8 / 15 of them).
_WARMUP = 10


def _tilted(B, A, ext):
    if ext is None:
        return B, A
    ext_A, ext_B = ext
    return (B if ext_B is None else B + ext_B), (A if ext_A is None else A + ext_A)


def solve_layer(prior, A: Tensor, h: Tensor, B0: Tensor, ext=None, slack=None):
    """The root B of psi(B) = B - A f_a(B, A) - h for each unit (A <= 0), with its moments.

    Units whose |psi| at ``B0`` is already within tol (1 + |B|) (``_NEWTON_TOL``; plus the
    row's ``slack``) keep B0. The others are gathered into one flat batch (with their prior's
    parameters) and take Newton steps B <- B - psi / (1 - A f_c), kept inside the bracket
    [h + A upper, h + A lower] (narrowed by the sign of psi; a step that leaves it, or after
    which |psi| did not halve, bisects: Newton can cycle on a sigmoid's steep flank when |A|
    is large), each unit leaving the batch once converged. ``ext`` = (A_ext, B_ext) is a
    single-site tilt added to the fields the moments read, not to the Onsager term. Returns
    (B, a, c).
    """
    tol = _NEWTON_TOL.get(B0.dtype, 1e-13)
    a, c = prior.moments(*_tilted(B0, A, ext))
    psi = B0 - torch.addcmul(h, A, a)
    bound = (1.0 + B0.abs()).mul_(tol)
    if slack is not None:
        bound += slack
    todo = torch.nonzero((psi.abs() > bound).view(-1), as_tuple=True)[0]
    if todo.numel() == 0:
        return B0, a, c
    n = B0.shape[-1]
    cols = todo % n
    sub = prior.replace(**{k: v[cols] for k, v in prior.params().items()})

    def take(x):
        return None if x is None else x.expand_as(B0).reshape(-1)[todo]

    Af, hf, Bf = take(A), take(h), take(B0)
    ext_f = None if ext is None else [take(x) for x in ext]
    slack_f = None if slack is None else take(slack)
    lo_x, hi_x = mean_bounds(prior)
    lo = torch.add(hf, Af, alpha=hi_x)
    hi = torch.add(hf, Af, alpha=lo_x)
    Bf = torch.minimum(torch.maximum(Bf, lo), hi)
    af, cf = sub.moments(*_tilted(Bf, Af, ext_f))
    B, a, c = B0.clone(), a.clone(), c.clone()
    where = todo  # flat positions of the units still iterating
    last = torch.full_like(Bf, torch.inf)  # |psi| at the previous step
    for _ in range(_NEWTON_STEPS):
        psi = Bf - torch.addcmul(hf, Af, af)
        size = psi.abs()
        bound = (1.0 + Bf.abs()).mul_(tol)
        if slack_f is not None:
            bound += slack_f
        left = size > bound
        if not bool(left.any()):
            break
        if not bool(left.all()):
            solved = torch.nonzero(~left, as_tuple=True)[0]
            for full, part in ((B, Bf), (a, af), (c, cf)):  # written back once, when solved
                full.view(-1)[where[solved]] = part[solved]
            keep = torch.nonzero(left, as_tuple=True)[0]
            where = where[keep]
            kept = (Bf, psi, size, cf, Af, hf, lo, hi, last, cols)
            Bf, psi, size, cf, Af, hf, lo, hi, last, cols = (x[keep] for x in kept)
            if slack_f is not None:
                slack_f = slack_f[keep]
            if ext_f is not None:
                ext_f = [None if x is None else x[keep] for x in ext_f]
            sub = prior.replace(**{k: v[cols] for k, v in prior.params().items()})
        above = psi > 0
        hi = torch.where(above, Bf, hi)
        lo = torch.where(above, lo, Bf)
        Bf = Bf - psi / (1.0 - Af * cf)
        bisect = (Bf < lo) | (Bf > hi) | (size > 0.5 * last)
        Bf = torch.where(bisect, 0.5 * (lo + hi), Bf)
        last = size
        af, cf = sub.moments(*_tilted(Bf, Af, ext_f))
    for full, part in ((B, Bf), (a, af), (c, cf)):
        full.view(-1)[where] = part
    return B, a, c


def _layers(order):
    """(first, state): the iterated layers of even index, solved first from the odd ones, and
    those of odd index, whose fields are the iterated variable z."""
    first = [l for l in order if l % 2 == 0]
    state = [l for l in order if l % 2 == 1]
    if not state:  # a lone iterated layer (never the case for the machines here)
        first, state = [], first
    return first, state


def _map(z, a, c, A, B, first, state, widths, maps, tilt, slack) -> tuple[Tensor, Tensor]:
    """G(z): the moments of the ``state`` layers from their fields z, then every ``first``
    layer and every ``state`` layer solved from its neighbours (``solve_layer``, warm-started
    at the Alg. 1 update B = A a + h from the layer's previous mean). a, c, A, B are updated in
    place on the lists. Returns the new fields of the ``state`` layers, packed like z, and each
    row's squared change of the means: ||f(G(z)) - f(z)||^2 over the ``state`` layers plus the
    change of the ``first`` layers since the previous sweep."""
    _, weights, neg_squares, priors = maps
    parts = torch.split(z, widths * 2, dim=1)
    n = len(state)
    for i, l in enumerate(state):
        a[l], c[l] = priors[l].moments(parts[n + i], parts[i])
    a_in = [a[l] for l in first + state]
    for l in first + state:
        A_l, h = neighbour_fields(l, a, c, weights, neg_squares)
        ext = tilt if l == 0 else None
        B[l], a[l], c[l] = solve_layer(priors[l], A_l, h, torch.addcmul(h, A_l, a[l]), ext, slack)
        A[l] = A_l
    g = torch.cat([A[l] for l in state] + [B[l] for l in state], dim=1)
    changes = (a[l] - x for l, x in zip(first + state, a_in, strict=True))
    return g, sum(torch.linalg.vector_norm(d, dim=1).square() for d in changes)


def anderson(work, tilt, maps, tol, max_iter, memory, stop_scale, warm):
    """``_anderson_block`` over blocks of rows (rows do not interact), concatenated."""
    a = work[0]
    order = maps[0]
    K = a[order[0]].shape[0]
    n_z = 2 * sum(a[l].shape[1] for l in _layers(order)[1])
    block = max(1, _BLOCK_ELEMENTS // (2 * max(memory, 1) * n_z))
    parts = []
    for start in range(0, K, block):
        rows = slice(start, start + block)
        piece = [[x[rows] for x in part] for part in work]
        piece_tilt = None if tilt is None else [None if x is None else x[rows] for x in tilt]
        parts.append(
            _anderson_block(piece, piece_tilt, maps, tol, max_iter, memory, stop_scale, warm)
        )
    if len(parts) == 1:
        return parts[0]
    out = [[torch.cat(xs) for xs in zip(*(p[0][i] for p in parts), strict=True)] for i in range(4)]
    return (out, *(torch.cat([p[i] for p in parts]) for i in (1, 2, 3)))


def _anderson_block(work, tilt, maps, tol, max_iter, memory, stop_scale, warm):
    """Anderson mixing (type II, memory m) of the reduced field map G, per row, batched.

    The first ``_WARMUP`` iterations are Alg. 1's damped sweeps (``warm``: the first sweep's
    damping of a and c per layer, then ``damping``); z_0 is then the ``state`` layers solved
    from those means, so the first mixed iteration is one and a half sweeps. Then, with
    r = G(z) - z and the last m differences dZ, dR of iterates and residuals (ring buffers of
    dG = dZ + dR and dR per row, with the Gram matrix of dR updated by its new column), each
    row steps to

        z <- z + r - (dZ + dR) gamma,   gamma = argmin ||r - dR gamma||^2 + lam ||gamma||^2,

    (mixing parameter 1: G has no self-feedback left to damp), lam = ``_REG`` times the trace
    of dR^T dR over m, the m x m systems solved for all rows at once. Safeguard, judged by the
    residuals the sweeps produce: see ``_PATIENCE`` (a stalled row takes plain steps of G).

    A row stops after the sweep whose mean squared change of the means (``_map``; over all
    iterated units, as Alg. 1's), times ``stop_scale``, is below ``tol``; it returns that
    sweep's moments and fields (the visible tilt included in A_0, B_0). Returns (out,
    iterations, converged, stalls) with out = [a, c, A, B] and stalls each row's switches to
    plain steps.
    """
    a, c, A, B = (list(x) for x in work)
    order, weights, neg_squares, priors = maps
    first, state = _layers(order)
    ref = a[order[0]]
    K, dtype, device = ref.shape[0], ref.dtype, ref.device
    widths = [a[l].shape[1] for l in state]
    n_iterated = sum(a[l].shape[1] for l in order)
    m = max(memory, 1)
    reg = _REG.get(dtype, 1e-10)
    out = [[torch.empty_like(x) for x in part] for part in (a, c, A, B)]
    iterations = torch.full((K,), max_iter, dtype=torch.long, device=device)
    converged = torch.zeros(K, dtype=torch.bool, device=device)
    stalls = torch.zeros(K, dtype=torch.long, device=device)
    active = torch.arange(K, device=device)

    def finish(rows, t, done):
        target = active[rows]
        for outs, ins in zip(out, (a, c, A, B), strict=True):
            for o, x in zip(outs, ins, strict=True):
                o[target] = x[rows]
        if tilt is not None:
            for o, ext in zip(out[2:], tilt, strict=True):
                if ext is not None:
                    o[0][target] += ext[rows]
        converged[target] = done[rows]
        iterations[target[done[rows]]] = t

    slack = torch.full((K, 1), _INNER, dtype=dtype, device=device)
    warmup = min(_WARMUP, max_iter - 1)
    for t in range(warmup):
        keep_a, keep_c = warm[:2] if t == 0 else ([warm[2]] * len(a), [warm[2]] * len(a))
        damped_sweep(a, c, A, B, order, weights, neg_squares, priors, tilt, keep_a, keep_c)
    z = _solve_state(a, c, A, B, state, weights, neg_squares, priors)
    # ring buffers of the differences of G(z) and of r, and the Gram matrix of dR kept current
    dG = torch.zeros(K, m, z.shape[1], dtype=dtype, device=device)
    dR = torch.zeros_like(dG)
    gram = torch.zeros(K, m, m, dtype=torch.float64, device=device)
    g_prev = r_prev = None
    best = torch.full((K,), torch.inf, dtype=dtype, device=device)
    since = torch.zeros(K, dtype=torch.long, device=device)  # sweeps since the last halving
    plain = torch.zeros(K, dtype=torch.bool, device=device)  # stalled rows
    stalled_at = torch.zeros(K, dtype=dtype, device=device)
    pending = torch.ones(K, dtype=torch.bool, device=device)  # working rows not yet finished
    for t in range(warmup + 1, max_iter + 1):
        g, step = _map(z, a, c, A, B, first, state, widths, maps, tilt, slack)
        step.div_(n_iterated)
        done = (step * stop_scale < tol) & pending
        if t == max_iter:
            finish(torch.nonzero(pending, as_tuple=True)[0], t, done)
            break
        slack = step.sqrt().mul_(_INNER).unsqueeze(1)
        r = g - z
        if g_prev is not None:
            slot = t % m
            torch.sub(g, g_prev, out=dG[:, slot])
            new = torch.sub(r, r_prev, out=dR[:, slot])
            prods = torch.bmm(dR, torch.stack([new, r], dim=2)).double()
            gram[:, slot, :] = prods[:, :, 0]
            gram[:, :, slot] = prods[:, :, 0]
            rhs = prods[:, :, 1:]
        else:
            rhs = torch.zeros(K, m, 1, dtype=torch.float64, device=device)
        # the safeguard
        halved = step < _DROP * best
        best = torch.where(halved, step, best)
        since = torch.where(halved, 0, since + 1)
        stall = (since > _PATIENCE) & ~plain
        if bool(stall.any()):
            stalls[active[stall]] += 1
            plain |= stall
            stalled_at = torch.where(stall, step, stalled_at)
        resume = plain & (step < _RESUME * stalled_at)
        if bool(resume.any()):
            plain &= ~resume
            since = torch.where(resume, 0, since)
            best = torch.where(resume, step, best)
            for x in (dG, dR, gram, rhs):
                x[resume] = 0.0
        system = gram.clone()
        diag = system.diagonal(dim1=1, dim2=2)
        diag.add_((diag.sum(1) * (reg / m) + 1e-300).unsqueeze(1))
        gamma = torch.linalg.solve(system, rhs)
        gamma = torch.nan_to_num_(gamma, nan=0.0, posinf=0.0, neginf=0.0)
        gamma_t = gamma.mT.mul_((~plain).double()[:, None, None]).to(dtype)
        # z + r - (dZ + dR) gamma = G(z) - dG gamma
        z_next = g.sub_(torch.bmm(gamma_t, dG).squeeze(1))
        g_prev, r_prev = r + z, r
        if bool(done.any()):
            finish(torch.nonzero(done, as_tuple=True)[0], t, done)
            pending &= ~done
            if not bool(pending.any()):
                break
        n_left = int(pending.sum())
        if COMPACT_EVERY * (pending.numel() - n_left) >= pending.numel():
            left = torch.nonzero(pending, as_tuple=True)[0]
            pending, active = pending[left], active[left]
            a, c, A, B = ([x[left] for x in part] for part in (a, c, A, B))
            kept = (z_next, dG, dR, gram, slack, g_prev, r_prev, best, since, plain, stalled_at)
            z_next, dG, dR, gram, slack, g_prev, r_prev, best, since, plain, stalled_at = (
                x[left] for x in kept
            )
            if tilt is not None:
                tilt = [None if x is None else x[left] for x in tilt]
        z = z_next
    return out, iterations, converged, stalls


def _solve_state(a, c, A, B, state, weights, neg_squares, priors) -> Tensor:
    """z_0: the ``state`` layers solved from the given means of their neighbours."""
    for l in state:
        A_l, h = neighbour_fields(l, a, c, weights, neg_squares)
        B[l], a[l], c[l] = solve_layer(priors[l], A_l, h, torch.addcmul(h, A_l, a[l]))
        A[l] = A_l
    return torch.cat([A[l] for l in state] + [B[l] for l in state], dim=1)
