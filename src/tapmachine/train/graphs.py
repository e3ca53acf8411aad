"""TAP training steps as captured CUDA graphs (``tap.cuda_graphs``): the same steps as the eager
loop's, replayed as one launch each, since at 100 rows a minibatch an eager step is a few hundred
small kernels, each paying its launch.

- A fixed-iteration step of an RBM (``train_iterations: <int>``) is captured whole
  (``WholeSteps``): the start from the batch, ``train_iterations`` of Alg. 1's sweeps at fixed
  shapes (``tap.static``), eqs. (40)-(42) and Alg. 2's update, in place on the parameters and
  momentum. Each minibatch is copied into the graph's input and the graph replayed. The loop
  only takes full minibatches (``loop.run_epoch``), so every replay has the captured shape.
- A converged step (``train_iterations: converge``) runs its sweeps as captured chunks of
  ``cuda_graph_sweeps`` sweeps (``ChunkedSteps``, ``tap.static.solve_chunked``), with the
  convergence check, one host synchronisation, between chunks; the rest of the step (choosing
  the converged and unique solutions, the gradient, the update) is eager.

What is captured may not read a device value on the host, allocate memory that outlives it, or
draw random numbers. So the random parts of a step (the minibatch order, ``resample``,
``train_noise``) stay eager, before the copy into the graph's input; the solves at fixed shapes
mask converged rows instead of dropping them; the step size and momentum are constants of the
graph (a new capture when the schedule changes them); and the divergence check of every step
becomes a device flag read once an epoch (``WholeSteps.end``: the error names the first batch
whose update was not finite).

Where the run cannot be captured (``problem``: not on CUDA, ``cuda_graphs: false``, a method
other than TAP, adaTAP, a truncated prior, Anderson mixing, the clamped data term of a deep
machine in fixed-iteration steps), the eager loop runs, as it does wherever a capture fails:
the step runs uncaptured from then on and the reason is logged.

How a function becomes replayable is one argument, ``record(fn, state) -> replay``:
``cuda_record`` (warm-up on a side stream, the state restored, then ``torch.cuda.graph``) or,
on the CPU, ``eager_record`` (replay = call), which runs the same buffers, chunks and checks
without a GPU (the tests compare it with the eager loop).
"""

from __future__ import annotations

import gc
import logging
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.core.tap import static
from tapmachine.train.settings import TrainingError, TrainSettings
from tapmachine.train.tap_gradient import fixed_solver, initialisations, tap_step_gradients
from tapmachine.train.update import apply_update, check_finite, prior_velocity_start

__all__ = [
    "problem",
    "steps_for",
    "cuda_record",
    "eager_record",
    "WholeSteps",
    "ChunkedSteps",
    "ChunkedSolver",
]

_log = logging.getLogger(__name__)

#: ``record(fn, state)``: ``fn`` as a replayable call; ``state``, tensors ``fn`` changes, which
#: a warm-up run must leave as they were.
Record = Callable[[Callable[[], None], list], Callable[[], None]]


def eager_record(fn: Callable[[], None], state: list) -> Callable[[], None]:
    """The replay of ``fn`` as a plain call: what ``cuda_record`` gives, without a device."""
    return fn


def cuda_record(fn: Callable[[], None], state: list, warmup: int = 1) -> Callable[[], None]:
    """``fn`` captured in a ``torch.cuda.CUDAGraph``; returns its ``replay``.

    ``fn`` runs ``warmup`` times first, on the side stream the capture then uses (lazy
    initialisations, cuBLAS workspaces, ``torch.compile``, none of which may happen inside a
    capture), after which the tensors of ``state`` get back the values they had. The capture
    itself runs nothing: the first replay is ``fn``'s first real run. Every tensor ``fn`` reads
    must keep its storage for as long as the replay is used. The device is ``state``'s.
    """
    device = state[0].device
    with torch.cuda.device(device):
        if device not in _streams:
            _streams[device] = torch.cuda.Stream(device)
        stream = _streams[device]
        saved = [t.clone() for t in state]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        for t, s in zip(state, saved, strict=True):
            t.copy_(s)
        graph = torch.cuda.CUDAGraph()
        # Warm-up and capture on one stream: libraries that keep a handle or workspace per
        # stream make it in the warm-up. No garbage collection inside the capture (it may
        # finalise a compiled kernel's module).
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, stream=stream):
                fn()
        finally:
            if collecting:
                gc.enable()
    return graph.replay


#: Why steps ran eagerly on a CUDA device, as logged (once each).
_told: set = set()

#: The side stream of every warm-up and capture on a device (``cuda_record``).
_streams: dict = {}


def problem(machine: BoltzmannMachine, settings: TrainSettings) -> str | None:
    """Why the TAP steps of this run are not captured, in a few words; None where they are."""
    if not settings.cuda_graphs:
        return "tap.cuda_graphs is false"
    if settings.method != "tap":
        return f"method {settings.method!r}: only TAP steps are captured"
    if settings.inference != "tap":
        return "adaTAP steps are not captured"
    if not all(isinstance(p, Bernoulli | Spin) for p in machine.priors):
        return "the truncated priors' moments branch on device values"
    if settings.train_iterations != "converge":
        if machine.n_layers > 2:
            return "a deep machine's data term is a converged clamped solve"
    elif settings.solver not in static.STATIC_SOLVERS:
        return f"solver {settings.solver!r} branches on device values"
    elif settings.solver == "newton_sor" and settings.relaxation != tap.NEWTON_SOR_RELAXATION:
        return f"newton_sor's relaxation {settings.relaxation} is not captured (only its default)"
    if machine.device.type != "cuda":
        return f"not on a CUDA device ({machine.device})"
    return None


def steps_for(machine: BoltzmannMachine, settings: TrainSettings, held=None):
    """The captured steps of an epoch of ``machine`` under ``settings``: ``held`` (the steps of
    the epoch before, or steps made with another ``record``) while they fit, else new
    ``WholeSteps`` or ``ChunkedSteps`` on ``cuda_record``, or None for the eager loop
    (``problem``, logged once a process on a CUDA device)."""
    if held is not None and held.fits(machine, settings):
        return held
    why = problem(machine, settings)
    if why is not None:
        if machine.device.type == "cuda" and settings.cuda_graphs and why not in _told:
            _told.add(why)
            _log.info("training steps run eagerly: %s", why)
        return None
    kind = ChunkedSteps if settings.train_iterations == "converge" else WholeSteps
    return kind(machine, settings, cuda_record)


def _clone(machine: BoltzmannMachine) -> BoltzmannMachine:
    """A machine of its own tensors with ``machine``'s values."""
    priors = [p.replace(**{k: v.clone() for k, v in p.params().items()}) for p in machine.priors]
    return machine.replace(priors=priors, weights=[W.clone() for W in machine.weights])


def _parameters(machine: BoltzmannMachine) -> list[Tensor]:
    """Every parameter tensor: the couplings, then each prior's in ``params()`` order."""
    return [*machine.weights, *(v for p in machine.priors for v in p.params().values())]


class _Failover:
    """Capture with a way back: the first failed capture is logged and warned about once, and
    from then on every function runs uncaptured."""

    def __init__(self, record: Record):
        self.record = record
        self.failed: str | None = None

    def __call__(self, fn, state):
        if self.failed is None:
            try:
                return self.record(fn, state)
            except Exception as exc:  # any capture failure: eager from now on
                self.failed = f"{exc!r:.300}"
                message = f"CUDA graph capture failed ({self.failed}); eager steps"
                warnings.warn(message, stacklevel=3)
                _log.warning("CUDA graph capture of the TAP step failed: %s", self.failed)
        return fn


class WholeSteps:
    """Fixed-iteration TAP steps of an RBM, each captured whole (the module's docstring).

    The graph reads and writes tensors of its own: the parameters (a copy of the machine),
    the momentum, the minibatch and the starts. ``begin`` loads an epoch's machine and momentum
    into them, ``step`` copies a minibatch in and replays, ``end`` checks that every update was
    finite, writes the momentum back and returns a copy of the machine. One graph per step size,
    momentum and minibatch shape (the last few kept).
    """

    def __init__(self, machine: BoltzmannMachine, settings: TrainSettings, record: Record):
        self.settings = settings
        self.record = _Failover(record)
        self.machine = _clone(machine)
        self.velocity = [torch.zeros_like(W) for W in machine.weights]
        if settings.prior_momentum:
            self.velocity += prior_velocity_start(machine)
        device = machine.device
        self.steps = torch.zeros((), dtype=torch.long, device=device)
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)
        self.inputs: dict = {}
        self.graphs: dict = {}
        self.lr = self.eta = None
        self.carried_velocity: list | None = None

    def fits(self, machine: BoltzmannMachine, settings: TrainSettings) -> bool:
        """Whether these steps can go on for ``machine`` under ``settings``."""
        return (
            settings == self.settings
            and (machine.device, machine.dtype) == (self.machine.device, self.machine.dtype)
            and [tuple(t.shape) for t in _parameters(machine)]
            == [tuple(t.shape) for t in _parameters(self.machine)]
        )

    def begin(self, machine: BoltzmannMachine, velocity: list, lr: float, eta: float) -> None:
        """Start an epoch from ``machine`` and the coupling momentum ``velocity`` (written back
        by ``end``) at step size ``lr`` and momentum ``eta``."""
        for mine, new in zip(_parameters(self.machine), _parameters(machine), strict=True):
            mine.copy_(new)
        for mine, new in zip(self.velocity, velocity, strict=True):
            mine.copy_(new)
        self.steps.zero_()
        self.first_bad.fill_(-1)
        self.lr, self.eta = lr, eta
        self.carried_velocity = velocity

    def step(self, x: Tensor, generator: torch.Generator, stats: dict, epoch: int, b: int) -> None:
        """One step on the minibatch ``x``: its starts drawn eagerly, then the graph."""
        init = initialisations(self.machine, x, self.settings, generator)
        shape = (tuple(x.shape), None if init is x else tuple(init.shape))
        if shape not in self.inputs:
            x_in = torch.empty_like(x)
            self.inputs[shape] = (x_in, x_in if init is x else torch.empty_like(init))
        x_in, init_in = self.inputs[shape]
        x_in.copy_(x)
        if init_in is not x_in:
            init_in.copy_(init)
        key = (self.lr, self.eta, shape)
        if key not in self.graphs:
            if len(self.graphs) >= 4:
                self.graphs.pop(next(iter(self.graphs)))
            fn = self._step_function(x_in, init_in, self.lr, self.eta)
            self.graphs[key] = self.record(fn, self._state())
        self.graphs[key]()

    def _state(self) -> list:
        return [*_parameters(self.machine), *self.velocity, self.steps, self.first_bad]

    def _step_function(self, x: Tensor, init: Tensor, lr: float, eta: float):
        machine, settings, velocity = self.machine, self.settings, self.velocity
        solver = fixed_solver(settings)
        params = _parameters(machine)

        def fn() -> None:
            with torch.no_grad():
                states = static.solve_static(
                    machine,
                    init,
                    solver.max_iter,
                    solver.solver,
                    solver.damping,
                    solver.tol,
                    solver.fuse,
                )
                grads = tap.tap_gradients(machine, x, states)
                updated = apply_update(machine, grads, velocity, lr, settings, eta)
                new = _parameters(updated)
                finite = torch.stack([torch.isfinite(t).all() for t in new]).all()
                for mine, value in zip(params, new, strict=True):
                    mine.copy_(value)
                self.steps.add_(1)
                first = finite.logical_not_().logical_and_(self.first_bad < 0)
                torch.where(first, self.steps - 1, self.first_bad, out=self.first_bad)

        return fn

    def end(self, epoch: int) -> BoltzmannMachine:
        """The epoch's machine (a copy; the next epoch's replays change only these steps' own
        tensors) after the check that every update was finite (``TrainingError`` naming the
        first batch that was not, as ``update.check_finite`` does after each eager step); the
        momentum is written back into the tensors ``begin`` was given."""
        for mine, carried in zip(self.velocity, self.carried_velocity, strict=True):
            carried.copy_(mine)
        machine = _clone(self.machine)
        bad = int(self.first_bad)
        if bad >= 0:
            check_finite(machine, epoch, bad)
            raise TrainingError(f"diverged at epoch {epoch}, batch {bad}: an update not finite")
        return machine


class ChunkedSolver:
    """Converged solves at fixed shapes, their sweeps replayed as captured chunks of ``size``
    sweeps (``tap.static.solve_chunked``); called as ``tap_gradient.solve_for_gradient``.
    Buffers and graphs are made for the first machine and row count seen and reused."""

    def __init__(self, size: int, record: Record):
        self.size = size
        self.record = _Failover(record)
        self.maps: static.StaticMaps | None = None
        self.buffers: dict = {}
        self.graphs: dict = {}

    def __call__(
        self,
        machine: BoltzmannMachine,
        init: Tensor,
        solver: tap.SolverSettings,
        inference: str = "tap",
    ) -> tap.TAPState:
        if inference != "tap" or solver.solver not in static.STATIC_SOLVERS:
            raise ValueError(f"{solver.solver!r} ({inference}) has no captured sweeps")
        if self.maps is None:
            self.maps = static.StaticMaps.of(machine)
        else:
            self.maps.load(machine)
        key = (tuple(init.shape), solver)
        if key not in self.buffers:
            self.buffers[key] = static.StaticSolve.start(machine, init, solver.max_iter)
        else:
            self.buffers[key].load(machine, init)
        buffers = self.buffers[key]

        def replay(sweeps: tuple) -> None:
            if (key, sweeps) not in self.graphs:
                fn = self._chunk_function(buffers, sweeps, solver)
                self.graphs[key, sweeps] = self.record(fn, static.buffer_tensors(buffers))
            self.graphs[key, sweeps]()

        static.solve_chunked(buffers, replay, self.size, solver.solver)
        return static.finish(buffers)

    def _chunk_function(self, buffers, sweeps: tuple, solver: tap.SolverSettings):
        maps = self.maps.maps()

        def fn() -> None:
            with torch.no_grad():
                static.run_sweeps(
                    buffers, maps, sweeps, solver.solver, solver.damping, solver.tol, solver.fuse
                )

        return fn


class ChunkedSteps:
    """Converged TAP steps whose sweeps run as captured chunks (``ChunkedSolver``); the rest of
    each step is the eager loop's (``tap_step_gradients``, ``apply_update``, ``check_finite``)."""

    def __init__(self, machine: BoltzmannMachine, settings: TrainSettings, record: Record):
        self.settings = settings
        self.solve = ChunkedSolver(settings.cuda_graph_sweeps, record)
        self.machine = machine

    def fits(self, machine: BoltzmannMachine, settings: TrainSettings) -> bool:
        same = (machine.device, machine.dtype) == (self.machine.device, self.machine.dtype)
        return settings == self.settings and same and machine.sizes == self.machine.sizes

    def begin(self, machine: BoltzmannMachine, velocity: list, lr: float, eta: float) -> None:
        self.machine, self.velocity, self.lr, self.eta = machine, velocity, lr, eta

    def step(self, x: Tensor, generator: torch.Generator, stats: dict, epoch: int, b: int) -> None:
        s = self.settings
        grads = tap_step_gradients(self.machine, x, s, generator, stats, solve=self.solve)
        self.machine = apply_update(self.machine, grads, self.velocity, self.lr, s, self.eta)
        check_finite(self.machine, epoch, b)

    def end(self, epoch: int) -> BoltzmannMachine:
        return self.machine
