"""The interface every unit prior implements (first paper, App. C)."""

from __future__ import annotations

import abc
import dataclasses

import torch
from torch import Tensor


def draw_device(generator: torch.Generator | None, like: Tensor) -> torch.device:
    """Where a prior draws its random numbers: on ``generator``'s device, else on ``like``'s.

    torch draws only from a generator of the output's device, and the training stream of an RBM
    is a CPU generator whatever the machine's device (its weights and batches are the same on
    every device); its draws are made on the CPU and moved.
    """
    return like.device if generator is None else generator.device


@dataclasses.dataclass(frozen=True, eq=False)
class Prior(abc.ABC):
    """Interface shared by every unit prior.

    Subclasses are frozen dataclasses whose tensor fields named in ``param_names`` are the
    trainable parameters; other fields (bounds) are fixed. ``replace`` returns an updated copy, so
    training never mutates a prior in place.
    """

    param_names = ()

    @property
    def size(self) -> int:
        """Number of units N."""
        return getattr(self, self.param_names[0]).shape[-1]

    def params(self) -> dict[str, Tensor]:
        """The trainable parameters by name."""
        return {name: getattr(self, name) for name in self.param_names}

    def replace(self, **changes) -> Prior:
        """A copy with some fields replaced (parameters or bounds)."""
        return dataclasses.replace(self, **changes)

    def to(self, device=None, dtype=None) -> Prior:
        """A copy with every parameter tensor moved to ``device``/``dtype``."""
        return self.replace(
            **{k: v.to(device=device, dtype=dtype) for k, v in self.params().items()}
        )

    def config(self) -> dict:
        """The non-tensor fields (bounds): enough, with ``params``, to rebuild the prior."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self.param_names
        }

    #: The values a unit takes, as an error message writes them.
    support = ""

    def in_support(self, x: Tensor) -> Tensor:
        """Elementwise: whether x is a value the units take (NaN is not)."""
        raise NotImplementedError(f"{type(self).__name__} does not say its support")

    @abc.abstractmethod
    def moments(self, B: Tensor, A: Tensor) -> tuple[Tensor, Tensor]:
        """Mean f_a and variance f_c of Q(x; B, A)."""

    @abc.abstractmethod
    def log_partition(self, B: Tensor, A: Tensor) -> Tensor:
        """ln Z(B, A): log normaliser of Q relative to P, so ln Z(0, 0) = 0."""

    @abc.abstractmethod
    def log_prob(self, x: Tensor) -> Tensor:
        """ln P(x; theta), elementwise (a log-density for continuous units)."""

    @abc.abstractmethod
    def grad_log_partition(self, B: Tensor, A: Tensor) -> dict[str, Tensor]:
        """d ln Z(B, A) / d theta for each parameter, elementwise (shape of B)."""

    @abc.abstractmethod
    def grad_log_prob(self, x: Tensor) -> dict[str, Tensor]:
        """d ln P(x; theta) / d theta for each parameter, elementwise (shape of x)."""

    @abc.abstractmethod
    def sample(self, B: Tensor, A: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One draw from Q(x; B, A) per element."""

    def energy_normaliser(self) -> Tensor:
        """ln sum_x e^{U x} per unit: how far the usual binary-RBM energy's ln Z lies above the
        one of eq. (36) with normalised priors (eqs. 111-112 divide by Z_B = this).

        Defined for binary units only, whose Boltzmann form P(x; U) = e^{U x} / Z_B (eq. 111)
        names the unnormalised weight; the truncated priors have no such energy convention.
        """
        raise NotImplementedError(f"{type(self).__name__} units have no binary-RBM energy")

    def mean(self, B: Tensor) -> Tensor:
        """Conditional mean f(B) = f_a(B, 0) of eq. (15)."""
        return self.moments(B, torch.zeros_like(B))[0]
