"""TAP inference (Alg. 1, App. E): solving the TAP equations from K starts, with a damped
second pass for the rows that did not converge, and clamped inference.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.tap.anderson import anderson
from tapmachine.core.tap.damped import newton_sweep, sweep
from tapmachine.core.tap.state import TAPState

__all__ = [
    "SOLVERS",
    "solve",
    "solve_from",
    "retry_tolerance",
    "solve_with_retry",
    "clamped_state",
]


def _as_rows(t: Tensor, K: int, n: int, dtype, device) -> Tensor:
    """A fresh (K, n) tensor in the machine's dtype from a (K, n) or (n,) input."""
    t = torch.as_tensor(t, dtype=dtype, device=device)
    return t.expand(K, n).clone()


def solve(
    machine: BoltzmannMachine,
    a_visible: Tensor | None = None,
    c_visible: Tensor | None = None,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    clamp: Tensor | bool | None = None,
    a_hidden: Sequence[Tensor] | None = None,
    c_hidden: Sequence[Tensor] | None = None,
    visible_tilt: tuple[Tensor, Tensor] | None = None,
    solver: str = "damped",
    memory: int = 5,
    stats: dict | None = None,
    fuse: bool = False,
) -> TAPState:
    """Iterate the TAP equations from K initialisations at once (Alg. 1; App. E for L > 1).

    One iteration updates all odd layers from their neighbours, then all even layers (for an
    RBM: hidden side, then visible side, exactly Alg. 1). Each layer's update is

        A_l = -sum_{neighbours m} (W_lm * W_lm) c_m,   B_l = A_l a_l^old + sum_m W_lm a_m,
        a_l <- damping * a_l^old + (1 - damping) * f_a(B_l, A_l),
        c_l <- damping * c_l^old + (1 - damping) * f_c(B_l, A_l),

    so ``damping=0`` is the undamped iteration and the paper's experiments use 0.5. The Onsager
    term uses the layer's own previous (damped) mean a_l^old. Initial values the caller did not
    pass (``c_visible``, ``a_hidden``, ``c_hidden`` left at their defaults) are placeholders: the
    first update of such a quantity is taken undamped, so that e.g. the first hidden update of
    an RBM is exactly Alg. 1's, whatever the damping.

    Convergence: after each iteration, a row's criterion is the mean, over all units of all
    iterated layers (hidden layers only when clamped), of the squared difference between the
    successive (damped) iterates of the means a. A row whose criterion is below ``tol`` is
    frozen (no longer updated) and marked converged, with ``iterations`` the iteration count at
    which that happened; the loop stops when every row has converged or after ``max_iter``
    iterations (unconverged rows report ``iterations == max_iter``).

    Parameters
    ----------
    machine : BoltzmannMachine
    a_visible : Tensor of shape (K, N_0)
        Initial visible means, one initialisation per row (eq. 37: data points).
    c_visible : Tensor of shape (K, N_0) or (N_0,), default zeros (eq. 38)
        Initial visible variances (ignored when clamped: c_0 = 0).
    damping : float in [0, 1)
        Weight of the old iterate, see above.
    tol : float
        Threshold on the mean squared step of the a's.
    max_iter : int
        Maximum number of iterations.
    clamp : Tensor of shape (K, N_0), True or None
        Clamped inference (App. E): the visible layer is held at the given data (or at
        ``a_visible`` if ``True``) with c_0 = 0, and only hidden layers iterate. The resulting
        state has ``clamped=True``.
    a_hidden, c_hidden : sequence of Tensor, one per hidden layer, optional
        Initial hidden means (default: the prior means f_a(0, 0)) and variances (default 0).
        For an RBM the first hidden update only reads a_hidden through the Onsager term,
        which vanishes when c_visible = 0.
    visible_tilt : (A_ext, B_ext), each of shape (K, N_0) or (N_0,), optional
        A single-site tilt exp(-A_ext x^2 / 2 + B_ext x) of each visible unit, one per row: an
        external field (a likelihood over the visible units, e.g. a noisy channel, Sec. VII.4).
        It is added to the visible layer's fields at every update, A_0 += A_ext and
        B_0 += B_ext, so the visible moments are f_a(B_0 + B_ext, A_0 + A_ext): the TAP
        equations of the machine whose visible prior is P_0(x) exp(-A_ext x^2 / 2 + B_ext x)
        (eq. 47 for the binary symmetric channel). Single-site terms carry no Onsager
        correction. Infinite B_ext (a noiseless channel) gives f_a at the bound. Either may be
        None (no such term). The state's visible A, B include the tilt. Ignored when clamped.
    solver : {"damped", "anderson", "newton_damped", "newton_sor"}
        ``"damped"`` is Alg. 1 as above. ``"anderson"`` (``anderson``) solves the same TAP
        equations by Anderson mixing of a reduced map: each layer is solved exactly from its
        neighbours (the Onsager self-feedback by a Newton iteration per unit), odd layers'
        fields are the iterated variable, and no damping is needed. A row stops after the sweep
        whose mean squared change of the means, times (1 - damping)^2, is below ``tol``: the
        bound on the residual that ``tol`` sets for Alg. 1's damped step. It may reach another
        fixed point than Alg. 1 from the same start.
        ``"newton_damped"`` (``damped.newton_sweep``) is Alg. 1's sweep with each unit's mean
        moved by one Newton step on its own equation a = f_a(A a + h, A): the damped update
        with a per-unit, per-sweep damping -A f_c / (1 - A f_c) instead of ``damping``
        (heavy where the Onsager self-feedback is strong); the variances keep ``damping``.
        Same cost per sweep and same fixed points as Alg. 1; a row stops after the sweep whose
        mean squared residual f_a - a, times (1 - damping)^2, is below ``tol`` (``"anderson"``'s
        bound). It may reach another fixed point than Alg. 1 from the same start.
        ``"newton_sor"``: Alg. 1's first sweeps (the basin), a few of those Newton steps, then
        the Newton steps over-relaxed (one-step SOR-Newton; ``NEWTON``, ``damped.newton_sweep``).
    memory : int
        ``"anderson"``: number of past iterates mixed (m).
    stats : dict, optional
        ``"anderson"``: receives ``fallbacks``, a (K,) int64 tensor counting each row's
        switches from mixing to plain steps (the safeguard: its residual stopped falling).
    fuse : bool
        ``"damped"`` only: run the elementwise part of each binary layer's update as one
        compiled kernel (``fused``; ``torch.compile``, eager if it fails): the same iteration up
        to rounding, compiled once per process (docs/tap_solver.md: no faster at 100 rows on a CPU).

    Returns
    -------
    TAPState
        Final a, c of all layers, the fields A, B of each layer's last update, per-row iteration
        counts and the converged mask.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    dtype, device = machine.dtype, machine.device
    sizes = machine.sizes
    n_layers = len(sizes)
    clamped = clamp is not None and clamp is not False
    if clamped and not isinstance(clamp, bool):
        a_visible = clamp
    if a_visible is None:
        raise ValueError("solve needs a_visible (or clamp=data)")
    a_visible = torch.as_tensor(a_visible, dtype=dtype, device=device)
    if a_visible.dim() != 2 or a_visible.shape[1] != sizes[0]:
        raise ValueError(f"a_visible must have shape (K, {sizes[0]}), got {tuple(a_visible.shape)}")
    K = a_visible.shape[0]
    tilt = None
    if visible_tilt is not None and not clamped:
        tilt = [
            None if t is None else _as_rows(t, K, sizes[0], dtype, device) for t in visible_tilt
        ]
    if isinstance(a_hidden, Tensor):
        a_hidden = [a_hidden]
    if isinstance(c_hidden, Tensor):
        c_hidden = [c_hidden]

    # Initial values; `given_*[l]` records whether the caller supplied them (defaults are
    # placeholders: the first update of a defaulted quantity is not damped towards it).
    a = [a_visible.clone()]
    given_a, given_c = [True], [c_visible is not None]
    if clamped or c_visible is None:
        c = [torch.zeros(K, sizes[0], dtype=dtype, device=device)]
    else:
        c = [_as_rows(c_visible, K, sizes[0], dtype, device)]
    for l in range(1, n_layers):
        given_a.append(a_hidden is not None)
        given_c.append(c_hidden is not None)
        if a_hidden is not None:
            a.append(_as_rows(a_hidden[l - 1], K, sizes[l], dtype, device))
        else:
            zero = torch.zeros(sizes[l], dtype=dtype, device=device)
            a.append(_as_rows(machine.priors[l].moments(zero, zero)[0], K, sizes[l], dtype, device))
        if c_hidden is not None:
            c.append(_as_rows(c_hidden[l - 1], K, sizes[l], dtype, device))
        else:
            c.append(torch.zeros(K, sizes[l], dtype=dtype, device=device))

    # Outputs: full-size buffers, made when the first rows converge and filled as rows converge
    # (and at the end); a solve in which no row stops early returns its working tensors.
    out = None
    iterations = torch.full((K,), max_iter, dtype=torch.long, device=device)
    converged = torch.zeros(K, dtype=torch.bool, device=device)

    with torch.no_grad():
        weights = [W.detach() for W in machine.weights]
        neg_squares = [(W * W).neg_() for W in weights]
        priors = machine.priors
        order = [l for parity in (1, 0) for l in range(parity, n_layers, 2)]
        if clamped:
            order = [l for l in order if l != 0]
        n_iterated = sum(sizes[l] for l in order)
        sizes_l = range(n_layers)
        A = [torch.zeros_like(t) for t in a]
        B = [torch.zeros_like(t) for t in a]
        active = torch.arange(K, device=device)  # original row of each working row
        pending = torch.ones(K, dtype=torch.bool, device=device)  # working rows not yet done
        maps = (order, weights, neg_squares, priors)
        if solver == "anderson":
            stop_scale = (1.0 - damping) ** 2
            warm = [
                [damping if damping > 0.0 and given[l] else 0.0 for l in sizes_l]
                for given in (given_a, given_c)
            ]
            out, iterations, converged, fallbacks = anderson(
                (a, c, A, B), tilt, maps, tol, max_iter, memory, stop_scale, (*warm, damping)
            )
            if stats is not None:
                stats["fallbacks"] = fallbacks
            return TAPState(*out, iterations, converged, clamped=clamped)

        for t in range(1, max_iter + 1):
            if solver in NEWTON and t > NEWTON[solver][0]:
                fresh = [[t == 1 and not given[l] for l in sizes_l] for given in (given_a, given_c)]
                omega = NEWTON[solver][2] if t > sum(NEWTON[solver][:2]) else 1.0
                step = newton_sweep(a, c, A, B, *maps, tilt, fresh, damping, omega)
            else:
                keep_a = [
                    damping if damping > 0.0 and (t > 1 or given_a[l]) else 0.0 for l in sizes_l
                ]
                keep_c = [
                    damping if damping > 0.0 and (t > 1 or given_c[l]) else 0.0 for l in sizes_l
                ]
                step = sweep(
                    a, c, A, B, order, weights, neg_squares, priors, tilt, keep_a, keep_c, fuse
                )
            done = (step / n_iterated < tol) & pending
            if t == max_iter:
                if out is None:
                    out = [a, c, A, B]
                else:
                    _store(out, [a, c, A, B], active, pending)
                converged[active[done]] = True
                iterations[active[done]] = t
                break
            if bool(done.any()):
                if out is None:
                    out = [[torch.empty_like(x) for x in part] for part in (a, c, A, B)]
                _store(out, [a, c, A, B], active, done)
                converged[active[done]] = True
                iterations[active[done]] = t
                pending &= ~done
                n_left = int(pending.sum())
                if n_left == 0:
                    break
                # Finished rows keep iterating (their results are stored) until they are a
                # sixteenth of the working set: compacting at every convergence costs more.
                if 16 * (pending.numel() - n_left) >= pending.numel():
                    active = active[pending]
                    a, c = [x[pending] for x in a], [x[pending] for x in c]
                    A, B = [x[pending] for x in A], [x[pending] for x in B]
                    if tilt is not None:
                        tilt = [None if x is None else x[pending] for x in tilt]
                    pending = torch.ones(n_left, dtype=torch.bool, device=device)

    return TAPState(*out, iterations, converged, clamped=clamped)


#: TAP solvers (``solve``'s ``solver``; config ``tap.solver``, ``harvest.<model>.solver``).
SOLVERS = ("damped", "anderson", "newton_damped", "newton_sor")

#: Solvers that take per-unit Newton steps (``damped.newton_sweep``): (Alg. 1's damped sweeps
#: first, then Newton steps at omega = 1, then at the over-relaxation omega). Measured on
#: trained binary-MNIST RBMs (docs/tap_solver.md): the first sweeps choose a data start's basin
#: (after 5 of Alg. 1's sweeps, 98-100% of the starts reach Alg. 1's fixed point, 92-100%
#: without; where Alg. 1 cycles 93% and 86%), over-relaxing after them keeps most (97-100%; 67%
#: where Alg. 1 cycles), and omega = 1.4 takes about half the sweeps of omega = 1, while from
#: 1.6 some rows no longer converge where Alg. 1 cycles.
NEWTON = {"newton_damped": (0, 0, 1.0), "newton_sor": (5, 5, 1.4)}


def solve_from(machine: BoltzmannMachine, state: TAPState, **kw) -> TAPState:
    """``solve`` started where ``state`` stopped: from its a and c of every layer (so the first
    update is damped), clamped as ``state`` is unless ``clamp`` is given. Continuing rows at
    another damping, a tighter tolerance or with another solver all go through here."""
    kw.setdefault("clamp", True if state.clamped else None)
    return solve(
        machine,
        state.a[0],
        c_visible=state.c[0],
        a_hidden=state.a[1:],
        c_hidden=state.c[1:],
        **kw,
    )


def retry_tolerance(tol: float, damping: float, retry_damping: float | None) -> float | None:
    """The second pass's tolerance that asks of a row what ``tol`` asks at ``damping``.

    The criterion of ``solve`` is the mean squared step between damped iterates, and a damped
    step is (1 - d) times the undamped residual f(a) - a, so ``tol`` at damping d bounds the
    residual's mean square by tol / (1 - d)^2. At ``retry_damping`` the same bound needs
    tol ((1 - retry_damping) / (1 - damping))^2: 1/100 of ``tol`` for 0.95 after 0.5. (With
    ``tol`` itself, rows stopped at 10-300 times the residual of first-pass solutions on the
    paper run's checkpoints, and bmnist_h25's epoch 69 counted 133 "solutions" instead of 13.)
    None when there is no second pass.
    """
    if retry_damping is None:
        return None
    return tol * ((1.0 - retry_damping) / (1.0 - damping)) ** 2


def solve_with_retry(
    machine: BoltzmannMachine,
    a_visible: Tensor,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    retry_damping: float | None = None,
    clamp: Tensor | bool | None = None,
    solver: str = "damped",
    fuse: bool = False,
) -> TAPState:
    """``solve``, then the rows that did not converge solved again from their last iterate.

    The second pass restarts each unconverged row from its own a, c of every layer (so it is
    damped from its first update) with damping ``retry_damping``, up to ``max_iter`` more
    iterations and the tolerance ``retry_tolerance`` (the same bound on the residual as the
    first pass's); its ``iterations`` then count both passes (a row converged in the second pass
    has ``iterations > max_iter``). Damping moves no fixed point of the TAP equations, only
    whether the iteration reaches one: on trained binary-MNIST RBMs with few hidden units the
    iteration at damping 0.5 settles into a cycle (bmnist_h25 at epoch 69: none of 300 rows
    converged within 2,000 iterations, in float32 or float64) while at 0.95 every row converged.
    ``retry_damping=None`` is plain ``solve``. ``solver`` (``SOLVERS``) and ``fuse`` apply to
    both passes.
    """
    states = solve(
        machine,
        a_visible,
        damping=damping,
        tol=tol,
        max_iter=max_iter,
        clamp=clamp,
        solver=solver,
        fuse=fuse,
    )
    if retry_damping is None or bool(states.converged.all()):
        return states
    rows = torch.nonzero(~states.converged, as_tuple=True)[0]
    stuck = states.select(rows)
    again = solve_from(
        machine,
        stuck,
        damping=retry_damping,
        tol=retry_tolerance(tol, damping, retry_damping),
        max_iter=max_iter,
        solver=solver,
        fuse=fuse,
    )
    for part in ("a", "c", "A", "B"):
        for merged, new in zip(getattr(states, part), getattr(again, part), strict=True):
            merged[rows] = new
    states.iterations[rows] = max_iter + again.iterations
    states.converged[rows] = again.converged
    return states


def _store(out, work, active, rows):
    """Copy working rows ``rows`` of each layer's a, c, A, B (``work``) to the output buffers
    ``out`` at their original positions ``active[rows]``."""
    target = active[rows]
    for outs, ins in zip(out, work, strict=True):
        for o, x in zip(outs, ins, strict=True):
            o[target] = x[rows]


def clamped_state(machine: BoltzmannMachine, x: Tensor, **solve_kwargs) -> TAPState:
    """TAP solutions with the visible layer clamped at the data rows ``x`` (App. E).

    For an RBM the hidden units are conditionally independent given x and the clamped solution
    is exact and closed-form: A_1 = 0, B_1 = W^T x, a_1 = f_a(W^T x, 0), c_1 = f_c(W^T x, 0).
    For deeper machines this runs ``solve(machine, clamp=x, **solve_kwargs)``.
    """
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    if machine.n_layers > 2:
        return solve(machine, clamp=x, **solve_kwargs)
    M = x.shape[0]
    B1 = x @ machine.W
    A1 = torch.zeros_like(B1)
    a1, c1 = machine.hidden.moments(B1, A1)
    zeros = torch.zeros_like(x)
    return TAPState(
        a=[x, a1],
        c=[zeros, c1],
        A=[zeros, A1],
        B=[zeros, B1],
        iterations=torch.ones(M, dtype=torch.long, device=x.device),
        converged=torch.ones(M, dtype=torch.bool, device=x.device),
        clamped=True,
    )
