"""Anderson mixing on the damped sweep of Alg. 1: ``solve(..., solver="anderson")``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap.damped import sweep as damped_sweep

__all__ = ["anderson"]

#: Rows per block of the Anderson solver: its history holds 2 x memory copies of each row.
_ANDERSON_ELEMENTS = 2**24
#: Anderson: Tikhonov regularisation of the mixing's normal equations, relative to their trace.
_ANDERSON_REG = {torch.float32: 1e-6, torch.float64: 1e-10}
#: Anderson safeguard: a mixed iterate is rejected when its residual norm exceeds this factor
#: times the last accepted iterate's.
_ANDERSON_GROWTH = 1.0
#: Anderson: the mixing's correction dG gamma is scaled down to at most this factor times the
#: residual norm ||r|| (a trust region). On trained binary-MNIST RBMs (bmnist_h25, epochs 10 and
#: 30) a factor of 2-10 left a third to a half of the rows wandering at damped steps of 1e-6 to
#: 1e-4 without converging, also from starts within 1e-6 of convergence: the hidden units'
#: Onsager self-feedback (|A| up to tens) makes the sweep linear only very close to its fixed
#: points. 0.5 converged as many rows as Alg. 1 or more (and every row of ``tests/conftest.py``'s
#: RBM on which Alg. 1 cycles).
_ANDERSON_STEP = 0.5


def _support(prior) -> tuple[float, float]:
    """The interval that holds the means a of units with ``prior`` (their prior's support)."""
    if isinstance(prior, Bernoulli):
        return 0.0, 1.0
    if isinstance(prior, Spin):
        return -1.0, 1.0
    return float(getattr(prior, "lower", -math.inf)), float(getattr(prior, "upper", math.inf))


def _bounds(priors, order, widths, dtype, device) -> tuple[Tensor, Tensor]:
    """Lower and upper bounds of the packed state (a of each layer in ``order``, then c): a in
    its prior's support, 0 <= c <= (upper - lower)^2 / 4 (the largest variance on it)."""
    lows, highs = [], []
    for part in ("a", "c"):
        for l, n in zip(order, widths, strict=True):
            lo, hi = _support(priors[l])
            if part == "c":
                lo, hi = 0.0, (hi - lo) ** 2 / 4.0
            lows.append(torch.full((n,), lo, dtype=dtype, device=device))
            highs.append(torch.full((n,), hi, dtype=dtype, device=device))
    return torch.cat(lows), torch.cat(highs)


def _pack(a, c, order) -> Tensor:
    """The iterated state of each row as one vector: a of the layers in ``order``, then c."""
    return torch.cat([a[l] for l in order] + [c[l] for l in order], dim=1)


def _unpack(z, a, c, order, widths) -> None:
    """Set a, c of the layers in ``order`` to the column blocks of ``z`` (views)."""
    parts = torch.split(z, list(widths) * 2, dim=1)
    for i, l in enumerate(order):
        a[l], c[l] = parts[i], parts[len(order) + i]


def anderson(work, tilt, maps, first, damping, tol, max_iter, memory):
    """``_anderson_block`` over blocks of rows (rows do not interact), concatenated."""
    a, c, A, B = work
    order = maps[0]
    K = a[order[0]].shape[0]
    n_z = 2 * sum(a[l].shape[1] for l in order)
    block = max(1, _ANDERSON_ELEMENTS // (max(memory, 1) * n_z))
    parts = []
    for start in range(0, K, block):
        rows = slice(start, start + block)
        piece = [[x[rows] for x in part] for part in work]
        piece_tilt = None if tilt is None else [None if x is None else x[rows] for x in tilt]
        parts.append(
            _anderson_block(piece, piece_tilt, maps, first, damping, tol, max_iter, memory)
        )
    if len(parts) == 1:
        return parts[0]
    out = [[torch.cat(xs) for xs in zip(*(p[0][i] for p in parts), strict=True)] for i in range(4)]
    return (out, *(torch.cat([p[i] for p in parts]) for i in (1, 2, 3)))


def _anderson_block(work, tilt, maps, first, damping, tol, max_iter, memory):
    """Anderson mixing (type II, memory m) on the damped Alg. 1 sweep, per row, batched.

    With z the packed state (a, c of every iterated layer), G(z) one damped sweep of Alg. 1
    (``sweep``) and r = G(z) - z, each row keeps the differences of its last m accepted
    (G(z), r) pairs, dG and dR, and steps to

        z <- G(z) - dG gamma,   gamma = argmin ||r - dR gamma||^2,

    the small (m x m) normal equations regularised by 1e-10 (1e-6 in float32) of their trace
    and solved for all rows at once, the correction dG gamma shortened to at most
    ``_ANDERSON_STEP`` ||r||; then a is clipped into its prior's support and c into
    [0, (upper - lower)^2 / 4]. Safeguard: a row whose mixed iterate has a larger residual
    ||r|| than the last accepted iterate drops its history and goes back to the plain damped
    step from that iterate, G(z_accepted); a plain damped step is always accepted. The first
    sweep is ``solve``'s first (``first``: its damping per layer of a and c), and a row stops,
    as in ``solve``, after the sweep whose mean squared damped step of the means is below
    ``tol``, returning the swept state G(z) with that sweep's fields. Returns (out, iterations,
    converged, fallbacks) with out = [a, c, A, B] and fallbacks the rejections of each row.
    """
    a, c, A, B = (list(x) for x in work)
    order, weights, neg_squares, priors = maps
    n_layers = len(a)
    ref = a[order[0]]
    K, dtype, device = ref.shape[0], ref.dtype, ref.device
    widths = [a[l].shape[1] for l in order]
    n_iterated = sum(widths)
    lower, upper = _bounds(priors, order, widths, dtype, device)
    reg = _ANDERSON_REG.get(dtype, 1e-10)
    growth = _ANDERSON_GROWTH**2  # on squared norms
    out = [[torch.empty_like(x) for x in part] for part in (a, c, A, B)]
    iterations = torch.full((K,), max_iter, dtype=torch.long, device=device)
    converged = torch.zeros(K, dtype=torch.bool, device=device)
    fallbacks = torch.zeros(K, dtype=torch.long, device=device)
    active = torch.arange(K, device=device)
    keep = [damping] * n_layers

    def sweep(keep_a, keep_c):
        return damped_sweep(a, c, A, B, order, weights, neg_squares, priors, tilt, keep_a, keep_c)

    def finish(rows, t, done):
        target = active[rows]
        for outs, ins in zip(out, (a, c, A, B), strict=True):
            for o, x in zip(outs, ins, strict=True):
                o[target] = x[rows]
        converged[target] = done[rows] if done is not None else True
        iterations[target[converged[target]]] = t

    step = sweep(*first)
    done = step / n_iterated < tol
    if max_iter == 1 or bool(done.all()):
        finish(torch.arange(K, device=device), 1, done)
        return out, iterations, converged, fallbacks
    m = max(memory, 1)
    z = None
    dG = dR = g_prev = r_prev = rn_prev = n_hist = None
    pending = torch.ones(K, dtype=torch.bool, device=device)  # working rows not yet finished
    for t in range(1, max_iter + 1):
        if t > 1:
            step = sweep(keep, keep)
            done = (step / n_iterated < tol) & pending
        g = _pack(a, c, order)
        if t == max_iter:
            finish(torch.nonzero(pending, as_tuple=True)[0], t, done)
            break
        if t == 1:
            # The first sweep is Alg. 1's (placeholders undamped): the mixing starts after it.
            z_next = g
            n_z = g.shape[1]
            dG = torch.zeros(g.shape[0], m, n_z, dtype=dtype, device=device)
            dR = torch.zeros_like(dG)
            gram = torch.zeros(g.shape[0], m, m, dtype=torch.float64, device=device)
            n_hist = torch.zeros(g.shape[0], dtype=torch.long, device=device)
        else:
            r = g - z
            rn = r.square().sum(1)
            if t > 2:
                # n_hist > 0: this iterate was mixed (a plain damped step is always accepted)
                accept = (n_hist == 0) | (rn <= growth * rn_prev) | done
                slot = (t - 3) % m
                dG[:, slot] = g - g_prev  # rejected rows' history is cleared just below
                new = torch.sub(r, r_prev)
                dR[:, slot] = new
                # the Gram matrix of dR kept up to date: only the new column's products
                prods = torch.bmm(dR, torch.stack([new, r], dim=2)).double()
                gram[:, slot, :] = prods[:, :, 0]
                gram[:, :, slot] = prods[:, :, 0]
                rhs = prods[:, :, 1:]
                n_hist = torch.where(accept, (n_hist + 1).clamp_(max=m), 0)
                rejected = torch.nonzero(~accept, as_tuple=True)[0]
                if rejected.numel():
                    fallbacks[active[rejected]] += 1
                    dG[rejected] = 0.0
                    dR[rejected] = 0.0
                    gram[rejected] = 0.0
                    rhs[rejected] = 0.0
            else:
                rhs = torch.zeros(g.shape[0], m, 1, dtype=torch.float64, device=device)
            system = gram.clone()
            scale = system.diagonal(dim1=1, dim2=2).sum(1) * (reg / m) + 1e-300
            system.diagonal(dim1=1, dim2=2).add_(scale.unsqueeze(1))
            gamma = torch.linalg.solve(system, rhs)
            gamma = torch.where(torch.isfinite(gamma).all(1, keepdim=True), gamma, 0.0)
            corr = torch.bmm(gamma.transpose(1, 2).to(dtype), dG).squeeze(1)
            limit = rn.sqrt() * _ANDERSON_STEP
            size = torch.linalg.vector_norm(corr, dim=1)
            shrink = torch.where(size > limit, limit / size.clamp_min(1e-300), 1.0)
            z_next = torch.addcmul(g, corr, shrink.unsqueeze(1), value=-1.0)
            if t > 2 and rejected.numel():
                z_next[rejected] = g_prev[rejected]
            z_next = torch.clamp(z_next, lower, upper)
            if t == 2 or not rejected.numel():
                g_prev, r_prev, rn_prev = g, r, rn
            else:
                g_prev = torch.where(accept[:, None], g, g_prev)
                r_prev = torch.where(accept[:, None], r, r_prev)
                rn_prev = torch.where(accept, rn, rn_prev)
        if bool(done.any()):
            finish(torch.nonzero(done, as_tuple=True)[0], t, done)
            pending &= ~done
            n_left = int(pending.sum())
            if n_left == 0:
                break
        # Finished rows keep iterating (their results are stored) until they are a sixteenth
        # of the working set: compacting the history at every convergence costs more.
        if 16 * (pending.numel() - int(pending.sum())) >= pending.numel():
            left = pending
            pending = pending[left]
            active = active[left]
            A, B = [x[left] for x in A], [x[left] for x in B]
            a, c = [x[left] for x in a], [x[left] for x in c]
            z_next, dG, dR, n_hist = z_next[left], dG[left], dR[left], n_hist[left]
            gram = gram[left]
            if g_prev is not None:
                g_prev, r_prev, rn_prev = g_prev[left], r_prev[left], rn_prev[left]
            if tilt is not None:
                tilt = [None if x is None else x[left] for x in tilt]
        z = z_next
        _unpack(z, a, c, order, widths)
    return out, iterations, converged, fallbacks
