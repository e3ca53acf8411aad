"""Estimators of the partition function and of likelihood surrogates (first paper, App. F).

- ``exact_log_partition``: ln Z by enumerating the smaller binary layer (small RBMs, tests).
- ``ais_log_partition``: ln Z by annealed importance sampling (Neal 2001) with Salakhutdinov &
  Murray's (2008) base-rate model and 14,501-temperature schedule, forward or reverse.
- ``pseudo_log_likelihood``: Besag's pseudo-likelihood, exact or over a random subset of sites.
- ``test_log_likelihood``: ln P(x) = -F(x) - ln Z given an estimate of ln Z.

ln Z is relative to the (normalised) unit priors throughout: W = 0 gives ln Z = 0.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import math

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import softplus

from tapmachine.core import eta
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Prior, Spin

__all__ = [
    "AISResult",
    "MAX_ENUMERATED_UNITS",
    "ais_log_partition",
    "base_rate_field",
    "exact_log_partition",
    "linear_schedule",
    "pseudo_log_likelihood",
    "salakhutdinov_schedule",
    "test_log_likelihood",
]

MAX_ENUMERATED_UNITS = 24


def _states(prior, n: int, start: int, stop: int, dtype, device) -> Tensor:
    """Rows start..stop-1 of the 2^n configurations of a binary or spin layer, float."""
    codes = torch.arange(start, stop, device=device)
    bits = (codes[:, None] >> torch.arange(n, device=device)) & 1
    bits = bits.to(dtype)
    return 2.0 * bits - 1.0 if isinstance(prior, Spin) else bits


def exact_log_partition(machine: BoltzmannMachine, chunk: int = 1 << 14) -> Tensor:
    """ln Z of an RBM by enumerating its smaller layer, in float64.

    With the enumerated layer y discrete and the other layer z summed (or integrated) out
    analytically, ln Z = logsumexp_y [ sum ln P_y(y) + sum ln Z_z(W y, 0) ], where ln Z_z is the
    prior's log-normaliser of Q with A = 0 (eq. 39's second term). The enumerated layer must be
    Bernoulli or Spin and have at most ``MAX_ENUMERATED_UNITS`` units.
    """
    if machine.n_layers != 2:
        raise ValueError("exact_log_partition enumerates one layer of an RBM (two layers only)")
    m = machine.to(dtype=torch.float64)
    discrete = [l for l in (0, 1) if isinstance(m.priors[l], Bernoulli | Spin)]
    if not discrete:
        raise ValueError("exact_log_partition needs a Bernoulli or Spin layer to enumerate")
    enum_layer = min(discrete, key=lambda l: m.sizes[l])
    other = 1 - enum_layer
    n = m.sizes[enum_layer]
    if n > MAX_ENUMERATED_UNITS:
        raise ValueError(
            f"exact_log_partition would enumerate 2^{n} states of layer {enum_layer}; "
            f"at most {MAX_ENUMERATED_UNITS} units are supported"
        )
    W = m.W if enum_layer == 0 else m.W.T
    prior_y, prior_z = m.priors[enum_layer], m.priors[other]
    parts = []
    for start in itertools.count(0, chunk):
        if start >= 2**n:
            break
        y = _states(prior_y, n, start, min(start + chunk, 2**n), torch.float64, m.device)
        B = y @ W
        log_w = prior_y.log_prob(y).sum(-1) + prior_z.log_partition(B, torch.zeros_like(B)).sum(-1)
        parts.append(torch.logsumexp(log_w, 0))
    return torch.logsumexp(torch.stack(parts), 0)


# --------------------------------------------------------------------------------------------
# Annealed importance sampling (App. F; Neal 2001; Salakhutdinov & Murray 2008)
# --------------------------------------------------------------------------------------------

#: Pixel means are clipped to [BASE_CLIP, 1 - BASE_CLIP] (spins: to +-(1 - 2 BASE_CLIP)) before
#: the base-rate field is fitted, so that empty or saturated pixels give a finite field.
BASE_CLIP = 1e-3

#: Random bytes drawn per block of AIS steps (2 MB), see ``_RandomBytes``.
_BLOCK_BYTES = 1 << 21


@dataclasses.dataclass(frozen=True)
class AISResult:
    """An AIS estimate of ln Z (relative to the priors, so that W = 0 gives ln Z = 0).

    Attributes
    ----------
    log_z : float
        The estimate: ln Z_0 + logmeanexp(log_weights) (forward), or ln Z_0 - logmeanexp(...)
        (reverse).
    stderr : float
        Delta-method standard error of ``log_z``: std(w) / (mean(w) sqrt(n_runs)), with the
        sample standard deviation (n_runs - 1 in the denominator) of the importance weights.
    lower, upper : float
        log_z - 3 stderr and log_z + 3 stderr.
    log_weights : Tensor
        The log importance weight of every run, float64, shape (n_runs,).
    n_betas : int
        Number of inverse temperatures, both ends included (n_betas - 2 Gibbs sweeps per run).
    log_z_base : float
        ln Z_0 of the base-rate model, exact in closed form.
    reverse : bool
        Whether the weights come from reverse AIS (annealing from the model to the base).
    """

    log_z: float
    stderr: float
    lower: float
    upper: float
    log_weights: Tensor
    n_betas: int
    log_z_base: float = 0.0
    reverse: bool = False


def salakhutdinov_schedule(dtype=torch.float64) -> Tensor:
    """The 14,501 inverse temperatures of Salakhutdinov & Murray (2008), used in App. F.

    Steps of 1e-3 on [0, 0.5), 1e-4 on [0.5, 0.9) and 1e-5 on [0.9, 1], both ends included
    (built with ``linspace`` so that no rounding accumulates).
    """
    parts = [
        torch.linspace(0.0, 0.5, 501, dtype=torch.float64)[:-1],
        torch.linspace(0.5, 0.9, 4001, dtype=torch.float64)[:-1],
        torch.linspace(0.9, 1.0, 10001, dtype=torch.float64),
    ]
    return torch.cat(parts).to(dtype)


def linear_schedule(n_betas: int, dtype=torch.float64) -> Tensor:
    """``n_betas`` equally spaced inverse temperatures from 0 to 1 (a short schedule for tests)."""
    return torch.linspace(0.0, 1.0, n_betas, dtype=dtype)


def base_rate_field(prior: Prior, data: Tensor | None = None) -> Tensor:
    """Field B_0 (shape (N,)) that tilts ``prior`` into the base-rate model of the visible layer.

    The base-rate model is Q(v; B_0, 0) = prod_i P_i(v_i) exp(B_0i v_i) / Z_i(B_0i, 0): independent
    units of the visible prior's family whose means equal the data means. For Bernoulli units its
    log-odds are logit(m_i) (Salakhutdinov & Murray 2008), so B_0 = logit(m_i) - U_i; for spins
    B_0 = atanh(m_i) - U_i; for any other prior B_0 solves f_a(B_0, 0) = m_i by bisection (f_a
    increases with B, its derivative being the variance f_c). The means m_i are clipped to
    [BASE_CLIP, 1 - BASE_CLIP] (binary) or +-(1 - 2 BASE_CLIP) (spins). Without data, B_0 = 0:
    the base model is the machine's own visible prior.
    """
    ref = next(iter(prior.params().values()))
    if data is None:
        return torch.zeros(prior.size, dtype=ref.dtype, device=ref.device)
    m = torch.as_tensor(data, dtype=torch.float64, device=ref.device).mean(0)
    params = {k: v.to(torch.float64) for k, v in prior.params().items()}
    if isinstance(prior, Bernoulli):
        m = m.clamp(BASE_CLIP, 1.0 - BASE_CLIP)
        field = torch.logit(m) - params["U"]
    elif isinstance(prior, Spin):
        m = m.clamp(-1.0 + 2 * BASE_CLIP, 1.0 - 2 * BASE_CLIP)
        field = torch.atanh(m) - params["U"]
    else:
        field = _match_mean(prior.replace(**params), m)
    return field.to(ref.dtype)


def _base_field(prior: Prior, data: Tensor | None, base) -> Tensor:
    """B_0 from an explicit field, a binary base prior, or the data (``base_rate_field``)."""
    if base is None:
        return base_rate_field(prior, data)
    if isinstance(base, Prior):
        if type(base) is not type(prior) or not isinstance(prior, Bernoulli | Spin):
            raise ValueError(
                "a base given as a prior must be a Bernoulli or Spin prior of the visible "
                "layer's type; pass a field B_0 otherwise"
            )
        return base.U - prior.U
    return torch.as_tensor(base)


def _match_mean(prior: Prior, m: Tensor, iterations: int = 80) -> Tensor:
    """Solve f_a(B, 0) = m for B elementwise by bracketing and bisection (float64)."""
    lo = torch.full_like(m, -1.0)
    hi = torch.full_like(m, 1.0)

    def mean(B):
        a = prior.moments(B, torch.zeros_like(B))[0]
        return torch.nan_to_num(a, nan=0.0)

    for _ in range(12):  # widen the bracket to [-2^12, 2^12] at most
        lo = torch.where(mean(lo) > m, lo * 2.0, lo)
        hi = torch.where(mean(hi) < m, hi * 2.0, hi)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        below = mean(mid) < m
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _child_generators(generator: torch.Generator | None, device, n: int) -> list[torch.Generator]:
    """``n`` generators seeded by draws from ``generator`` (the global RNG when None)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    seeds = torch.randint(0, 2**62, (n,), generator=generator, device=gen_device).tolist()
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]


class _RandomBytes:
    """Uniform random bytes for the binary layers, drawn ``block`` AIS steps at a time.

    Torch's CPU generator (serial mt19937) is the bottleneck of an AIS step if every unit gets a
    float uniform; one byte per unit plus an exact tie-break (``_BinaryLayer.sample``) needs a
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


class _Layer:
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


class _BinaryLayer(_Layer):
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


def _layer(prior: Prior, n_runs: int, generator: torch.Generator) -> _Layer:
    if isinstance(prior, Bernoulli | Spin):
        return _BinaryLayer(prior, n_runs, generator)
    return _Layer(prior, n_runs, generator)


def _anneal(
    machine: BoltzmannMachine,
    v: Tensor,
    betas: list[float],
    B0: Tensor,
    generators: list[torch.Generator],
    progress=None,
) -> Tensor:
    """The AIS loop: log-weights (float64) of the chains started at ``v`` along ``betas``;
    ``progress`` (``eta.report``'s, if given) counts the steps, in hundreds.

    With f_beta(v) = prod_i P_i(v_i) exp((1 - beta) B_0i v_i) prod_j Z^h_j(beta (W^T v)_j, 0)
    (the hidden layer summed out), step k adds ln f_{beta_k}(v) - ln f_{beta_{k-1}}(v) =
    -(beta_k - beta_{k-1}) B_0 . v + sum_j [ln Z^h_j(beta_k X_j) - ln Z^h_j(beta_{k-1} X_j)] with
    X = W^T v, then (except at the last beta) applies one Gibbs sweep at beta_k:
    h ~ Q^h(beta_k X, 0), v ~ Q^v((1 - beta_k) B_0 + beta_k W h, 0). Works for any schedule
    (forward 0 -> 1, or reverse 1 -> 0). Two matmuls per step (and the matrix-vector product
    v B_0 when B_0 != 0); buffers are preallocated.
    """
    W = machine.W
    R, nh = v.shape[0], W.shape[1]
    vis = _layer(machine.visible, R, generators[1])
    hid = _layer(machine.hidden, R, generators[1])
    use_base = bool(B0.abs().max() > 0)
    on_cpu = W.device.type == "cpu"
    sizes = [layer.size if (layer.needs_bytes and on_cpu) else 0 for layer in (hid, vis)]
    random_bytes = _RandomBytes(sizes, R, W.device, generators[0], len(betas) - 1)
    X = torch.empty(R, nh, dtype=W.dtype, device=W.device)
    h = torch.empty(R, nh, dtype=W.dtype, device=W.device)
    v = v.clone()
    logw = torch.zeros(R, dtype=torch.float64, device=W.device)
    last = len(betas) - 1
    for k in range(1, len(betas)):
        b_new, b_old = betas[k], betas[k - 1]
        torch.mm(v, W, out=X)
        hid.prepare(X, b_new)
        minus_inc = hid.log_partition_increment(X, b_new, b_old)
        if use_base:
            minus_inc.addmv_(v, B0, alpha=b_new - b_old)
        logw.sub_(minus_inc)
        if progress is not None and k % 100 == 0:
            progress.advance(100)
        if k == last:
            break
        r = random_bytes.next() if random_bytes.sizes else []
        hid.sample(h, r.pop(0) if sizes[0] else None)
        vis.visible_field(h, W, b_new, B0)
        vis.sample(v, r.pop(0) if sizes[1] else None)
    return logw


@functools.cache
def _openmp_backend() -> bool:
    """Whether ATen's intra-op backend is OpenMP (thread counts are then per calling thread)."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


def _anneal_groups(groups, parallel: bool) -> Tensor:
    """``_anneal`` for each group of runs (concatenated log-weights), concurrently on a CPU.

    Each worker thread runs one group with one torch thread (``torch.set_num_threads(1)``
    is per calling thread for the OpenMP and MKL pools, but also sets the count new threads
    start with, so the caller's count is restored at the end). Grad mode is thread-local, hence
    the explicit ``no_grad`` in the workers.
    """
    if len(groups) == 1 or not parallel or not _openmp_backend():
        return torch.cat([_anneal(*g) for g in groups])
    n_threads = torch.get_num_threads()

    def work(args):
        torch.set_num_threads(1)
        with torch.no_grad():
            return _anneal(*args)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(groups)) as pool:
            results = list(pool.map(work, groups))
    finally:
        torch.set_num_threads(n_threads)
    return torch.cat(results)


def _log_mean_exp_and_stderr(logw: Tensor) -> tuple[float, float]:
    """logmeanexp(logw) and the delta-method stderr std(w) / (mean(w) sqrt(n)), in log space."""
    n = logw.numel()
    shift = logw.max()
    w = torch.exp(logw - shift)
    mean = w.mean()
    log_mean = float(torch.log(mean) + shift)
    if n < 2:
        return log_mean, float("nan")
    return log_mean, float(w.std(correction=1) / mean / math.sqrt(n))


def _as_betas(betas) -> list[float]:
    b = salakhutdinov_schedule() if betas is None else torch.as_tensor(betas, dtype=torch.float64)
    b = b.flatten()
    if b.numel() < 2 or float(b[0]) != 0.0 or float(b[-1]) != 1.0:
        raise ValueError("an AIS schedule must start at beta = 0 and end at beta = 1")
    if bool((b[1:] < b[:-1]).any()):
        raise ValueError("an AIS schedule must be nondecreasing")
    return b.tolist()


@torch.no_grad()
def ais_log_partition(
    machine: BoltzmannMachine,
    data: Tensor | None = None,
    n_runs: int = 100,
    betas=None,
    generator: torch.Generator | None = None,
    base: Tensor | None = None,
    reverse: bool = False,
    n_groups: int | None = None,
) -> AISResult:
    """ln Z of an RBM by annealed importance sampling (App. F; Neal 2001; Salakhutdinov 2008).

    Intermediate distributions. With the visible prior P^v, the hidden prior P^h (both
    normalised) and a base field B_0 (``base_rate_field``), the unnormalised densities

        f_A(v, h) = P^v(v) exp(B_0 . v) P^h(h)            (base-rate model; hidden independent)
        f_B(v, h) = P^v(v) P^h(h) exp(v^T W h)             (the RBM, eq. 10)

    are interpolated geometrically, f_beta = f_A^(1 - beta) f_B^beta, i.e.

        f_beta(v, h) = P^v(v) P^h(h) exp((1 - beta) B_0 . v + beta v^T W h).

    The normalisers of P^v and P^h cancel in the interpolation, so Z_0 = prod_i Z^v_i(B_0i, 0) is
    exact in closed form (``Prior.log_partition``; 0 without data) and Z_1 = Z, normalised so that
    W = 0 gives ln Z = 0. Every conditional of f_beta is a tilted prior, so one Gibbs sweep at
    beta is h ~ Q^h(beta W^T v, 0), v ~ Q^v((1 - beta) B_0 + beta W h, 0), for every prior with a
    sampler. The hidden layer is summed out in the weights (``_anneal``), as in Salakhutdinov's
    code.

    Cost. Per temperature: the matmul v W (and v B_0), elementwise work on (n_runs, Nh), the
    matmul h W^T (the visible bias folded in), elementwise work on (n_runs, Nv), all in
    preallocated buffers and the machine's dtype (float32 by default). Binary layers draw one
    random byte per unit plus an exact tie-break (``_BinaryLayer``): torch's serial CPU
    generator would otherwise cost a third of the step. On a CPU the runs are split into
    ``n_groups`` independent single-threaded groups run concurrently (``_anneal_groups``).

    Estimate. The log-weights ln w_r of the ``n_runs`` chains (accumulated in float64) give
    ln Z = ln Z_0 + logmeanexp_r(ln w_r), whose standard error by the delta method is
    std(w) / (mean(w) sqrt(n_runs)) (sample std, computed after subtracting max ln w). Forward
    AIS is unbiased for Z, hence a stochastic lower bound on ln Z (Jensen).

    Parameters
    ----------
    machine : BoltzmannMachine
        An RBM (two layers); computations run in its dtype and on its device.
    data : Tensor, optional
        Training data (rows) to fit the base-rate model to; without it the base is the
        machine's own visible prior (B_0 = 0). Required with ``reverse=True``.
    n_runs : int
        Number of independent AIS chains, run as one (n_runs, N) batch.
    betas : sequence of float, optional
        Inverse temperatures from 0 to 1; default ``salakhutdinov_schedule()`` (14,501 values).
    generator : torch.Generator, optional
        Source of all randomness: child generators are seeded from it (one for the start states,
        two per group of runs: random bytes of binary layers, and tie-breaks / samplers of other
        priors), so results are reproducible for a given generator state and ``n_groups``.
    base : Tensor or Prior, optional
        An explicit base (overrides ``data`` for the base): a field B_0 of shape (Nv,), or a
        Bernoulli / Spin prior of the visible layer's type, for which B_0 = U_base - U.
    reverse : bool
        Reverse AIS (Burda et al. 2015): chains start at ``data`` rows (cycled to ``n_runs``
        rows, taken in a random order), taken as approximate samples of the model, and anneal
        from beta = 1 to 0. E[w_rev] = Z_0 / Z, so ln Z = ln Z_0 - logmeanexp(ln w_rev), which is
        a stochastic upper bound on ln Z when the start states are exact model samples.

    n_groups : int, optional
        The runs are split into this many groups (default: ``torch.get_num_threads()`` on a CPU,
        else 1), annealed independently; on a CPU each group runs in its own thread with one
        torch thread (the global torch thread count is restored afterwards). Independent
        single-threaded chains avoid the per-operation synchronisation of two-thread kernels and
        draw random numbers in parallel. The random streams depend on ``n_groups``.

    Returns
    -------
    AISResult
    """
    if machine.n_layers != 2:
        raise ValueError("ais_log_partition anneals an RBM (two layers)")
    if reverse and data is None:
        raise ValueError("reverse AIS starts from data rows: pass data")
    schedule = _as_betas(betas)
    dtype, device = machine.dtype, machine.device
    if n_groups is None:
        n_groups = torch.get_num_threads() if device.type == "cpu" else 1
    n_groups = max(1, min(int(n_groups), n_runs))
    gens = _child_generators(generator, device, 1 + 2 * n_groups)
    B0 = _base_field(machine.visible, data, base).to(dtype=dtype, device=device)
    log_z0 = float(machine.visible.log_partition(B0, torch.zeros_like(B0)).double().sum())
    if reverse:
        x = torch.as_tensor(data, dtype=dtype, device=device)
        order = torch.randperm(x.shape[0], generator=gens[0], device=device)
        v0 = x[order.repeat(-(-n_runs // x.shape[0]))[:n_runs]]
        schedule = schedule[::-1]
    else:
        B = B0.expand(n_runs, -1)
        v0 = machine.visible.sample(B, torch.zeros_like(B), generator=gens[0]).to(dtype)
    steps = (len(schedule) - 1) // 100 * 100 * n_groups
    with eta.report(steps, "AIS steps (all chain groups)") as p:
        groups = [
            (machine, v, schedule, B0, gens[1 + 2 * i : 3 + 2 * i], p)
            for i, v in enumerate(torch.tensor_split(v0, n_groups))
        ]
        logw = _anneal_groups(groups, parallel=device.type == "cpu")
    log_mean, stderr = _log_mean_exp_and_stderr(logw)
    log_z = log_z0 - log_mean if reverse else log_z0 + log_mean
    return AISResult(
        log_z=log_z,
        stderr=stderr,
        lower=log_z - 3.0 * stderr,
        upper=log_z + 3.0 * stderr,
        log_weights=logw,
        n_betas=len(schedule),
        log_z_base=log_z0,
        reverse=reverse,
    )


# --------------------------------------------------------------------------------------------
# Pseudo-likelihood and test log-likelihood (App. F)
# --------------------------------------------------------------------------------------------

#: Largest rows x sites x Nh block of flipped hidden fields held at once by the pseudo-likelihood.
PL_CHUNK_ELEMENTS = 1 << 22


def _flip_delta(prior: Prior, x: Tensor) -> Tensor:
    """x~ - x for every site flipped: 1 - 2x for {0, 1} units, -2x for {-1, +1} units."""
    return -2.0 * x if isinstance(prior, Spin) else 1.0 - 2.0 * x


@torch.no_grad()
def pseudo_log_likelihood(
    machine: BoltzmannMachine,
    x: Tensor,
    n_sites: int | None = None,
    generator: torch.Generator | None = None,
    sites: Tensor | None = None,
) -> Tensor:
    """Log pseudo-likelihood of each row of ``x`` (Besag 1975; App. F, Fig. 12), in nats.

    For binary (Bernoulli or Spin) visible units,

        PL(x) = sum_{i=1}^{Nv} ln P(x_i | x_{-i}),   P(x_i | x_{-i}) = sigm(F(x~i) - F(x)),

    with F = ``free_energy_visible`` and x~i the copy of x with unit i flipped; it is the full sum
    over the Nv sites (not divided by Nv; divide by Nv for a per-unit value). The flipped hidden
    fields are W^T x + (x~_i - x_i) W_i, so all sites of a chunk are computed in one batch of
    shape (rows, sites, Nh) (chunks of at most ``PL_CHUNK_ELEMENTS`` elements).

    Stochastic version (App. F: 100 of the 784 pixels): with ``n_sites`` < Nv, one random subset
    S of ``n_sites`` distinct sites (``torch.randperm(Nv, generator)[:n_sites]``, shared by all
    rows) gives the unbiased estimate (Nv / |S|) sum_{i in S} ln P(x_i | x_{-i}). ``sites`` fixes
    S explicitly (then ``n_sites`` is ignored).

    Returns
    -------
    Tensor
        Shape (rows,), dtype of the machine.
    """
    if machine.n_layers != 2:
        raise ValueError("pseudo_log_likelihood sums out one hidden layer: RBMs only")
    vis, hid = machine.visible, machine.hidden
    if not isinstance(vis, Bernoulli | Spin):
        raise NotImplementedError(
            f"pseudo_log_likelihood needs binary (Bernoulli or Spin) visible units, got "
            f"{type(vis).__name__}; use test_log_likelihood with an AIS estimate of ln Z instead"
        )
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    nv = vis.size
    if sites is None:
        if n_sites is None or n_sites >= nv:
            sites = torch.arange(nv, device=x.device)
        else:
            sites = torch.randperm(nv, generator=generator, device="cpu")[:n_sites].to(x.device)
    sites = torch.as_tensor(sites, device=x.device).long()
    W = machine.W
    B = x @ W
    zero = torch.zeros_like(B)
    lz = hid.log_partition(B, zero)  # (rows, Nh)
    delta = _flip_delta(vis, x)  # (rows, Nv)
    dlp_v = vis.log_prob(x + delta) - vis.log_prob(x)  # ln P_i(x~_i) - ln P_i(x_i), (rows, Nv)
    chunk = max(1, PL_CHUNK_ELEMENTS // max(1, x.shape[0] * hid.size))
    total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, sites.numel(), chunk):
        idx = sites[start : start + chunk]
        Bf = B[:, None, :] + delta[:, idx, None] * W[idx][None, :, :]  # (rows, c, Nh)
        dlz = (hid.log_partition(Bf, torch.zeros_like(Bf)) - lz[:, None, :]).sum(-1)
        # ln P(x_i | x_-i) = -softplus(F(x) - F(x~i)), F(x) - F(x~i) = dlp_v + dlz.
        total += -softplus(dlp_v[:, idx] + dlz).sum(-1)
    return total * (nv / sites.numel())


@torch.no_grad()
def test_log_likelihood(machine: BoltzmannMachine, x: Tensor, log_z) -> Tensor:
    """ln P(x) = -F(x) - ln Z per row (eq. 39's exact form), for ln Z from AIS or enumeration.

    ``log_z`` may be a number, a 0-d tensor or an ``AISResult``.
    """
    if isinstance(log_z, AISResult):
        log_z = log_z.log_z
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    return -machine.free_energy_visible(x) - log_z


test_log_likelihood.__test__ = False  # not a pytest test, despite its name
