"""Binary units: Bernoulli {0, 1} (eqs. 110-118) and spins {-1, +1}."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor
from torch.nn.functional import logsigmoid, softplus

from tapmachine.core.priors.base import Prior, draw_device


@dataclasses.dataclass(frozen=True, eq=False)
class Bernoulli(Prior):
    """Binary {0, 1} units, P(x; U) = exp(U x) / (1 + e^U) (eqs. 110-118)."""

    U: Tensor
    param_names = ("U",)
    support = "{0, 1}"

    def in_support(self, x):
        return (x == 0) | (x == 1)

    def _field(self, B: Tensor, A: Tensor) -> Tensor:
        # x^2 = x on {0, 1}, so the quadratic tilt is a shift of the field (eq. 113).
        field = torch.add(B, self.U)
        if A.shape == field.shape and A.dtype == field.dtype:  # the TAP iteration: in place
            return field.add_(A, alpha=-0.5)
        return field - 0.5 * A

    def moments(self, B, A):
        """Eqs. (113-114): a = sigm(U + B - A/2), c = a (1 - a)."""
        a = self._field(B, A).sigmoid_()
        return a, torch.addcmul(a, a, a, value=-1.0)

    def log_partition(self, B, A):
        """Eq. (112): ln(1 + e^{U + B - A/2}) - ln(1 + e^U)."""
        return softplus(self._field(B, A)) - softplus(self.U)

    def log_prob(self, x):
        return x * logsigmoid(self.U) + (1.0 - x) * logsigmoid(-self.U)

    def energy_normaliser(self):
        """ln Z_B = ln(1 + e^U) (eq. 111)."""
        return softplus(self.U)

    def grad_log_partition(self, B, A):
        """Eq. (116): f_a(B, A; U) - sigm(U)."""
        return {"U": torch.sigmoid(self._field(B, A)) - torch.sigmoid(self.U)}

    def grad_log_prob(self, x):
        """Eq. (115): x - sigm(U)."""
        return {"U": x - torch.sigmoid(self.U)}

    def sample(self, B, A, generator=None):
        p = torch.sigmoid(self._field(B, A))
        return torch.bernoulli(p.to(draw_device(generator, p)), generator=generator).to(p.device)


@dataclasses.dataclass(frozen=True, eq=False)
class Spin(Prior):
    """Ising {-1, +1} units, P(x; U) = exp(U x) / (2 cosh U).

    Since x^2 = 1 the quadratic tilt A only enters the normaliser as a constant e^{-A/2}; it
    cancels in Q, so f_a = tanh(U + B) and f_c = 1 - f_a^2.
    """

    U: Tensor
    param_names = ("U",)
    support = "{-1, 1}"

    def in_support(self, x):
        return (x == -1) | (x == 1)

    def moments(self, B, A):
        a = torch.tanh(self.U + B)
        return a, 1.0 - a * a

    def log_partition(self, B, A):
        """ln cosh(U + B) - ln cosh(U) - A/2."""
        return _log_cosh(self.U + B) - _log_cosh(self.U) - 0.5 * A

    def log_prob(self, x):
        return self.U * x - _log_cosh(self.U) - math.log(2.0)

    def energy_normaliser(self):
        """ln(2 cosh U) = ln(e^U + e^{-U})."""
        return _log_cosh(self.U) + math.log(2.0)

    def grad_log_partition(self, B, A):
        return {"U": torch.tanh(self.U + B) - torch.tanh(self.U) + 0.0 * A}

    def grad_log_prob(self, x):
        return {"U": x - torch.tanh(self.U)}

    def sample(self, B, A, generator=None):
        p = torch.sigmoid(2.0 * (self.U + B)) + 0.0 * A
        ones = torch.bernoulli(p.to(draw_device(generator, p)), generator=generator)
        return 2.0 * ones.to(p.device) - 1.0


def _log_cosh(z: Tensor) -> Tensor:
    """ln cosh z without overflow: |z| + ln(1 + e^{-2|z|}) - ln 2."""
    z = z.abs()
    return z + softplus(-2.0 * z) - math.log(2.0)
