"""The one training loop for every gradient method (``train.methods``): TAP (Alg. 2), CD-k and
PCD-k, and the DBM methods of the second paper (UCD-LMI and its PCD baselines).

The loop owns everything around the gradient: minibatches, the update of Alg. 2
(``train.update``), per-epoch evaluation (``train.evaluation``), checkpoints that make an
interrupted run resume with identical results (written by ``train.checkpointing``, read back by
``train.resume``), a stop on a signal that keeps the state first (``train.stopping``) and
divergence checks. It knows nothing of tracking: callers pass callbacks. ``train`` runs
``run_epoch`` on a ``Carried`` state (machine, momentum, the method's state, the history) that a
caller may also hold and continue one epoch at a time (the estimators' ``partial_fit``,
``tapmachine.learn``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core import eta
from tapmachine.core.errors import StoppedBySignal
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.files import remove_temporaries
from tapmachine.io.modelfile import (
    EpochInProgress,
    in_progress_path,
)
from tapmachine.io.runlog import resume_message
from tapmachine.train import graphs
from tapmachine.train.checkpointing import (
    IN_PROGRESS_SECONDS,
    UNKEPT_CHECKPOINT_SECONDS,
    EpochCheckpoints,
    InProgressWriter,
    restore,
    resume_in_progress,
    stopped_message,
    training_checkpoint,
)
from tapmachine.train.evaluation import (
    evaluate_tap_log_likelihood,
    evaluation_due,
    weight_stats,
)
from tapmachine.train.methods import method
from tapmachine.train.resume import (
    evaluated_alike,
    fingerprint,
    reevaluate_history,
    resume_checkpoint,
)
from tapmachine.train.settings import TrainSettings
from tapmachine.train.stopping import StopRequests
from tapmachine.train.tap_gradient import check_train_noise
from tapmachine.train.update import (
    apply_update,
    check_finite,
    learning_rate,
    momentum_at,
    prior_velocity_start,
    sampling_steps_at,
)

__all__ = [
    "Carried",
    "train",
    "run_epoch",
    "present",
    "eval_rows",
    "IN_PROGRESS_SECONDS",
    "UNKEPT_CHECKPOINT_SECONDS",
]


@dataclasses.dataclass
class Carried:
    """What one epoch hands the next: the machine, the momentum of every coupling matrix (and, with
    ``prior_momentum``, of every prior parameter: ``update.apply_update``), the gradient method's
    state (PCD chains, centering offsets; ``GradientMethod.init_state``), the
    metrics of the epochs done and their count. ``train`` starts one, or continues one it is
    given (``carried=``) and advances it in place: the estimators' ``partial_fit`` runs one
    epoch at a time on the state of the epochs before (``tapmachine.learn``). ``graphs``: the
    captured steps of the epochs before (``train.graphs.steps_for``; not checkpointed)."""

    machine: BoltzmannMachine
    velocity: list[Tensor]
    state: object
    history: list[dict]
    epoch: int = 0
    graphs: object = None

    def __getstate__(self) -> dict:
        """Pickled (an estimator's state) without its captured steps, which hold device graphs
        and are made again for the next epoch."""
        return {**self.__dict__, "graphs": None}

    @classmethod
    def start(
        cls,
        machine: BoltzmannMachine,
        x_train: Tensor,
        settings: TrainSettings,
        generator: torch.Generator,
    ) -> Carried:
        """Epoch 0: zero momentum and the method's initial state (drawn from ``generator``)."""
        check_train_noise(machine, settings.train_noise)
        velocity = [torch.zeros_like(W) for W in machine.weights]
        if settings.prior_momentum:
            velocity += prior_velocity_start(machine)
        state = method(settings.method).init_state(machine, x_train, settings, generator)
        return cls(machine, velocity, state, [])


def train(
    machine: BoltzmannMachine,
    x_train: Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
    checkpoint_dir: str | os.PathLike | None = None,
    x_eval: Tensor | None = None,
    on_epoch=None,
    progress: bool = True,
    on_step=None,
    carried: Carried | None = None,
    until: int | None = None,
    in_progress_seconds: float | None = None,
    unkept_checkpoint_seconds: float | None = None,
    on_history=None,
) -> tuple[BoltzmannMachine, list[dict]]:
    """Train ``machine`` on the rows of ``x_train``; returns the final machine and metrics.

    Every epoch (``run_epoch``): shuffled minibatches of ``batch_size`` rows, one update per
    batch, then the TAP log-likelihood of ``x_eval`` (default: the first ``eval_samples``
    training rows, ``eval_rows``), weight statistics and timings. With ``checkpoint_dir``, the
    full state (machine, momentum, the method's state, generator, metrics) is saved after every
    epoch and a later call resumes from the last one, giving results identical to an
    uninterrupted run; an epoch whose checkpoint ``checkpoint_every`` will not keep is saved
    at most every ``unkept_checkpoint_seconds`` (default ``UNKEPT_CHECKPOINT_SECONDS``;
    ``EpochCheckpoints``). Part-way through an epoch the state is also kept, at the first batch
    boundary after every ``in_progress_seconds`` of training (default ``IN_PROGRESS_SECONDS``;
    ``EpochInProgress`` in ``checkpoints/in_progress.pt``), so that a job stopped mid-epoch
    resumes at that batch, again with identical results (the epoch's timings add the parts).
    SIGTERM or Ctrl-C (``train.stopping``) makes it keep the state at the next batch boundary, or
    in the checkpoint of an epoch whose evaluation was under way, and raise ``StoppedBySignal``.
    ``on_epoch(epoch, metrics, machine)`` is called after each epoch (logging), and on a resume
    for each epoch trained before, unless ``on_history(rows, machine)`` is given: then it is
    called once with those epochs' rows (a tracking store takes them in one write, where a
    call a row costs a write each: minutes for the faces substitute's thousands of epochs);
    ``on_step(step, metrics)`` after each update with the method's per-step metrics (the DBM
    methods': tau, T, corrected fraction, start energy gap, norm).

    ``carried`` (a ``Carried``, without ``checkpoint_dir``): continue from it instead of from
    ``machine`` at epoch 0, advancing it in place. ``until``: the last epoch to run (default
    ``settings.epochs``, which stays the horizon of a decaying step size).
    """
    gradient = method(settings.method)
    if x_eval is None:
        x_eval = eval_rows(x_train, settings)
    if carried is None:
        carried = Carried.start(machine, x_train, settings, generator)
    elif checkpoint_dir is not None:
        raise ValueError("train: a carried state does not resume from checkpoints")
    else:
        check_train_noise(carried.machine, settings.train_noise)
    ckpt_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckpt_dir is not None:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        identity = fingerprint(machine, x_train, settings)
        remove_temporaries(ckpt_dir)  # left by a write killed mid-way; the files themselves whole
        found = resume_checkpoint(ckpt_dir, identity)
        if found is not None:
            last, ckpt = found
            restore(carried, ckpt, generator, gradient)
            carried.history = ckpt.history
            carried.epoch = ckpt.epoch
            print(resume_message(last, ckpt.epoch), file=sys.stderr)
            _say_if_threads_changed(carried.history)
            if settings.evaluate and not evaluated_alike(ckpt, settings):
                # A pass rewrites the latest checkpoint last: if it is alike, all are.
                carried.history = reevaluate_history(
                    ckpt_dir, carried.history, carried.machine, x_eval, settings, progress
                )
            if on_history is not None:
                on_history(carried.history, carried.machine)
            elif on_epoch is not None:
                for row in carried.history:
                    on_epoch(row["epoch"], row, carried.machine)
        within = resume_in_progress(ckpt_dir, identity, carried, generator, gradient)
    else:
        within = None

    last_epoch = settings.epochs if until is None else until
    # the whole job's ETA, a line per epoch (the bar below is the epoch's)
    job = eta.Progress(last_epoch, f"training {settings.method}", 0.0, carried.epoch)
    if progress and carried.epoch < last_epoch:
        job.begin()
    pause = epochs = None
    with StopRequests() if ckpt_dir is not None else contextlib.nullcontext() as stop:
        if ckpt_dir is not None:
            seconds = UNKEPT_CHECKPOINT_SECONDS
            seconds = seconds if unkept_checkpoint_seconds is None else unkept_checkpoint_seconds
            epochs = EpochCheckpoints(ckpt_dir, settings, seconds, carried.epoch)
            every = IN_PROGRESS_SECONDS if in_progress_seconds is None else in_progress_seconds
            pause = InProgressWriter(
                ckpt_dir, identity, settings, carried, generator, every, stop, epochs
            )
        try:
            while carried.epoch < last_epoch:
                metrics = run_epoch(
                    carried, x_train, settings, generator, x_eval, progress, on_step, within, pause
                )
                within = None
                stopping = stop is not None and stop.requested is not None
                if epochs is not None:
                    checkpoint = training_checkpoint(
                        carried, carried.machine, generator, identity, settings
                    )
                    epochs.after_epoch(checkpoint, force=stopping)
                    in_progress_path(ckpt_dir).unlink(missing_ok=True)  # its epoch is done
                if on_epoch is not None:
                    on_epoch(carried.epoch, metrics, carried.machine)
                if progress:
                    job.advance()
                if stopping:
                    path = ckpt_dir / f"epoch_{carried.epoch}.pt"
                    raise StoppedBySignal(stop.requested, stopped_message(carried.epoch, path))
        finally:
            if epochs is not None:
                epochs.flush()  # the newest epoch, also when an error ends the job
    return carried.machine, carried.history


def _say_if_threads_changed(history: list[dict]) -> None:
    """A line in the log where this start runs on other torch threads than the latest epoch
    trained (``torch_threads``, recorded per epoch): resuming is bit for bit only on as many."""
    trained = history[-1].get("torch_threads") if history else None
    now = torch.get_num_threads()
    if trained is not None and int(trained) != now:
        print(
            f"resuming on {now} torch threads where epoch {history[-1]['epoch']} trained on "
            f"{int(trained)}: matrix products sum in another order, so from here on the run is "
            "not bit for bit the one it would have been without the stop",
            file=sys.stderr,
        )


def run_epoch(
    carried: Carried,
    x_train: Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
    x_eval: Tensor | None = None,
    progress: bool = False,
    on_step=None,
    within: EpochInProgress | None = None,
    pause=None,
) -> dict:
    """One epoch of Alg. 2 from ``carried`` (advanced in place): the step size and momentum of
    epoch ``carried.epoch + 1`` (``update.learning_rate``, ``update.momentum_at``), shuffled
    minibatches of ``batch_size`` rows drawn from ``generator`` (each drawn anew with
    ``settings.resample``: ``present``), the method's gradient and the update per batch (as
    captured CUDA graphs where ``train.graphs.steps_for`` gives steps), then the evaluation
    (``settings.evaluate``: the TAP log-likelihood of ``x_eval``, default ``eval_rows``, after
    every ``eval_every``-th epoch and the last, ``evaluation_due``), weight statistics and
    timings; returns the epoch's metrics, also appended to ``carried.history``.

    ``within``: the epoch is continued after the batches it has done (its order, tallies and
    times; ``carried`` and ``generator`` already hold the state after them). ``pause(machine,
    batches, order, step_stats, seconds, cpu_seconds)``, if given, is offered every batch
    boundary, the last too (a long evaluation follows it), but not with captured steps, whose
    state lives on the device."""
    from tqdm import tqdm

    gradient = method(settings.method)
    if x_eval is None:
        x_eval = eval_rows(x_train, settings)
    epoch = carried.epoch + 1
    t0, cpu0 = time.perf_counter(), time.process_time()
    if within is not None:  # the epoch's earlier part counts in its times
        t0, cpu0 = t0 - within.seconds, cpu0 - within.cpu_seconds
    k = sampling_steps_at(settings.sampling_steps, epoch)
    lr = learning_rate(settings.learning_rate, epoch, settings.epochs, k)
    eta = momentum_at(settings.momentum, epoch)
    scheduled_k = isinstance(settings.sampling_steps, dict)
    if scheduled_k:
        settings = dataclasses.replace(settings, sampling_steps=k)
    n = x_train.shape[0]
    n_batches = max(1, n // settings.batch_size)
    if within is None:
        order = torch.randperm(n, generator=generator, device=generator.device)
        first, step_stats = 0, {}
    else:
        order, first, step_stats = within.order, within.batches, dict(within.step_stats)
    order = order.to(x_train.device)
    bar = tqdm(
        range(first, n_batches),
        desc=f"epoch {epoch}/{settings.epochs}",
        file=sys.stderr,
        disable=not progress,
        mininterval=5.0,
        initial=first,
        total=n_batches,
    )
    machine, velocity, state = carried.machine, carried.velocity, carried.state
    steps = carried.graphs = graphs.steps_for(machine, settings, carried.graphs)
    if steps is not None:
        steps.begin(machine, velocity, lr, eta)
    for b in bar:
        x = x_train[order[b * settings.batch_size : (b + 1) * settings.batch_size]]
        x = present(x, settings.resample, generator)
        if steps is not None:
            steps.step(x, generator, step_stats, epoch, b)
        else:
            grads = gradient.gradients(machine, x, settings, state, generator, step_stats)
            machine = apply_update(machine, grads, velocity, lr, settings, eta)
            check_finite(machine, epoch, b)
        if on_step is not None:
            on_step((epoch - 1) * n_batches + b + 1, gradient.step_metrics(state))
        if pause is not None and steps is None:
            seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            pause(machine, b + 1, order, step_stats, seconds, cpu)
    if steps is not None:
        machine = steps.end(epoch)
    metrics = _epoch_metrics(epoch, lr, time.perf_counter() - t0, step_stats)
    if scheduled_k:
        metrics["sampling_steps"] = k
    evaluates = settings.evaluate and evaluation_due(epoch, settings.eval_every, settings.epochs)
    if evaluates:
        metrics.update(
            evaluate_tap_log_likelihood(
                machine, x_eval, settings.solver_settings, settings.dedup_tol
            )
        )
    metrics.update(weight_stats(machine))
    metrics["epoch_seconds"] = time.perf_counter() - t0
    # CPU time as well: on a shared machine the wall time says more about the load than the job
    metrics["epoch_cpu_seconds"] = time.process_time() - cpu0
    # the summation order of the matrix products: a resume is bit for bit only on as many
    metrics["torch_threads"] = torch.get_num_threads()
    carried.machine, carried.epoch = machine, epoch
    carried.history.append(metrics)
    if evaluates:
        print(_evaluation_line(epoch, metrics, x_eval.shape[0]), file=sys.stderr)
    return metrics


def present(x: Tensor, resample: str | None, generator: torch.Generator) -> Tensor:
    """The rows ``x`` as one step trains on them: as they are (``resample`` None), or each value
    v in [0, 1] drawn anew as Bernoulli(v), 1 where a uniform draw from ``generator`` falls
    below v (``resample="bernoulli"``: Salakhutdinov's ``rbm.m``, ``data > rand`` on every
    batch, for the CD-trained RBMs of Salakhutdinov & Murray 2008)."""
    if resample is None:
        return x
    u = torch.rand(x.shape, generator=generator, dtype=x.dtype, device=generator.device)
    return (u.to(x.device) < x).to(x.dtype)


def eval_rows(x_train: Tensor, settings: TrainSettings) -> Tensor:
    """The per-epoch evaluation's default rows: the first ``eval_samples`` training rows, drawn
    once with ``settings.resample`` from a stream of its own (seed 0), so that every epoch, and a
    resumed run, scores the same rows without touching the training stream."""
    rows = x_train[: settings.eval_samples]
    if settings.resample is None:
        return rows
    own = torch.Generator(device=x_train.device).manual_seed(0)
    return present(rows, settings.resample, own)


def _epoch_metrics(epoch: int, lr: float, train_seconds: float, step_stats: dict) -> dict:
    """An epoch's row before evaluation: step size, training time and, for converged TAP
    steps, the means of ``converged_tap_gradients``'s per-step statistics."""
    metrics = {"epoch": epoch, "learning_rate": lr, "train_seconds": train_seconds}
    if step_stats:
        n_steps = step_stats["steps"]
        metrics["train_mean_iterations"] = step_stats["iterations"] / n_steps
        metrics["train_converged_fraction"] = step_stats["converged"] / n_steps
        metrics["train_mean_solutions"] = step_stats["solutions"] / n_steps
        metrics["train_unconverged_steps"] = step_stats["unconverged_steps"]
        metrics["train_converged_step_share"] = step_stats["converged_steps"] / n_steps
    return metrics


def _evaluation_line(epoch: int, metrics: dict, n_rows: int) -> str:
    """The log line of an epoch's evaluation."""
    if metrics["n_unique"] == 0:
        return (
            f"epoch {epoch}: no TAP solution converged from any of {n_rows} rows "
            "(also not in the second pass): tap_ll is NaN for this epoch"
        )
    return (
        f"epoch {epoch}: tap_ll {metrics['tap_ll']:.5f} +- {metrics['tap_ll_stderr']:.5f}, "
        f"{metrics['n_unique']} unique solutions, {metrics['epoch_seconds']:.1f} s"
    )
