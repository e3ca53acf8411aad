"""TAP inference (Alg. 1, App. E): solving the TAP equations from K starts, with a damped
second pass for the rows that did not converge, and clamped inference.

``solve`` runs one of ``SOLVERS`` on the same TAP equations:

- ``"damped"``: Alg. 1, one damped sweep over the odd layers, then the even ones.
- ``"anderson"`` (``anderson``): Anderson mixing of a reduced map that solves each layer exactly
  from its neighbours (the Onsager self-feedback by a Newton iteration per unit); odd layers'
  fields are the iterated variable and no damping is needed. A row stops after the sweep whose
  mean squared change of the means, times (1 - damping)^2, is below ``tol``: the bound on the
  residual that ``tol`` sets for Alg. 1's damped step.
- ``"newton_damped"`` (``damped.newton_sweep``): Alg. 1's sweep with each unit's mean moved by
  one Newton step on its own equation a = f_a(A a + h, A), i.e. a per-unit, per-sweep damping
  -A f_c / (1 - A f_c) instead of ``damping`` (heavy where the Onsager self-feedback is
  strong); the variances keep ``damping``. Same cost per sweep and same fixed points as Alg. 1;
  a row stops by ``"anderson"``'s bound.
- ``"newton_sor"``: Alg. 1's first sweeps (the basin), a few of those Newton steps, then the
  Newton steps over-relaxed (one-step SOR-Newton; ``NEWTON``).

The accelerated solvers may reach another fixed point than Alg. 1 from the same start
(docs/tap_solver.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.tap.anderson import anderson
from tapmachine.core.tap.damped import newton_sweep, sweep
from tapmachine.core.tap.settings import (
    COMPACT_EVERY,
    NEWTON_SOR_RELAXATION,
    SOLVERS,
    SolverSettings,
    retry_tolerance,
)
from tapmachine.core.tap.state import TAPState

__all__ = [
    "SOLVERS",
    "solve",
    "solve_from",
    "retry_tolerance",
    "solve_with_retry",
    "clamped_state",
]

_DEFAULT = SolverSettings()


def _as_rows(t: Tensor, K: int, n: int, dtype, device) -> Tensor:
    """A fresh (K, n) tensor in the machine's dtype from a (K, n) or (n,) input."""
    t = torch.as_tensor(t, dtype=dtype, device=device)
    return t.expand(K, n).clone()


@dataclasses.dataclass
class _Iterate:
    """The rows still iterated: each layer's a, c, A, B (working rows only), the visible tilt of
    those rows, the original row of each (``active``) and which of them are not yet done."""

    a: list
    c: list
    A: list
    B: list
    tilt: list | None
    active: Tensor
    pending: Tensor

    @classmethod
    def start(cls, a: list, c: list, tilt) -> _Iterate:
        """Every row working, from a and c (fields A, B zero until the first update)."""
        K, device = a[0].shape[0], a[0].device
        zeros = [torch.zeros_like(t) for t in a]
        return cls(
            a,
            c,
            zeros,
            [torch.zeros_like(t) for t in a],
            tilt,
            torch.arange(K, device=device),
            torch.ones(K, dtype=torch.bool, device=device),
        )

    def parts(self) -> list:
        return [self.a, self.c, self.A, self.B]

    def keep(self, rows: Tensor) -> None:
        """Drop every working row but ``rows`` (a mask)."""
        self.active = self.active[rows]
        self.a, self.c = [x[rows] for x in self.a], [x[rows] for x in self.c]
        self.A, self.B = [x[rows] for x in self.A], [x[rows] for x in self.B]
        if self.tilt is not None:
            self.tilt = [None if x is None else x[rows] for x in self.tilt]


def solve(
    machine: BoltzmannMachine,
    a_visible: Tensor | None = None,
    c_visible: Tensor | None = None,
    damping: float = _DEFAULT.damping,
    tol: float = _DEFAULT.tol,
    max_iter: int = _DEFAULT.max_iter,
    clamp: Tensor | bool | None = None,
    a_hidden: Sequence[Tensor] | None = None,
    c_hidden: Sequence[Tensor] | None = None,
    visible_tilt: tuple[Tensor, Tensor] | None = None,
    solver: str = _DEFAULT.solver,
    memory: int = 5,
    stats: dict | None = None,
    fuse: bool = _DEFAULT.fuse,
    relaxation: float = _DEFAULT.relaxation,
) -> TAPState:
    """Iterate the TAP equations from K initialisations at once (Alg. 1; App. E for L > 1).

    One iteration updates all odd layers from their neighbours, then all even layers (for an
    RBM: hidden side, then visible side, exactly Alg. 1). Each layer's update is

        A_l = -sum_{neighbours m} (W_lm * W_lm) c_m,   B_l = A_l a_l^old + sum_m W_lm a_m,
        a_l <- damping * a_l^old + (1 - damping) * f_a(B_l, A_l),
        c_l <- damping * c_l^old + (1 - damping) * f_c(B_l, A_l),

    so ``damping=0`` is the undamped iteration and the paper's experiments use 0.5. The Onsager
    term uses the layer's own previous (damped) mean a_l^old. Initial values the caller did not
    pass (``c_visible``, ``a_hidden``, ``c_hidden``) are placeholders: the first update of such
    a quantity is taken undamped, so that the first hidden update of an RBM is exactly Alg. 1's.

    Convergence: a row's criterion is the mean, over all units of all iterated layers (hidden
    only when clamped), of the squared step of the means a between successive iterates. A row
    below ``tol`` is frozen and marked converged, with ``iterations`` the count at which that
    happened; unconverged rows report ``iterations == max_iter``.

    ``a_visible`` (K, N_0): the starts (eq. 37: data points); ``c_visible`` (K, N_0) or (N_0,):
    their variances (default 0, eq. 38). ``clamp``: the visible layer held at the given data (or
    at ``a_visible`` if True) with c_0 = 0, only hidden layers iterate (App. E). ``a_hidden``,
    ``c_hidden``: one tensor per hidden layer (default: the prior means f_a(0, 0), variances 0).
    ``visible_tilt`` (A_ext, B_ext): a single-site tilt exp(-A_ext x^2 / 2 + B_ext x) of each
    visible unit per row, added to the visible fields at every update (a noisy channel, Sec.
    VII.4, eq. 47; no Onsager correction; either may be None; ignored when clamped). ``solver``:
    one of ``SOLVERS`` (the module's docstring); ``memory``: ``"anderson"``'s mixed iterates;
    ``stats``: receives ``"anderson"``'s per-row ``fallbacks``. ``fuse``: ``"damped"``'s
    elementwise binary layer update as one compiled kernel (``fused``; the same iteration up to
    rounding). ``relaxation``: ``"newton_sor"``'s over-relaxation omega (``NEWTON``; other
    solvers ignore it). Returns the final a, c of all layers, the fields A, B of each layer's last
    update, per-row iteration counts and the converged mask.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    clamped = clamp is not None and clamp is not False
    if clamped and not isinstance(clamp, bool):
        a_visible = clamp
    a, c, given, tilt = _start(
        machine, a_visible, c_visible, a_hidden, c_hidden, visible_tilt, clamped
    )
    # inference_mode, not no_grad: a sweep is hundreds of small operations, and skipping their
    # version-counter and autograd bookkeeping saves ~10% of a converged real-MNIST solve.
    with torch.inference_mode():
        maps = _maps(machine, clamped)
        if solver == "anderson":
            out, iterations, converged = _solve_anderson(
                a, c, given, tilt, maps, damping, tol, max_iter, memory, stats
            )
        else:
            work = _Iterate.start(a, c, tilt)
            out, iterations, converged = _iterate(
                work, maps, given, solver, damping, tol, max_iter, fuse, relaxation
            )
    a, c, A, B = ([_ordinary(t) for t in layers] for layers in out)
    return TAPState(a, c, A, B, _ordinary(iterations), _ordinary(converged), clamped=clamped)


def _ordinary(t: Tensor) -> Tensor:
    """``t``, copied if it was made in inference mode: callers may update a solve's results in
    place or use them under autograd."""
    return t.clone() if t.is_inference() else t


def _start(machine, a_visible, c_visible, a_hidden, c_hidden, visible_tilt, clamped):
    """The initial a and c of every layer, whether the caller gave each layer's a and c
    (``given``: defaults are placeholders, not damped towards), and the visible tilt per row."""
    dtype, device, sizes = machine.dtype, machine.device, machine.sizes
    if a_visible is None:
        raise ValueError("solve needs a_visible (or clamp=data)")
    a_visible = torch.as_tensor(a_visible, dtype=dtype, device=device)
    if a_visible.dim() != 2 or a_visible.shape[1] != sizes[0]:
        raise ValueError(f"a_visible must have shape (K, {sizes[0]}), got {tuple(a_visible.shape)}")
    K = a_visible.shape[0]
    if isinstance(a_hidden, Tensor):
        a_hidden = [a_hidden]
    if isinstance(c_hidden, Tensor):
        c_hidden = [c_hidden]
    a = [a_visible.clone()]
    given_a, given_c = [True], [c_visible is not None]
    if clamped or c_visible is None:
        c = [torch.zeros(K, sizes[0], dtype=dtype, device=device)]
    else:
        c = [_as_rows(c_visible, K, sizes[0], dtype, device)]
    for l in range(1, len(sizes)):
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
    tilt = None
    if visible_tilt is not None and not clamped:
        tilt = [
            None if t is None else _as_rows(t, K, sizes[0], dtype, device) for t in visible_tilt
        ]
    return a, c, (given_a, given_c), tilt


def _maps(machine: BoltzmannMachine, clamped: bool) -> tuple:
    """What a sweep reads: the order of the iterated layers (odd, then even; the visible layer
    left out when clamped), the couplings W, their negated squares -(W * W), the priors."""
    weights = [W.detach() for W in machine.weights]
    neg_squares = [(W * W).neg_() for W in weights]
    order = [l for parity in (1, 0) for l in range(parity, machine.n_layers, 2)]
    if clamped:
        order = [l for l in order if l != 0]
    return order, weights, neg_squares, machine.priors


def _solve_anderson(a, c, given, tilt, maps, damping, tol, max_iter, memory, stats):
    """``solve(..., solver="anderson")``: Anderson mixing from the start a, c (``anderson``)."""
    A = [torch.zeros_like(t) for t in a]
    B = [torch.zeros_like(t) for t in a]
    warm = [[damping if damping > 0.0 and g[l] else 0.0 for l in range(len(a))] for g in given]
    out, iterations, converged, fallbacks = anderson(
        (a, c, A, B), tilt, maps, tol, max_iter, memory, (1.0 - damping) ** 2, (*warm, damping)
    )
    if stats is not None:
        stats["fallbacks"] = fallbacks
    return out, iterations, converged


def _iterate(work: _Iterate, maps, given, solver, damping, tol, max_iter, fuse, relaxation=None):
    """Sweeps of ``solver`` until every row has converged or ``max_iter``: each row's a, c, A, B
    when it converged (or at the end), its iteration count and whether it converged."""
    K, device = work.active.shape[0], work.active.device
    n_iterated = sum(work.a[l].shape[1] for l in maps[0])
    # Full-size outputs, made when the first rows converge and filled as rows converge (and at
    # the end); a solve in which no row stops early returns its working tensors.
    out = None
    iterations = torch.full((K,), max_iter, dtype=torch.long, device=device)
    converged = torch.zeros(K, dtype=torch.bool, device=device)
    for t in range(1, max_iter + 1):
        step = _sweep_once(t, work, maps, given, solver, damping, fuse, relaxation)
        done = (step / n_iterated < tol) & work.pending
        if t == max_iter:
            if out is None:
                out = work.parts()
            else:
                _store(out, work.parts(), work.active, work.pending)
            converged[work.active[done]] = True
            iterations[work.active[done]] = t
            break
        if bool(done.any()):
            if out is None:
                out = [[torch.empty_like(x) for x in part] for part in work.parts()]
            _store(out, work.parts(), work.active, done)
            converged[work.active[done]] = True
            iterations[work.active[done]] = t
            work.pending &= ~done
            n_left = int(work.pending.sum())
            if n_left == 0:
                break
            if COMPACT_EVERY * (work.pending.numel() - n_left) >= work.pending.numel():
                work.keep(work.pending)
                work.pending = torch.ones(n_left, dtype=torch.bool, device=device)
    return out, iterations, converged


def _sweep_once(
    t: int, work: _Iterate, maps, given, solver, damping, fuse, relaxation=None
) -> Tensor:
    """Sweep ``t`` of ``solver`` over the working rows, in place: Alg. 1's damped sweep (the
    first update of a quantity the caller did not give undamped), or a Newton sweep
    (``NEWTON``; ``relaxation``, where given, replaces ``"newton_sor"``'s omega). Returns each
    row's summed squared step of the means."""
    layers = range(len(work.a))
    if solver in NEWTON and t > NEWTON[solver][0]:
        fresh = [[t == 1 and not g[l] for l in layers] for g in given]
        omega = NEWTON[solver][2]
        if relaxation is not None and solver == "newton_sor":
            omega = relaxation
        omega = omega if t > sum(NEWTON[solver][:2]) else 1.0
        parts = (work.a, work.c, work.A, work.B)
        return newton_sweep(*parts, *maps, work.tilt, fresh, damping, omega)
    keep_a, keep_c = (
        [damping if damping > 0.0 and (t > 1 or g[l]) else 0.0 for l in layers] for g in given
    )
    order, weights, neg_squares, priors = maps
    return sweep(
        work.a,
        work.c,
        work.A,
        work.B,
        order,
        weights,
        neg_squares,
        priors,
        work.tilt,
        keep_a,
        keep_c,
        fuse,
    )


#: Solvers that take per-unit Newton steps (``damped.newton_sweep``): (Alg. 1's damped sweeps
#: first, then Newton steps at omega = 1, then at the over-relaxation omega). Measured on
#: trained binary-MNIST RBMs (docs/tap_solver.md): the first sweeps choose a data start's basin
#: (after 5 of Alg. 1's sweeps, 98-100% of the starts reach Alg. 1's fixed point, 92-100%
#: without; where Alg. 1 cycles 93% and 86%), over-relaxing after them keeps most (97-100%; 67%
#: where Alg. 1 cycles), and omega = 1.4 takes about half the sweeps of omega = 1, while from
#: 1.6 some rows no longer converge where Alg. 1 cycles. On the paper run's own checkpoints
#: (``benchmarks/run.py tap_relaxation``) 1.6 converges every row with 1.4's basin agreement
#: in 1.3-1.45 times fewer sweeps, and 1.7 breaks down on bmnist_h25's last epoch; a config
#: sets it by ``tap.relaxation`` (docs/tap_solver.md: it changes the model trained).
NEWTON = {"newton_damped": (0, 0, 1.0), "newton_sor": (5, 5, NEWTON_SOR_RELAXATION)}


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


def solve_with_retry(
    machine: BoltzmannMachine,
    a_visible: Tensor,
    settings: SolverSettings = _DEFAULT,
    clamp: Tensor | bool | None = None,
) -> TAPState:
    """``solve`` by ``settings``, then the rows that did not converge solved again from their
    last iterate.

    The second pass restarts each unconverged row from its own a, c of every layer (so it is
    damped from its first update) with damping ``settings.retry_damping``, up to ``max_iter``
    more iterations and the tolerance ``retry_tolerance`` (the same bound on the residual as the
    first pass's); its ``iterations`` then count both passes (a row converged in the second pass
    has ``iterations > max_iter``). Damping moves no fixed point of the TAP equations, only
    whether the iteration reaches one: on trained binary-MNIST RBMs with few hidden units the
    iteration at damping 0.5 settles into a cycle (bmnist_h25 at epoch 69: none of 300 rows
    converged within 2,000 iterations, in float32 or float64) while at 0.95 every row converged.
    ``retry_damping=None`` is plain ``solve``. ``solver``, ``fuse`` and ``relaxation`` apply to
    both passes.
    """
    s = settings
    knobs = {"max_iter": s.max_iter, "solver": s.solver, "fuse": s.fuse, "relaxation": s.relaxation}
    states = solve(machine, a_visible, damping=s.damping, tol=s.tol, clamp=clamp, **knobs)
    if s.retry_damping is None or bool(states.converged.all()):
        return states
    rows = torch.nonzero(~states.converged, as_tuple=True)[0]
    stuck = states.select(rows)
    again = solve_from(machine, stuck, damping=s.retry_damping, tol=s.retry_tol, **knobs)
    for part in ("a", "c", "A", "B"):
        for merged, new in zip(getattr(states, part), getattr(again, part), strict=True):
            merged[rows] = new
    states.iterations[rows] = s.max_iter + again.iterations
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
