"""Unit priors of generalised RBMs (first paper, App. C).

Every prior P(x; theta) describes one layer of units; each parameter is a tensor of shape (N,)
(one value per unit) and every method broadcasts over leading batch dimensions. The central object
is the tilted distribution

    Q(x; B, A, theta) = P(x; theta) exp(-A x^2 / 2 + B x) / Z(B, A; theta),

whose mean and variance are the TAP update functions f_a, f_c (eqs. 78, 81, 113-114) and whose
normaliser ``Z(B, A; theta)`` -- relative to P, so that Z(0, 0) = 1 -- enters the TAP free energy
(eq. 36) and the log-likelihood (eq. 39).
"""

from __future__ import annotations

import abc
import dataclasses
import math

import torch
from torch import Tensor
from torch.nn.functional import logsigmoid, softplus

__all__ = ["Prior", "Bernoulli", "Spin"]


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
        return self.replace(**{k: v.to(device=device, dtype=dtype) for k, v in self.params().items()})

    def config(self) -> dict:
        """The non-tensor fields (bounds): enough, with ``params``, to rebuild the prior."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self.param_names
        }

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

    def mean(self, B: Tensor) -> Tensor:
        """Conditional mean f(B) = f_a(B, 0) of eq. (15)."""
        return self.moments(B, torch.zeros_like(B))[0]


@dataclasses.dataclass(frozen=True, eq=False)
class Bernoulli(Prior):
    """Binary {0, 1} units, P(x; U) = exp(U x) / (1 + e^U) (eqs. 110-118)."""

    U: Tensor
    param_names = ("U",)

    def _field(self, B: Tensor, A: Tensor) -> Tensor:
        # x^2 = x on {0, 1}, so the quadratic tilt is a shift of the field (eq. 113).
        return self.U + B - 0.5 * A

    def moments(self, B, A):
        a = torch.sigmoid(self._field(B, A))
        return a, a * (1.0 - a)

    def log_partition(self, B, A):
        """Eq. (112): ln(1 + e^{U + B - A/2}) - ln(1 + e^U)."""
        return softplus(self._field(B, A)) - softplus(self.U)

    def log_prob(self, x):
        return x * logsigmoid(self.U) + (1.0 - x) * logsigmoid(-self.U)

    def grad_log_partition(self, B, A):
        """Eq. (116): f_a(B, A; U) - sigm(U)."""
        return {"U": torch.sigmoid(self._field(B, A)) - torch.sigmoid(self.U)}

    def grad_log_prob(self, x):
        """Eq. (115): x - sigm(U)."""
        return {"U": x - torch.sigmoid(self.U)}

    def sample(self, B, A, generator=None):
        p = torch.sigmoid(self._field(B, A))
        return torch.bernoulli(p, generator=generator)


@dataclasses.dataclass(frozen=True, eq=False)
class Spin(Prior):
    """Ising {-1, +1} units, P(x; U) = exp(U x) / (2 cosh U).

    Since x^2 = 1 the quadratic tilt A only enters the normaliser as a constant e^{-A/2}; it
    cancels in Q, so f_a = tanh(U + B) and f_c = 1 - f_a^2.
    """

    U: Tensor
    param_names = ("U",)

    def moments(self, B, A):
        a = torch.tanh(self.U + B)
        return a, 1.0 - a * a

    def log_partition(self, B, A):
        """ln cosh(U + B) - ln cosh(U) - A/2."""
        return _log_cosh(self.U + B) - _log_cosh(self.U) - 0.5 * A

    def log_prob(self, x):
        return self.U * x - _log_cosh(self.U) - math.log(2.0)

    def grad_log_partition(self, B, A):
        return {"U": torch.tanh(self.U + B) - torch.tanh(self.U) + 0.0 * A}

    def grad_log_prob(self, x):
        return {"U": x - torch.tanh(self.U)}

    def sample(self, B, A, generator=None):
        p = torch.sigmoid(2.0 * (self.U + B)) + 0.0 * A
        return 2.0 * torch.bernoulli(p, generator=generator) - 1.0


def _log_cosh(z: Tensor) -> Tensor:
    """ln cosh z without overflow: |z| + ln(1 + e^{-2|z|}) - ln 2."""
    z = z.abs()
    return z + softplus(-2.0 * z) - math.log(2.0)
