"""Greedy layer-wise pretraining of deep TAP machines (first paper, App. E.2, Alg. 4).

Alg. 4 first trains the RBM (visible, h1) by Alg. 2 on the data, then for every further hidden
layer l >= 2 the RBM (h_{l-1}, h_l) by Alg. 2 on the representation H^(l-1) of the data in
layer l-1, and finally trains all couplings jointly on free and clamped TAP solutions (App. E.1,
eqs. 121-129; ``tapmachine.core.tap.tap_gradients`` with ``clamped_state``, run by the ordinary
training loop ``tapmachine.train.loop.train`` on the layered machine).

How the lower layer's output feeds the next RBM. Alg. 4 writes H^(l-1) ~ P(h^(l) | H^(l-1), ...),
a draw of the layer given the one below. TAP machines replace samples by magnetisations
throughout, and the clamped TAP solution of an RBM is exact and closed-form (App. E): the mean
a_l = f_a(W_{l-1}^T a_{l-1}, 0) of each unit given the layer below. We feed these
magnetisations (deterministic, no sampling noise) as the next RBM's training rows; binary
priors accept fractional inputs (ln P(x) = x ln sigm(U) + (1 - x) ln sigm(-U) is the mean of
the log-prior under independent units with those means). Each upper RBM's visible prior starts
from the means of its inputs, as Alg. 2 does for data.

Weight scaling. Salakhutdinov & Hinton (2009) double the bottom-up (or top-down) input of the
first and last RBMs during pretraining and halve the middle weights when stacking, because in
the DBM a middle layer receives input from both neighbours, roughly twice the field it saw
in its RBM. Alg. 4 of the paper does neither: it stacks the pretrained couplings unchanged and
leaves the correction to joint training. We follow Alg. 4 (no scaling).

Composition. Layer 0 keeps the first RBM's visible prior; hidden layer l takes the prior it had
as the hidden layer of RBM l (its visible prior in RBM l+1, fitted to the same layer's
magnetisations from above, is discarded), and W_l is RBM l's coupling matrix.

Departure (config key ``pretrain.inputs``): the default ``magnetisations`` follows the TAP
machines' reading; ``samples`` is Alg. 4's literal draw (one draw per training row, made
once), the value in ``workflow/config/paper.yaml``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.train.build import visible_prior
from tapmachine.train.loop import train
from tapmachine.train.settings import PretrainSettings, TrainSettings

__all__ = ["layer_inputs", "prefixed", "pretrain", "pretrain_from_spec"]


def layer_inputs(rbm: BoltzmannMachine, x: Tensor, sample: bool = False, generator=None) -> Tensor:
    """The clamped TAP (exact) magnetisations f_a(W^T x, 0) of an RBM's hidden layer, or with
    ``sample`` one draw of the hidden units from P(h | x) (``Prior.sample``)."""
    with torch.no_grad():
        B = x @ rbm.W
        if sample:
            return rbm.hidden.sample(B, torch.zeros_like(B), generator=generator)
        return rbm.hidden.moments(B, torch.zeros_like(B))[0]


def _input_prior(template, x: Tensor):
    """A visible prior of ``template``'s family fitted to the means of ``x`` (Alg. 2's init)."""
    if isinstance(template, Bernoulli):
        return visible_prior({"prior": "bernoulli"}, x)
    if isinstance(template, Spin):
        return visible_prior({"prior": "spin"}, x)
    raise ValueError(
        f"greedy pretraining feeds magnetisations into binary layers; got {type(template).__name__}"
    )


def pretrain(
    machine: BoltzmannMachine,
    x: Tensor,
    settings: TrainSettings,
    pre: PretrainSettings,
    generator: torch.Generator,
    checkpoint_dir: str | Path | None = None,
    on_epoch=None,
    progress: bool = True,
) -> tuple[BoltzmannMachine, list[list[dict]]]:
    """Greedy pretraining of Alg. 4: the stacked machine and each RBM's metrics per epoch.

    ``machine`` gives the layer sizes, priors and initial couplings (``build_machine``);
    ``settings`` the optimiser of every RBM, with ``pre.epochs`` and ``pre.learning_rate``
    replacing its epochs and step size and TAP inference. RBM l is checkpointed in
    ``checkpoint_dir/layer_{l+1}`` (resumable like any training). ``on_epoch(layer, epoch,
    metrics)`` is called after each RBM epoch.
    """
    rbm_settings = dataclasses.replace(
        settings, epochs=pre.epochs, learning_rate=pre.learning_rate, inference="tap"
    )
    inputs = x
    weights, priors, histories = [], [machine.priors[0]], []
    for l in range(len(machine.weights)):
        visible = machine.priors[0] if l == 0 else _input_prior(machine.priors[l], inputs)
        rbm = RBM(machine.weights[l], visible, machine.priors[l + 1])
        ckpt = None if checkpoint_dir is None else Path(checkpoint_dir) / f"layer_{l + 1}"

        def callback(epoch, metrics, _machine, layer=l + 1):
            if on_epoch is not None:
                on_epoch(layer, epoch, metrics)

        rbm, history = train(
            rbm, inputs, rbm_settings, generator, ckpt, on_epoch=callback, progress=progress
        )
        if l == 0:
            priors[0] = rbm.visible
        priors.append(rbm.hidden)
        weights.append(rbm.W)
        histories.append(history)
        inputs = layer_inputs(rbm, inputs, pre.inputs == "samples", generator)
    return machine.replace(priors=priors, weights=weights), histories


def prefixed(layer: int, metrics: dict) -> dict:
    """A greedy RBM's epoch metrics named ``pretrain_l{layer}.<metric>`` (for logging)."""
    return {f"pretrain_l{layer}.{k}": v for k, v in metrics.items() if k != "epoch"}


def pretrain_from_spec(machine, x, spec: dict, settings, generator, outdir, on_epoch=None):
    """``pretrain`` with a model's ``pretrain:`` settings, checkpoints in ``outdir/pretrain``;
    ``on_epoch(layer, epoch, metrics)`` after each greedy RBM epoch (e.g. logging
    ``prefixed(layer, metrics)`` with the epoch as step). Returns the stacked machine."""
    pre = PretrainSettings.from_spec(spec["pretrain"])
    print(
        f"greedy pretraining: {pre.epochs} epochs per RBM at lr {pre.learning_rate}, "
        f"inputs {pre.inputs}",
        file=sys.stderr,
    )
    stacked, _ = pretrain(
        machine, x, settings, pre, generator, Path(outdir) / "pretrain", on_epoch=on_epoch
    )
    return stacked
