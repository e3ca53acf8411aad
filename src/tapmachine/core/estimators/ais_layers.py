"""One layer's operations in the AIS loop: ln Z increments and draws, with fast binary kernels."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from tapmachine.core.priors import Bernoulli, Prior, Spin

__all__ = ["RandomBytes", "AISLayer", "BinaryAISLayer", "ais_layer"]

#: Random bytes drawn per block of AIS steps (2 MB), see ``RandomBytes``.
_BLOCK_BYTES = 1 << 21


class RandomBytes:
    """Uniform random bytes for the binary layers, drawn ``block`` AIS steps at a time.

    Torch's CPU generator (serial mt19937) is the bottleneck of an AIS step if every unit gets a
    float uniform; one byte per unit plus an exact tie-break (``BinaryAISLayer.sample``) needs a
    quarter of the random bits. Bytes come from ``Tensor.random_`` on int64 words.
    """

    def __init__(self, sizes, n_runs, device, generator, n_steps):
        self.sizes = [s for s in sizes if s]
        per_step = n_runs * sum(self.sizes)
        self.block = max(1, min(n_steps, _BLOCK_BYTES // max(per_step, 1)))
        n_bytes = self.block * per_step
        self.words = torch.empty((n_bytes + 7) // 8, dtype=torch.int64, device=device)
        flat = self.words.view(torch.uint8)[:n_bytes]
        self.views = []
        start = 0
        for s in self.sizes:
            n = self.block * n_runs * s
            self.views.append(flat[start : start + n].view(self.block, n_runs, s))
            start += n
        self.generator = generator
        self.position = self.block

    def next(self) -> list[Tensor]:
        """The bytes of one step, one (n_runs, N) uint8 view per binary layer."""
        if self.position == self.block:
            self.words.random_(-(2**63), None, generator=self.generator)
            self.position = 0
        out = [v[self.position] for v in self.views]
        self.position += 1
        return out


class AISLayer:
    """One layer's AIS operations for any prior: ln Z(B, 0) differences and draws of Q(x; B, 0)."""

    needs_bytes = False

    def __init__(self, prior: Prior, n_runs: int, generator: torch.Generator):
        self.prior = prior
        self.size = prior.size
        self.generator = generator
        self.field = None

    def prepare(self, X: Tensor, beta: float) -> None:
        """Set the field to beta X (hidden layer, before the increment and the draw)."""
        self.field = beta * X

    def log_partition_increment(self, X: Tensor, beta_new: float, beta_old: float) -> Tensor:
        """-sum_j [ln Z_j(beta_new X_j, 0) - ln Z_j(beta_old X_j, 0)] per row (note the sign)."""
        zero = torch.zeros_like(X)
        lz_old = self.prior.log_partition(beta_old * X, zero)
        return (lz_old - self.prior.log_partition(beta_new * X, zero)).sum(-1)

    def visible_field(self, h: Tensor, W: Tensor, beta: float, B0: Tensor) -> None:
        """Set the visible field (1 - beta) B_0 + beta W h (one matmul)."""
        bias = torch.add(B0, B0, alpha=-beta)
        self.field = torch.addmm(bias, h, W.T, alpha=beta)

    def sample(self, out: Tensor, random_bytes: Tensor | None) -> Tensor:
        """Draw Q(x; field, 0) into ``out`` with the prior's sampler."""
        zero = torch.zeros_like(self.field)
        return out.copy_(self.prior.sample(self.field, zero, generator=self.generator))


class BinaryAISLayer(AISLayer):
    """Bernoulli ({0, 1}) or Spin ({-1, +1}) units: in-place kernels for the AIS loop.

    Increment. With s = 1 (Bernoulli) or 2 (spins) and p = sigm(s (U + B)) the probability of the
    upper state, ln Z(B) = softplus(s (U + B)) - (s - 1) B + const. For B_new - B_old = d X the
    identity softplus(y) - softplus(y') = -log1p(sigm(y) expm1(y' - y)) gives

        ln Z(B_new) - ln Z(B_old) = -log1p(p_new expm1(-s d X)) - (s - 1) d X,

    accurate in float32 (no difference of two large softplus values) and reusing p_new.

    Draws. With r a uniform byte, u' a uniform float and u = (r + u') / 256 (uniform on [0, 1)),
    [u < p] = [r + u' < T] for T = 256 p: it is 1 when r < floor(T), 0 when r > floor(T), and
    [u' < T - floor(T)] on a tie r = floor(T) (probability 1/256), for which alone a float is
    drawn. This is exact (to 2^-32, finer than a float32 uniform) with a quarter of the bits.
    """

    needs_bytes = True

    def __init__(self, prior: Prior, n_runs: int, generator: torch.Generator):
        super().__init__(prior, n_runs, generator)
        self.s = 2.0 if isinstance(prior, Spin) else 1.0
        self.sU = self.s * prior.U
        U = prior.U
        shape = (n_runs, prior.size)
        self.P = torch.empty(shape, dtype=U.dtype, device=U.device)
        self.E = torch.empty_like(self.P)
        self.bias = torch.empty_like(U)
        self.T = torch.empty_like(self.P)
        self.q16 = torch.empty(shape, dtype=torch.int16, device=U.device)
        self.q = torch.empty(shape, dtype=torch.uint8, device=U.device)
        self.tie = torch.empty(shape, dtype=torch.bool, device=U.device)
        if U.device.type == "cpu":
            self.np_T, self.np_q, self.np_tie = (
                t.numpy().reshape(-1) for t in (self.T, self.q, self.tie)
            )

    def prepare(self, X: Tensor, beta: float) -> None:
        torch.add(self.sU, X, alpha=self.s * beta, out=self.P)
        self.P.sigmoid_()

    def log_partition_increment(self, X: Tensor, beta_new: float, beta_old: float) -> Tensor:
        """Minus the increment (saves a negation); uses p from ``prepare(X, beta_new)``."""
        d = beta_new - beta_old
        E = torch.mul(X, -self.s * d, out=self.E)
        E.expm1_().mul_(self.P).log1p_()
        inc = E.sum(-1)
        if self.s == 2.0:
            inc.add_(X.sum(-1), alpha=d)
        return inc

    def visible_field(self, h: Tensor, W: Tensor, beta: float, B0: Tensor) -> None:
        """p = sigm(s (U + (1 - beta) B_0 + beta W h)), the bias folded into the matmul."""
        bias = torch.add(self.sU, B0, alpha=self.s * (1.0 - beta), out=self.bias)
        torch.addmm(bias, h, W.T, alpha=self.s * beta, out=self.P)
        self.P.sigmoid_()

    def set_field(self, field: Tensor) -> None:
        """p = sigm(s (U + field))."""
        torch.add(self.sU, field, alpha=self.s, out=self.P)
        self.P.sigmoid_()

    def sample(self, out: Tensor, random_bytes: Tensor | None) -> Tensor:
        if random_bytes is None:  # accelerators: their generators are fast, use float uniforms
            torch.lt(self.T.uniform_(generator=self.generator), self.P, out=out)
        else:  # CPU only (numpy views of the buffers)
            torch.mul(self.P, 256.0, out=self.T)
            self.q16.copy_(self.T).clamp_(max=255)  # floor(T) (T >= 0), 255 for T = 256
            self.q.copy_(self.q16)
            torch.lt(random_bytes, self.q, out=out)
            torch.eq(random_bytes, self.q, out=self.tie)
            idx = np.flatnonzero(self.np_tie)
            if idx.size:
                frac = self.np_T[idx] - self.np_q[idx]
                u = torch.rand(idx.size, generator=self.generator, dtype=self.T.dtype).numpy()
                out.numpy().reshape(-1)[idx] = u < frac
        if self.s == 2.0:
            out.mul_(2.0).sub_(1.0)
        return out


def ais_layer(prior: Prior, n_runs: int, generator: torch.Generator) -> AISLayer:
    if isinstance(prior, Bernoulli | Spin):
        return BinaryAISLayer(prior, n_runs, generator)
    return AISLayer(prior, n_runs, generator)
