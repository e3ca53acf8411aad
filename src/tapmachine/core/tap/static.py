"""Alg. 1's sweeps at fixed shapes and without a host synchronisation: the form in which a
captured device graph (``torch.cuda.CUDAGraph``) can replay them.

``solve`` decides on the host, after every sweep, which rows have converged, compacts the rows
still working and stops when none is left; each decision reads a device value. Here the K rows
stay in place through every sweep, and a row's result follows its iterate by a mask
(``torch.where``) while it is pending, then stays at the sweep it converged. So it reports what
``solve`` reports for it: the iterate of that sweep, the count t, converged. Later sweeps go on
computing it and discard the result. The rows are independent given the couplings, so the
numbers are ``solve``'s up to the rounding of matmuls over another number of rows (identical
while no row converges).

``StaticSolve`` holds the buffers. ``run_sweeps`` advances them in place, writing its results
back into the same tensors (one call is one captured chunk, replayable); ``finish`` marks the
converged rows. ``chunks`` lays out the sweeps 1..max_iter in chunks of k, and ``chunk_key``
names what a chunk computes: every chunk with the same key runs the same kernels, so one
captured graph serves all of them (``settled``). ``solve_chunked`` runs the chunks with one
convergence check, one host synchronisation, between chunks.

Only ``"damped"``, ``"newton_damped"`` and ``"newton_sor"`` sweep this way (``STATIC_SOLVERS``);
Anderson mixing keeps a history and safeguards that branch on device values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.tap.inference import NEWTON, _Iterate, _maps, _start, _sweep_once
from tapmachine.core.tap.state import TAPState

__all__ = [
    "STATIC_SOLVERS",
    "StaticSolve",
    "StaticMaps",
    "buffer_tensors",
    "run_sweeps",
    "finish",
    "solve_static",
    "settled",
    "chunks",
    "chunk_key",
    "solve_chunked",
]

#: Solvers whose sweeps run without a host synchronisation (``run_sweeps``).
STATIC_SOLVERS = ("damped", "newton_damped", "newton_sor")


@dataclasses.dataclass
class StaticSolve:
    """The buffers of a solve of K rows at fixed shapes.

    ``work`` and ``out``: [a, c, A, B], each a list of one (K, N_l) tensor per layer; ``work``
    is the iterate, ``out`` each row's result (the iterate while the row is pending, then
    frozen at the sweep it converged). ``pending``: rows not yet converged; ``iterations``: the
    sweeps each row was pending for (its count at convergence, else ``max_iter``);
    ``converged``: set by ``finish``, as ``TAPState``'s. ``given``: which starting a and c the
    caller gave (``inference._start``; a placeholder's first update is undamped).
    """

    work: list
    out: list
    pending: Tensor
    converged: Tensor
    iterations: Tensor
    given: tuple
    max_iter: int

    @classmethod
    def start(cls, machine: BoltzmannMachine, init: Tensor, max_iter: int) -> StaticSolve:
        """Buffers at Alg. 1's start from the rows ``init`` (eq. 37: data points; hidden means
        the priors' f_a(0, 0), variances 0), as ``solve`` starts. The fields A, B and ``out``
        are left unset: the first sweep writes them for every row (no layer is clamped)."""
        a, c, given, _ = _start(machine, init, None, None, None, None, False)
        work = [a, c, [torch.empty_like(t) for t in a], [torch.empty_like(t) for t in a]]
        K, device = a[0].shape[0], a[0].device
        return cls(
            work=work,
            out=[[torch.empty_like(t) for t in part] for part in work],
            pending=torch.ones(K, dtype=torch.bool, device=device),
            converged=torch.zeros(K, dtype=torch.bool, device=device),
            iterations=torch.zeros(K, dtype=torch.long, device=device),
            given=given,
            max_iter=max_iter,
        )

    def load(self, machine: BoltzmannMachine, init: Tensor) -> None:
        """Restart from the rows ``init`` in place (same shapes): every tensor keeps its
        storage, so a captured chunk reads the new start."""
        a, c, _, _ = _start(machine, init, None, None, None, None, False)
        for mine, new in zip([*self.work[0], *self.work[1]], [*a, *c], strict=True):
            mine.copy_(new)
        self.pending.fill_(True)
        self.iterations.zero_()

    def state(self) -> TAPState:
        """The results as a ``TAPState`` (its tensors are these buffers: read them before the
        next ``load``)."""
        a, c, A, B = self.out
        return TAPState(a, c, A, B, self.iterations, self.converged)


def buffer_tensors(buffers: StaticSolve) -> list:
    """Every tensor of ``buffers`` (what a chunk changes)."""
    parts = [t for part in (*buffers.work, *buffers.out) for t in part]
    return [*parts, buffers.pending, buffers.converged, buffers.iterations]


@dataclasses.dataclass
class StaticMaps:
    """What a sweep reads of the machine (``inference._maps``: layer order, W, -W * W, priors)
    in tensors of fixed storage, refilled from each new machine by ``load``. The priors are
    copies of the machine's whose parameters are these buffers."""

    order: list
    weights: list
    neg_squares: list
    priors: list

    @classmethod
    def of(cls, machine: BoltzmannMachine) -> StaticMaps:
        order, weights, neg_squares, priors = _maps(machine, clamped=False)
        own = [p.replace(**{k: v.clone() for k, v in p.params().items()}) for p in priors]
        return cls(list(order), [W.clone() for W in weights], list(neg_squares), own)

    def load(self, machine: BoltzmannMachine) -> None:
        """The parameters of ``machine`` (same sizes and priors) into the buffers."""
        for W, ns, new in zip(self.weights, self.neg_squares, machine.weights, strict=True):
            W.copy_(new)
            torch.mul(W, W, out=ns).neg_()
        for mine, new in zip(self.priors, machine.priors, strict=True):
            for name, value in mine.params().items():
                value.copy_(new.params()[name])

    def maps(self) -> tuple:
        return self.order, self.weights, self.neg_squares, self.priors


def run_sweeps(
    buffers: StaticSolve,
    maps: tuple,
    sweeps: Sequence[int],
    solver: str,
    damping: float,
    tol: float,
    fuse: bool = False,
    write_back: bool = True,
) -> None:
    """The sweeps numbered ``sweeps`` (as ``inference._sweep_once`` reads t) on ``buffers``, in
    place, with no host synchronisation.

    After each sweep the rows pending before it take its iterate into ``out`` and count it in
    ``iterations``; a row whose mean squared step of the means is below ``tol`` (the criterion
    of ``solve``) is no longer pending, so ``out`` keeps the iterate of the sweep it converged
    at. With ``write_back`` the iterate ends in ``work``'s own tensors (the lists keep their
    tensors, so a captured call replays on what the previous call left); without it (a solve
    in one call) ``work`` is left as it was.
    """
    a, c, A, B = (list(part) for part in buffers.work)
    work = _Iterate(a, c, A, B, None, buffers.pending, buffers.pending)
    n_iterated = sum(a[l].shape[1] for l in maps[0])
    rows = buffers.pending[:, None]
    for t in sweeps:
        step = _sweep_once(t, work, maps, buffers.given, solver, damping, fuse)
        for outs, ins in zip(buffers.out, work.parts(), strict=True):
            for o, x in zip(outs, ins, strict=True):
                torch.where(rows, x, o, out=o)
        buffers.iterations.add_(buffers.pending)
        buffers.pending.logical_and_(torch.logical_not(step / n_iterated < tol))
    if write_back:
        for statics, ins in zip(buffers.work, work.parts(), strict=True):
            for s, x in zip(statics, ins, strict=True):
                if x is not s:
                    s.copy_(x)


def finish(buffers: StaticSolve) -> TAPState:
    """The results (``StaticSolve.state``), every row not pending marked converged (the rows
    still pending were stopped by the cap: ``iterations`` = ``max_iter``)."""
    torch.logical_not(buffers.pending, out=buffers.converged)
    return buffers.state()


def solve_static(
    machine: BoltzmannMachine,
    init: Tensor,
    max_iter: int,
    solver: str = "damped",
    damping: float = 0.5,
    tol: float = 1e-8,
    fuse: bool = False,
) -> TAPState:
    """``solve(machine, init, ...)`` by ``max_iter`` sweeps at fixed shapes, without a host
    synchronisation (a fixed-iteration training step's solve, captured whole): the same
    iterations, converged rows and results as ``solve``."""
    if solver not in STATIC_SOLVERS:
        raise ValueError(f"solver must be one of {STATIC_SOLVERS}, got {solver!r}")
    with torch.no_grad():
        buffers = StaticSolve.start(machine, init, max_iter)
        maps = _maps(machine, clamped=False)
        sweeps = range(1, max_iter + 1)
        run_sweeps(buffers, maps, sweeps, solver, damping, tol, fuse, write_back=False)
        return finish(buffers)


def settled(solver: str) -> int:
    """The first sweep number from which every sweep of ``solver`` computes alike: after the
    first (a placeholder's undamped update) for ``"damped"`` and ``"newton_damped"``, after
    Alg. 1's and the plain Newton sweeps for ``"newton_sor"`` (``inference.NEWTON``)."""
    if solver in NEWTON:
        return max(2, sum(NEWTON[solver][:2]) + 1)
    return 2


def chunks(max_iter: int, size: int) -> list[range]:
    """The sweeps 1..``max_iter`` in consecutive chunks of ``size`` (the last one shorter when
    ``size`` does not divide ``max_iter``)."""
    if size < 1:
        raise ValueError(f"a chunk holds at least one sweep, not {size}")
    return [range(t, min(t + size, max_iter + 1)) for t in range(1, max_iter + 1, size)]


def chunk_key(sweeps: range, solver: str) -> tuple:
    """The sweep numbers a chunk computes with: each t capped at ``settled(solver)``. Chunks
    with one key run the same kernels (their t differ only past the point where t changes
    nothing), and ``run_sweeps`` over the key computes any of them."""
    top = settled(solver)
    return tuple(min(t, top) for t in sweeps)


def solve_chunked(
    buffers: StaticSolve, replay: Callable[[tuple], None], size: int, solver: str
) -> int:
    """Run ``buffers``' sweeps chunk by chunk, ``replay(chunk_key(...))`` each (a captured
    ``run_sweeps`` over that key, or the call itself), until no row is pending or
    ``buffers.max_iter`` sweeps; ``finish`` is the caller's. Returns the sweeps run: the eager
    solve's count rounded up to a whole chunk (the one host synchronisation per chunk is the
    check ``pending.any()``)."""
    for sweeps in chunks(buffers.max_iter, size):
        replay(chunk_key(sweeps, solver))
        if not bool(buffers.pending.any()):
            return sweeps[-1]
    return buffers.max_iter
