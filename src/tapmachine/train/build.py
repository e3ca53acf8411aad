"""From a config entry to the initial machine of an RBM or deep TAP machine (first paper, Alg. 2's
initialisation; the gradient methods' default ``build``, ``train.methods``), and a trained machine
back from its file."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core import priors as priors_module
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Prior, Spin
from tapmachine.io.modelfile import MODEL_FILE, Checkpoint, ModelFile
from tapmachine.train.settings import TrainingError, TrainSettings

__all__ = [
    "visible_prior",
    "hidden_prior",
    "build_machine",
    "build_from_spec",
    "load_model",
]


def visible_prior(spec: dict, x: Tensor) -> Prior:
    """Visible prior with parameters from the data means (Alg. 2: theta^(0) <- X)."""
    kind = spec["prior"]
    mean = x.mean(0)
    if kind == "bernoulli":
        m = mean.clamp(1e-3, 1 - 1e-3)
        return Bernoulli(torch.log(m) - torch.log1p(-m))
    if kind == "spin":
        return Spin(torch.atanh(mean.clamp(-0.999, 0.999)))
    lower, upper = float(spec.get("lower", 0.0)), float(spec.get("upper", 1.0))
    if kind == "truncated_gaussian":
        # one row has no sample variance (NaN): the floor then, as for a constant column
        var = x.var(0) if x.shape[0] > 1 else torch.zeros_like(mean)
        V = 1.0 / var.clamp_min(1e-2)
        return priors_module.TruncatedGaussian(V * mean, V, lower, upper)
    if kind == "truncated_gauss_bernoulli":
        nonzero = (x != 0).to(x.dtype)
        rho = nonzero.mean(0).clamp(1e-3, 1 - 1e-3)
        count = nonzero.sum(0).clamp_min(1.0)
        mu = (x * nonzero).sum(0) / count
        var = ((x - mu) ** 2 * nonzero).sum(0) / count
        V = 1.0 / var.clamp_min(1e-2)
        return priors_module.TruncatedGaussBernoulli(rho, V * mu, V, lower, upper)
    raise TrainingError(f"unknown prior {kind!r}")


def hidden_prior(spec: dict, n: int, dtype, device) -> Prior:
    """Hidden prior at its neutral point: zero fields, unit precision, rho = 1/2."""
    zeros = torch.zeros(n, dtype=dtype, device=device)
    kind = spec["prior"]
    lower, upper = float(spec.get("lower", 0.0)), float(spec.get("upper", 1.0))
    if kind == "bernoulli":
        return Bernoulli(zeros)
    if kind == "spin":
        return Spin(zeros)
    if kind == "truncated_gaussian":
        return priors_module.TruncatedGaussian(zeros, zeros + 1.0, lower, upper)
    if kind == "truncated_gauss_bernoulli":
        return priors_module.TruncatedGaussBernoulli(zeros + 0.5, zeros, zeros + 1.0, lower, upper)
    raise TrainingError(f"unknown prior {kind!r}")


def build_machine(spec: dict, x: Tensor, weight_std: float, generator) -> BoltzmannMachine:
    """Alg. 2's initial machine: W ~ N(0, weight_std^2), visible priors from the data means."""
    layers = [spec["visible"], *spec["hidden"]]
    sizes = [x.shape[1], *(h["units"] for h in spec["hidden"])]
    priors = [visible_prior(layers[0], x)]
    priors += [
        hidden_prior(s, n, x.dtype, x.device) for s, n in zip(layers[1:], sizes[1:], strict=True)
    ]
    weights = [
        weight_std
        * torch.randn(n0, n1, generator=generator, dtype=x.dtype, device=generator.device).to(
            x.device
        )
        for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    return BoltzmannMachine(priors=tuple(priors), weights=tuple(weights))


def build_from_spec(
    spec: dict, x: Tensor, settings: TrainSettings, generator: torch.Generator
) -> BoltzmannMachine:
    """``build_machine`` of a config entry with its settings' ``weight_init_std``; with
    ``visible_init="neutral"`` the visible prior starts at its neutral point instead of the data
    means (``hidden_prior``: zero fields), as Salakhutdinov's ``rbm.m`` starts the visible biases
    at 0 for the RBMs of Salakhutdinov & Murray (2008)."""
    machine = build_machine(spec, x, settings.weight_init_std, generator)
    if settings.visible_init == "data_mean":
        return machine
    neutral = hidden_prior(spec["visible"], x.shape[1], x.dtype, x.device)
    return machine.replace(priors=[neutral, *machine.priors[1:]])


def load_model(path, device="cpu", dtype=None) -> BoltzmannMachine:
    """The machine saved in a ``model.pt`` or a checkpoint (``modelfile`` reads it)."""
    blob = ModelFile.load(path) if Path(path).name == MODEL_FILE else Checkpoint.load(path)
    return blob.machine(device=device, dtype=dtype)
