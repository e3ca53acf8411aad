"""Alg. 1 at fixed shapes (``tap.static``): the same iterations, converged rows and results as
``tap.solve``, in place on buffers that keep their storage, chunk by chunk."""

import pytest
import torch

from tapmachine.core import tap
from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap import static
from tapmachine.core.tap.inference import _maps, _sweep_once


def _rbm(dtype, seed=0, nv=30, nh=12, scale=0.3, visible=Bernoulli):
    g = torch.Generator().manual_seed(seed)
    W = (scale * torch.randn(nv, nh, generator=g)).to(dtype)
    return RBM(
        W,
        visible((0.1 * torch.randn(nv, generator=g)).to(dtype)),
        Bernoulli((0.1 * torch.randn(nh, generator=g)).to(dtype)),
    )


def _rows(machine, k=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(k, machine.sizes[0], generator=g) < 0.3).to(machine.dtype)
    return 2 * x - 1 if isinstance(machine.visible, Spin) else x


def _deep(dtype):
    g = torch.Generator().manual_seed(3)
    sizes = (20, 10, 6)
    priors = [Bernoulli((0.1 * torch.randn(n, generator=g)).to(dtype)) for n in sizes]
    weights = [
        (0.4 * torch.randn(a, b, generator=g)).to(dtype)
        for a, b in zip(sizes, sizes[1:], strict=False)
    ]
    return BoltzmannMachine(priors, weights)


def _assert_same_solve(want, got, atol):
    assert torch.equal(want.iterations, got.iterations)
    assert torch.equal(want.converged, got.converged)
    for part in ("a", "c", "A", "B"):
        for w, g in zip(getattr(want, part), getattr(got, part), strict=True):
            torch.testing.assert_close(g, w, rtol=0.0, atol=atol)


@pytest.mark.parametrize("solver", static.STATIC_SOLVERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", ["rbm", "spin", "deep"])
def test_static_solve_is_the_eager_solve(solver, dtype, shape):
    """Rows that converge at different sweeps, and rows the cap stops: the same sweep counts and
    converged rows as ``solve``, the same solutions up to the rounding of matmuls over fewer
    rows (``solve`` drops converged rows from its working set)."""
    machine = {"rbm": _rbm, "spin": lambda d: _rbm(d, visible=Spin), "deep": _deep}[shape](dtype)
    x = _rows(machine)
    free = tap.solve(machine, x, solver=solver, tol=1e-10, max_iter=500)
    assert bool(free.converged.all()) and int(free.iterations.min()) < int(free.iterations.max())
    cap = int(free.iterations.max()) - 1  # the slowest rows stopped by the cap
    want = tap.solve(machine, x, solver=solver, tol=1e-10, max_iter=cap)
    got = static.solve_static(machine, x, cap, solver, 0.5, 1e-10)
    assert 0 < int(want.converged.sum()) < x.shape[0]
    _assert_same_solve(want, got, 1e-13 if dtype == torch.float64 else 1e-6)


@pytest.mark.parametrize("solver", static.STATIC_SOLVERS)
def test_static_solve_is_bitwise_the_eager_solve_while_no_row_converges(solver):
    """A fixed-iteration step (3 sweeps, a tolerance no row meets): every number is ``solve``'s,
    bit for bit (the same kernels on the same rows)."""
    machine = _rbm(torch.float32)
    x = _rows(machine)
    want = tap.solve(machine, x, solver=solver, tol=1e-12, max_iter=3)
    got = static.solve_static(machine, x, 3, solver, 0.5, 1e-12)
    assert not bool(want.converged.any())
    _assert_same_solve(want, got, 0.0)


def test_static_solve_refuses_anderson():
    machine = _rbm(torch.float64)
    with pytest.raises(ValueError, match="solver must be one of"):
        static.solve_static(machine, _rows(machine), 5, "anderson")


def test_chunks_cover_every_sweep_once():
    assert static.chunks(10, 4) == [range(1, 5), range(5, 9), range(9, 11)]
    assert static.chunks(8, 4) == [range(1, 5), range(5, 9)]
    assert static.chunks(3, 10) == [range(1, 4)]
    for max_iter, size in ((100, 7), (2000, 10), (1, 1)):
        sweeps = [t for chunk in static.chunks(max_iter, size) for t in chunk]
        assert sweeps == list(range(1, max_iter + 1))
    with pytest.raises(ValueError):
        static.chunks(10, 0)


def test_chunk_keys_name_the_chunks_that_compute_alike():
    """Alg. 1's sweeps differ only in the first (a placeholder's undamped update); newton_sor's
    in its first 5 (Alg. 1's), the next 5 (Newton at omega 1) and the rest (over-relaxed)."""
    keys = {
        s: [static.chunk_key(c, s) for c in static.chunks(100, 10)] for s in static.STATIC_SOLVERS
    }
    for solver in ("damped", "newton_damped"):
        assert keys[solver][0] == (1,) + (2,) * 9
        assert set(keys[solver][1:]) == {(2,) * 10}
    assert keys["newton_sor"][0] == tuple(range(1, 11))
    assert set(keys["newton_sor"][1:]) == {(11,) * 10}
    assert static.chunk_key(range(21, 24), "damped") == (2, 2, 2)


@pytest.mark.parametrize("solver", static.STATIC_SOLVERS)
def test_a_chunk_key_computes_what_its_sweep_numbers_compute(solver):
    """``run_sweeps`` over a chunk's key and over its real sweep numbers: the same bits, so one
    captured graph serves every chunk with that key."""
    machine = _rbm(torch.float64)
    x = _rows(machine)
    maps = _maps(machine, clamped=False)
    real, keyed = (static.StaticSolve.start(machine, x, 40) for _ in range(2))
    for chunk in static.chunks(40, 6):
        static.run_sweeps(real, maps, chunk, solver, 0.5, 1e-10)
        static.run_sweeps(keyed, maps, static.chunk_key(chunk, solver), solver, 0.5, 1e-10)
    for a, b in zip(static.buffer_tensors(real), static.buffer_tensors(keyed), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("size", [1, 7, 10, 64])
@pytest.mark.parametrize("solver", static.STATIC_SOLVERS)
def test_chunked_solve_reaches_the_eager_fixed_points_within_a_chunk(solver, size):
    """Chunks with a convergence check between them (an eager stand-in for the replays): the
    same fixed points, counts and converged rows as ``solve``; the sweeps run are the eager
    solve's last convergence rounded up to a chunk's end."""
    machine = _rbm(torch.float64)
    x = _rows(machine)
    want = tap.solve(machine, x, solver=solver, tol=1e-10, max_iter=200)
    buffers = static.StaticSolve.start(machine, x, 200)
    maps = _maps(machine, clamped=False)
    seen = []

    def replay(key):
        seen.append(key)
        static.run_sweeps(buffers, maps, key, solver, 0.5, 1e-10)

    ran = static.solve_chunked(buffers, replay, size, solver)
    _assert_same_solve(want, static.finish(buffers), 1e-13)
    last = int(want.iterations.max())
    assert ran >= last and ran - last < size and (ran % size == 0 or ran == 200)
    assert ran == sum(len(k) for k in seen)


def test_chunked_solve_stops_at_the_cap():
    machine = _rbm(torch.float64, scale=1.5)  # strong couplings: rows the cap stops
    x = _rows(machine)
    want = tap.solve(machine, x, tol=1e-14, max_iter=23)
    buffers = static.StaticSolve.start(machine, x, 23)
    maps = _maps(machine, clamped=False)
    ran = static.solve_chunked(
        buffers,
        lambda key: static.run_sweeps(buffers, maps, key, "damped", 0.5, 1e-14),
        10,
        "damped",
    )
    assert ran == 23 and not bool(want.converged.all())
    _assert_same_solve(want, static.finish(buffers), 1e-13)


def test_sweeps_keep_every_buffer_in_place():
    """A replayed chunk reads the tensors the capture read: ``run_sweeps`` leaves the buffers'
    lists holding the same tensor objects and storage, and writes its results into them."""
    machine = _rbm(torch.float64)
    x = _rows(machine)
    buffers = static.StaticSolve.start(machine, x, 50)
    before = [(t, t.data_ptr()) for t in static.buffer_tensors(buffers)]
    a0 = buffers.work[0][1].clone()
    static.run_sweeps(buffers, _maps(machine, clamped=False), range(1, 6), "damped", 0.5, 1e-10)
    after = static.buffer_tensors(buffers)
    assert all(t is u and t.data_ptr() == p for (t, p), u in zip(before, after, strict=True))
    assert not torch.equal(buffers.work[0][1], a0)  # the hidden means moved, in place


def test_load_restarts_in_place_as_a_fresh_start():
    """A solve of other rows on another machine after ``load``: every tensor keeps its storage,
    and the results are those of buffers made fresh for them."""
    machine = _rbm(torch.float64)
    other = _rbm(torch.float64, seed=5)
    x, y = _rows(machine), _rows(machine, seed=2)
    buffers = static.StaticSolve.start(machine, x, 50)
    static.run_sweeps(buffers, _maps(machine, clamped=False), range(1, 9), "damped", 0.5, 1e-10)
    kept = [t.data_ptr() for t in static.buffer_tensors(buffers)]
    buffers.load(other, y)
    fresh = static.StaticSolve.start(other, y, 50)
    assert kept == [t.data_ptr() for t in static.buffer_tensors(buffers)]
    for b in (buffers, fresh):
        static.run_sweeps(b, _maps(other, clamped=False), range(1, 51), "damped", 0.5, 1e-10)
    _assert_same_solve(static.finish(fresh), static.finish(buffers), 0.0)


def test_static_maps_load_another_machine_bitwise():
    machine, other = _rbm(torch.float32), _rbm(torch.float32, seed=9)
    maps = static.StaticMaps.of(machine)
    ptrs = [t.data_ptr() for t in (*maps.weights, *maps.neg_squares)]
    maps.load(other)
    order, weights, neg_squares, priors = _maps(other, clamped=False)
    assert maps.order == list(order)
    assert ptrs == [t.data_ptr() for t in (*maps.weights, *maps.neg_squares)]
    for a, b in zip((*maps.weights, *maps.neg_squares), (*weights, *neg_squares), strict=True):
        assert torch.equal(a, b)
    for mine, theirs in zip(maps.priors, priors, strict=True):
        assert torch.equal(mine.U, theirs.U) and mine.U is not theirs.U
    # the sweeps read the loaded machine
    x = _rows(other)
    work = tap.inference._Iterate.start(
        *tap.inference._start(other, x, *[None] * 4, False)[:2], None
    )
    given = ([True, False], [False, False])
    step = _sweep_once(1, work, maps.maps(), given, "damped", 0.5, False)
    want = tap.solve(other, x, tol=0.0, max_iter=1)
    assert torch.equal(work.a[1], want.a[1]) and step.shape == (x.shape[0],)
