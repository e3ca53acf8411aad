"""Unit priors of generalised RBMs (first paper, App. C).

Every prior P(x; theta) describes one layer of units; each parameter is a tensor of shape (N,)
(one value per unit) and every method broadcasts over leading batch dimensions. The central object
is the tilted distribution

    Q(x; B, A, theta) = P(x; theta) exp(-A x^2 / 2 + B x) / Z(B, A; theta),

whose mean and variance are the TAP update functions f_a, f_c (eqs. 78, 81, 113-114) and whose
normaliser ``Z(B, A; theta)`` -- relative to P, so that Z(0, 0) = 1 -- enters the TAP free energy
(eq. 36) and the log-likelihood (eq. 39).

One concept per module: ``base`` (the Prior interface), ``binary`` (Bernoulli, Spin),
``truncnorm`` (the special functions of the tilted truncated Gaussian) and ``truncated``
(TruncatedGaussian, TruncatedGaussBernoulli).
"""

from tapmachine.core.priors.base import Prior
from tapmachine.core.priors.binary import Bernoulli, Spin
from tapmachine.core.priors.truncated import TruncatedGaussBernoulli, TruncatedGaussian

__all__ = ["Prior", "Bernoulli", "Spin", "TruncatedGaussian", "TruncatedGaussBernoulli"]
