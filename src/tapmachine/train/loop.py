"""The one training loop for every gradient method (``train.methods``): TAP (Alg. 2), CD-k and
PCD-k, and the DBM methods of the second paper (UCD-LMI and its PCD baselines).

The loop owns everything around the gradient: minibatches, the update of Alg. 2
(``train.update``), per-epoch evaluation (``train.evaluation``), checkpoints that make an
interrupted run resume with identical results (``train.resume``) and divergence checks. It
knows nothing of tracking: callers pass callbacks.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core import eta
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.files import remove_temporaries
from tapmachine.io.modelfile import Checkpoint, machine_state
from tapmachine.io.runlog import resume_message
from tapmachine.train.evaluation import evaluate_tap_log_likelihood, weight_stats
from tapmachine.train.methods import method
from tapmachine.train.resume import (
    evaluated_alike,
    fingerprint,
    reevaluate_history,
    resume_checkpoint,
    save_checkpoint,
)
from tapmachine.train.settings import TrainSettings
from tapmachine.train.tap_gradient import check_train_noise
from tapmachine.train.update import apply_update, check_finite, learning_rate

__all__ = ["train"]


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
) -> tuple[BoltzmannMachine, list[dict]]:
    """Train ``machine`` on the rows of ``x_train``; returns the final machine and metrics.

    Every epoch: shuffled minibatches of ``batch_size`` rows, one update per batch, then the TAP
    log-likelihood of ``x_eval`` (default: the first ``eval_samples`` training rows), weight
    statistics and timings. With ``checkpoint_dir``, the full state (machine, momentum, the
    method's state, generator, metrics) is saved after every epoch and a later call resumes
    from the last one, giving results identical to an uninterrupted run.
    ``on_epoch(epoch, metrics, machine)`` is called after each epoch (logging);
    ``on_step(step, metrics)`` after each update with the method's per-step metrics (the DBM
    methods': tau, T, corrected fraction, start energy gap, norm).
    """
    from tqdm import tqdm

    gradient = method(settings.method)
    check_train_noise(machine, settings.train_noise)
    if x_eval is None:
        x_eval = x_train[: settings.eval_samples]
    velocity = [torch.zeros_like(W) for W in machine.weights]
    state = gradient.init_state(machine, x_train, settings, generator)
    history: list[dict] = []
    start = 1
    ckpt_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckpt_dir is not None:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        identity = fingerprint(machine, x_train, settings)
        remove_temporaries(ckpt_dir)  # left by a write killed mid-way; the files themselves whole
        found = resume_checkpoint(ckpt_dir, identity)
        if found is not None:
            last, ckpt = found
            machine = ckpt.machine(machine.device, machine.dtype)
            velocity = [v.to(machine.device) for v in ckpt.velocity]
            generator.set_state(ckpt.generator)
            if ckpt.state is not None:
                state = gradient.load_state(ckpt.state, machine.device)
            history = ckpt.history
            start = ckpt.epoch + 1
            print(resume_message(last, ckpt.epoch), file=sys.stderr)
            if settings.evaluate and not evaluated_alike(ckpt, settings):
                # A pass rewrites the latest checkpoint last: if it is alike, all are.
                history = reevaluate_history(ckpt_dir, history, machine, x_eval, settings, progress)
            for row in history:
                if on_epoch is not None:
                    on_epoch(row["epoch"], row, machine)

    n = x_train.shape[0]
    n_batches = max(1, n // settings.batch_size)
    # the whole job's ETA, a line per epoch (the bar below is the epoch's)
    job = eta.Progress(settings.epochs, f"training {settings.method}", 0.0, start - 1)
    for epoch in range(start, settings.epochs + 1):
        t0, cpu0 = time.perf_counter(), time.process_time()
        lr = learning_rate(settings.learning_rate, epoch, settings.epochs)
        order = torch.randperm(n, generator=generator, device=generator.device).to(x_train.device)
        bar = tqdm(
            range(n_batches),
            desc=f"epoch {epoch}/{settings.epochs}",
            file=sys.stderr,
            disable=not progress,
            mininterval=5.0,
        )
        step_stats: dict = {}
        for b in bar:
            x = x_train[order[b * settings.batch_size : (b + 1) * settings.batch_size]]
            grads = gradient.gradients(machine, x, settings, state, generator, step_stats)
            machine = apply_update(machine, grads, velocity, lr, settings)
            check_finite(machine, epoch, b)
            if on_step is not None:
                on_step((epoch - 1) * n_batches + b + 1, gradient.step_metrics(state))
        metrics = _epoch_metrics(epoch, lr, time.perf_counter() - t0, step_stats)
        if settings.evaluate:
            metrics.update(
                evaluate_tap_log_likelihood(
                    machine, x_eval, settings.solver_settings, settings.dedup_tol
                )
            )
        metrics.update(weight_stats(machine))
        metrics["epoch_seconds"] = time.perf_counter() - t0
        # CPU time as well: on a shared machine the wall time says more about the load than the job
        metrics["epoch_cpu_seconds"] = time.process_time() - cpu0
        history.append(metrics)
        if settings.evaluate:
            print(_evaluation_line(epoch, metrics, x_eval.shape[0]), file=sys.stderr)
        if ckpt_dir is not None:
            checkpoint = Checkpoint(
                machine_state=machine_state(machine),
                epoch=epoch,
                history=history,
                velocity=[v.cpu() for v in velocity],
                generator=generator.get_state(),
                fingerprint=identity,
                settings=dataclasses.asdict(settings),
                state=None if state is None else gradient.save_state(state),
            )
            save_checkpoint(checkpoint, ckpt_dir / f"epoch_{epoch}.pt")
        if on_epoch is not None:
            on_epoch(epoch, metrics, machine)
        if progress:
            job.advance()
    return machine, history


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
