"""Layered Boltzmann machines: RBMs (two layers) and DBMs (more).

The joint distribution of a machine with layers x_0 (visible), x_1, ..., x_L is

    P(x) = (1/Z) prod_l P_l(x_l; theta_l) exp( sum_l x_l^T W_l x_{l+1} ),

with unit priors P_l (``tapmachine.core.priors``) and couplings W_l of shape (N_l, N_{l+1}) between
neighbouring layers (first paper eq. 10 for L = 1, App. E for L > 1). Layers are arrays of shape
(batch, N_l).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from tapmachine.core.priors import Prior

__all__ = ["BoltzmannMachine", "RBM"]


@dataclasses.dataclass(frozen=True, eq=False)
class BoltzmannMachine:
    """Priors per layer (layer 0 is visible) and the couplings between neighbouring layers."""

    priors: tuple[Prior, ...]
    weights: tuple[Tensor, ...]

    def __post_init__(self):
        object.__setattr__(self, "priors", tuple(self.priors))
        object.__setattr__(self, "weights", tuple(self.weights))
        if len(self.priors) != len(self.weights) + 1:
            raise ValueError(
                f"a machine with {len(self.weights)} coupling matrices needs "
                f"{len(self.weights) + 1} priors, got {len(self.priors)}"
            )
        for l, W in enumerate(self.weights):
            want = (self.priors[l].size, self.priors[l + 1].size)
            if tuple(W.shape) != want:
                raise ValueError(f"weights[{l}] has shape {tuple(W.shape)}, expected {want}")

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(p.size for p in self.priors)

    @property
    def n_layers(self) -> int:
        return len(self.priors)

    @property
    def W(self) -> Tensor:
        """The first coupling matrix (visible x first hidden layer)."""
        return self.weights[0]

    @property
    def visible(self) -> Prior:
        return self.priors[0]

    @property
    def hidden(self) -> Prior:
        """The first hidden layer's prior."""
        return self.priors[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.weights[0].dtype

    @property
    def device(self) -> torch.device:
        return self.weights[0].device

    def replace(
        self, priors: Sequence[Prior] | None = None, weights: Sequence[Tensor] | None = None
    ):
        """A copy with new priors and/or weights."""
        return BoltzmannMachine(
            priors=self.priors if priors is None else tuple(priors),
            weights=self.weights if weights is None else tuple(weights),
        )

    def to(self, device=None, dtype=None) -> BoltzmannMachine:
        return BoltzmannMachine(
            priors=tuple(p.to(device, dtype) for p in self.priors),
            weights=tuple(W.to(device=device, dtype=dtype) for W in self.weights),
        )

    def input_to(self, layer: int, xs: Sequence[Tensor]) -> Tensor:
        """Field on layer ``layer`` from its neighbours: W_{l-1}^T x_{l-1} + W_l x_{l+1}, as one
        new tensor (the second product is added into the first in place)."""
        field = xs[layer - 1] @ self.weights[layer - 1] if layer > 0 else None
        if layer < len(self.weights):
            up = xs[layer + 1] @ self.weights[layer].T
            field = up if field is None else field.add_(up)
        return 0.0 if field is None else field

    def energy(self, xs: Sequence[Tensor]) -> Tensor:
        """-ln of the unnormalised probability, per sample: -sum x_l W_l x_{l+1} - sum ln P_l."""
        e = 0.0
        for l, W in enumerate(self.weights):
            e = e - ((xs[l] @ W) * xs[l + 1]).sum(-1)
        for prior, x in zip(self.priors, xs, strict=True):
            e = e - prior.log_prob(x).sum(-1)
        return e

    def sample_layer(self, layer: int, xs: Sequence[Tensor], generator=None) -> Tensor:
        """Draw layer ``layer`` from its conditional given its neighbours."""
        B = self.input_to(layer, xs)
        return self.priors[layer].sample(B, torch.zeros_like(B), generator=generator)

    def gibbs_step(self, xs: Sequence[Tensor], generator=None, clamp_visible: bool = False):
        """One sweep of block Gibbs sampling: odd layers, then even layers (visible last)."""
        xs = list(xs)
        for parity in (1, 0):
            for l in range(parity, self.n_layers, 2):
                if l == 0 and clamp_visible:
                    continue
                xs[l] = self.sample_layer(l, xs, generator)
        return xs

    def free_energy_visible(self, x: Tensor) -> Tensor:
        """For an RBM, -ln sum_h of the unnormalised probability of x: ln P(x) = -F(x) - ln Z."""
        if self.n_layers != 2:
            raise ValueError("free_energy_visible sums out one hidden layer: RBMs only")
        B = x @ self.W
        return -self.visible.log_prob(x).sum(-1) - self.hidden.log_partition(
            B, torch.zeros_like(B)
        ).sum(-1)


def RBM(weights: Tensor, visible: Prior, hidden: Prior) -> BoltzmannMachine:
    """A two-layer machine; ``weights`` is Nv x Nh with W_ij coupling visible i to hidden j."""
    return BoltzmannMachine(priors=(visible, hidden), weights=(weights,))
