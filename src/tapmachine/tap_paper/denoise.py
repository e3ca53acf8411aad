"""Denoising with a trained machine as a structured prior (first paper, Sec. VII.4, eqs. 43-47).

Binary symmetric channel (BSC): a binary image x in {0, 1}^N is observed as y with each bit flipped
independently with probability p (eq. 43). As an exponential family in x (eq. 44),

    P(y | x) proportional to exp(sum_i D_i x_i),   D_i = ln((1 - p) / p) (2 y_i - 1).

Eqs. 44 and 46 as printed carry ln(p / (1 - p)); with flips of probability p < 1/2 an observed 1
makes x_i = 1 *more* likely, so D_i > 0 when y_i = 1, and the paper's own text (at p = 0 the
estimate is the observation, at p = 0.5 the prior means) holds only with the sign used here.
``tests/tap_paper/test_denoise.py`` checks the sign against the exact posterior of one bit.

Estimators, all batched over images (rows):

- ``ope``: the optimal pointwise estimator of eq. 46, the exact posterior mean under the factorised
  prior with per-site empirical magnetisations m_i (clipped to [clip, 1 - clip]):
  sigm(ln(m_i / (1 - m_i)) + D_i).
- ``nearest_neighbours``: the mean of the k training images nearest in Hamming distance (k = 1 in
  Fig. 8), distances from one matmul per block of rows.
- ``tap_denoise``: TAP inference (Alg. 1) on the machine whose visible prior is tilted by the
  channel, B(x_i; U_i + D_i) (eq. 47), from the OPE, to convergence; posterior means a_i, binary
  estimates by rounding.

A real-valued variant (beyond the paper): the additive Gaussian channel y = x + sigma z tilts any
visible prior by exp(-x^2 / (2 sigma^2) + x y / sigma^2), i.e. A += 1 / sigma^2, B += y / sigma^2 in
the prior's moment functions (``gaussian_tilt``). ``pointwise_gaussian`` is the posterior mean
under the per-site empirical (histogram) prior, the real-valued analogue of the OPE.

Quality: the Matthews correlation coefficient per image (``mcc``), the mean squared error and
PSNR (``mse``, ``psnr``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tapmachine.core import eta, tap
from tapmachine.core.errors import TapmachineError
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli

__all__ = [
    "DenoiseError",
    "OPE_CLIP",
    "flip_channel",
    "channel_field",
    "magnetisations",
    "ope",
    "nearest_neighbours",
    "tap_denoise",
    "mcc",
    "gaussian_channel",
    "gaussian_tilt",
    "site_histograms",
    "pointwise_gaussian",
    "tap_denoise_gaussian",
    "mse",
    "psnr",
    "stack_noise",
    "SOLVE_BLOCK",
]

#: Magnetisations are clipped to [OPE_CLIP, 1 - OPE_CLIP]: a pixel never on in the training set
#: would otherwise get an infinite log-odds and ignore the observation at every p > 0.
OPE_CLIP = 1e-3


#: Rows per TAP solve of the denoisers. Rows are independent, so the stacked (images x p) batch
#: is solved in blocks of this many rows: on a CPU a block's (block, N) tensors stay in cache and
#: below the allocator's mmap threshold (a fresh (11,000, 784) float32 tensor is 34 MB, mapped
#: and page-faulted at every allocation), and a (1024, 784) @ (784, 500) matmul runs faster per
#: flop than an (11,000, 784) one on one core; together ~20% less time than one solve of the
#: whole batch (``benchmarks/run.py denoise``). Results equal the one-solve results up to the
#: rounding of matmuls of other batch sizes (same iteration counts).
SOLVE_BLOCK = 1024


class DenoiseError(TapmachineError, ValueError):
    """Bad input to a denoiser (noise level, image size, model type)."""


def _check_p(p: Tensor, upper_inclusive: bool = True) -> Tensor:
    p = torch.as_tensor(p, dtype=torch.float64)
    bad = ~(p >= 0) | ((p > 0.5) if upper_inclusive else (p >= 0.5))
    if bool(bad.any()):
        value = float(p.flatten()[bad.flatten()][0])
        bound = "[0, 0.5]" if upper_inclusive else "[0, 0.5)"
        raise DenoiseError(f"flip probability p = {value} is outside {bound}")
    return p


def _check_images(x: Tensor, n: int, what: str) -> None:
    if x.dim() != 2 or x.shape[1] != n:
        raise DenoiseError(f"{what} must have shape (K, {n}), got {tuple(x.shape)}")


def _rows(p, K: int, like: Tensor) -> Tensor:
    """p as a (K, 1) column in the dtype/device of ``like`` (a scalar or one value per row)."""
    p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
    if p.numel() not in (1, K):
        raise DenoiseError(f"need one p or one per row ({K}), got {p.numel()}")
    return p.expand(K).reshape(K, 1).to(device=like.device)


def flip_channel(x: Tensor, p, generator: torch.Generator) -> Tensor:
    """The binary symmetric channel (eq. 43): flip each bit of the {0, 1} rows of ``x``
    independently with probability ``p`` (a scalar or one value per row)."""
    _check_p(p)
    pr = _rows(p, x.shape[0], x).to(x.dtype).expand_as(x)
    u = torch.rand(x.shape, generator=generator, dtype=x.dtype, device=generator.device)
    flips = u.to(x.device) < pr
    return torch.where(flips, 1.0 - x, x)


def channel_field(y: Tensor, p) -> Tensor:
    """D_i = ln((1 - p) / p) (2 y_i - 1), the BSC as a field on x_i (eq. 44, sign corrected).

    p may be a scalar or one value per row, in [0, 0.5]: p = 0 gives +-inf (the observation is
    the signal), p = 0.5 gives 0 (the channel carries no information).
    """
    p = _check_p(p)
    pr = _rows(p, y.shape[0], y)
    strength = torch.log1p(-pr) - torch.log(pr)  # +inf at p = 0, 0 at p = 1/2
    return (strength * (2.0 * y.to(torch.float64) - 1.0)).to(y.dtype)


def magnetisations(x_train: Tensor, clip: float = OPE_CLIP) -> Tensor:
    """Per-site empirical magnetisations m_i of the {0, 1} training rows, clipped to
    [clip, 1 - clip] (see ``OPE_CLIP``)."""
    if not 0.0 < clip < 0.5:
        raise DenoiseError(f"clip must be in (0, 0.5), got {clip}")
    return x_train.mean(0).clamp(clip, 1.0 - clip)


def ope(y: Tensor, p, m: Tensor) -> Tensor:
    """The optimal pointwise estimator (eq. 46, sign corrected): P(x_i = 1 | y_i) =
    sigm(ln(m_i / (1 - m_i)) + D_i), the exact posterior mean under the factorised prior m."""
    _check_images(y, m.shape[-1], "noisy images")
    logit = (torch.log(m) - torch.log1p(-m)).to(torch.float64)
    return torch.sigmoid(logit + channel_field(y, p).to(torch.float64)).to(y.dtype)


def nearest_neighbours(
    y: Tensor, x_train: Tensor, k: int = 1, metric: str = "hamming", block: int = 512
) -> Tensor:
    """Mean of the k training rows nearest to each row of ``y``.

    ``metric="hamming"`` for {0, 1} rows: |y - x|_1 = |y|_1 + |x|_1 - 2 y.x, integers, ties to
    the lowest training index. ``metric="euclidean"``: |y - x|^2 = |y|^2 + |x|^2 - 2 y.x (the
    real-valued channel). Either way one (block x N) @ (N x M) matmul per block of rows gives
    all distances (blocks bound the memory to block x M).
    """
    _check_images(y, x_train.shape[1], "noisy images")
    if not 1 <= k <= x_train.shape[0]:
        raise DenoiseError(f"k = {k} must be in [1, {x_train.shape[0]}]")
    if metric not in ("hamming", "euclidean"):
        raise DenoiseError(f"metric must be hamming or euclidean, got {metric!r}")
    hamming = metric == "hamming"
    xt = x_train.to(torch.float32)
    norms = xt.sum(1) if hamming else xt.square().sum(1)
    # Integer distances are exact in float32 up to 2^24; index / M < 1 breaks ties by index.
    tiebreak = torch.arange(xt.shape[0], dtype=torch.float64, device=xt.device) / xt.shape[0]
    out = []
    for start in range(0, y.shape[0], block):
        yb = y[start : start + block].to(torch.float32)
        own = yb.sum(1, keepdim=True) if hamming else yb.square().sum(1, keepdim=True)
        d = (own + norms).addmm_(yb, xt.T, alpha=-2.0)
        if hamming:
            d = d.round().to(torch.float64).add_(tiebreak)
        idx = torch.topk(d, k, dim=1, largest=False).indices
        out.append(x_train[idx].to(y.dtype).mean(1))
    return torch.cat(out, 0)


def stack_noise(x: Tensor, ps, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Every image at every noise level, stacked along the batch: ``(y, p_rows, clean)``.

    Rows are ordered p-major (all images at ps[0], then at ps[1], ...); each (image, p) gets its
    own flips from ``generator``. ``p_rows`` holds each row's p, ``clean`` the repeated x.
    """
    ps = torch.as_tensor(ps, dtype=torch.float64).reshape(-1)
    _check_p(ps)
    n = x.shape[0]
    p_rows = ps.repeat_interleave(n)
    clean = x.repeat(ps.numel(), 1)
    return flip_channel(clean, p_rows, generator), p_rows, clean


def _solve_blocks(
    machine: BoltzmannMachine,
    init: Tensor,
    tilt: tuple[Tensor | None, Tensor | None],
    block: int,
    **solve_kwargs,
) -> tap.TAPState:
    """``tap.solve`` from the rows of ``init`` with the per-row visible ``tilt``, ``block`` rows
    per solve (see ``SOLVE_BLOCK``), the states concatenated in row order."""
    if block < 1:
        raise DenoiseError(f"block must be >= 1, got {block}")
    states = []
    with eta.report(init.shape[0], "TAP denoising, rows") as progress:
        for start in range(0, init.shape[0], block):
            rows = slice(start, start + block)
            part = tuple(None if t is None else t[rows] for t in tilt)
            states.append(tap.solve(machine, init[rows], visible_tilt=part, **solve_kwargs))
            progress.advance(states[-1].a[0].shape[0])
    return states[0] if len(states) == 1 else tap.TAPState.concat(states)


def tap_denoise(
    machine: BoltzmannMachine,
    y: Tensor,
    p,
    m: Tensor,
    damping: float = tap.SolverSettings.damping,
    tol: float = 1e-8,
    max_iter: int = 1000,
    block: int = SOLVE_BLOCK,
) -> tap.TAPState:
    """TAP posterior means of binary images seen through the BSC (Sec. VII.4.1, eq. 47).

    The visible prior B(x_i; U_i) becomes B(x_i; U_i + D_i) (``tap.solve``'s ``visible_tilt``,
    B += D), one D per row, so all rows (any mix of images and p) are one batched solve.
    Initialisation: the OPE (visible means, variances 0 as eq. 38); the paper's heuristic caveat
    -- the TAP free energy is multimodal and the result depends on where one starts.
    Iterated (damping 0.5, as Alg. 1 in the paper's experiments) until the mean squared step of
    the magnetisations is below ``tol`` or ``max_iter`` iterations (``state.converged`` says which
    rows converged). p = 0 fixes the visible means at y; p = 0.5 has no field (D = 0): the result
    is the TAP solution of the machine itself reached from the OPE, i.e. from the prior means,
    the same for every image (one such row is solved and copied to the others).

    Returns the TAPState; ``state.a[0]`` are the posterior means, ``state.a[0].round()`` the
    binary estimates. Rows are solved ``block`` at a time (``SOLVE_BLOCK``).
    """
    if not isinstance(machine.visible, Bernoulli):
        raise DenoiseError(
            "the binary symmetric channel needs a machine with Bernoulli {0, 1} visible units, "
            f"got {type(machine.visible).__name__}"
        )
    n = machine.sizes[0]
    _check_images(y, n, "noisy images")
    if m.shape[-1] != n:
        raise DenoiseError(f"magnetisations have {m.shape[-1]} sites, the machine {n}")
    y = y.to(dtype=machine.dtype, device=machine.device)
    K = y.shape[0]
    p_rows = _rows(_check_p(p), K, y).reshape(K).cpu()
    half = p_rows == 0.5
    if int(half.sum()) > 1:
        # Rows at p = 0.5 know nothing of their image: all start at the OPE (= m) with D = 0
        # and reach the same solution. One of them is solved (in the same batch) and copied.
        rows = torch.cat([torch.nonzero(~half).flatten(), torch.nonzero(half).flatten()[:1]])
        pos = torch.empty(K, dtype=torch.long)
        pos[~half] = torch.arange(K - int(half.sum()))
        pos[half] = rows.numel() - 1
        state = tap_denoise(machine, y[rows], p_rows[rows], m, damping, tol, max_iter, block)
        return state.select(pos.to(y.device))
    D = channel_field(y, p_rows)
    init = ope(y, p_rows, m.to(y))
    return _solve_blocks(
        machine, init, (None, D), block, damping=damping, tol=tol, max_iter=max_iter
    )


def mcc(estimate: Tensor, truth: Tensor) -> Tensor:
    """Matthews correlation coefficient of each row of binary ``estimate`` against ``truth``.

    (TP TN - FP FN) / sqrt((TP + FP)(TP + FN)(TN + FP)(TN + FN)); a row with an empty margin
    (all-0 or all-1 estimate or truth) gets 0, as scikit-learn's ``matthews_corrcoef``.
    """
    e, t = estimate.to(torch.float64), truth.to(torch.float64)
    tp = (e * t).sum(1)
    fp = (e * (1 - t)).sum(1)
    fn = ((1 - e) * t).sum(1)
    tn = ((1 - e) * (1 - t)).sum(1)
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    num = tp * tn - fp * fn
    return torch.where(den > 0, num / den.clamp_min(1e-300).sqrt(), torch.zeros_like(num))


# ---------------------------------------------------------------------------------------------
# Real-valued channel (beyond the paper)
# ---------------------------------------------------------------------------------------------


def _check_sigma(sigma) -> Tensor:
    s = torch.as_tensor(sigma, dtype=torch.float64)
    bad = ~(s > 0) | ~torch.isfinite(s)
    if bool(bad.any()):
        raise DenoiseError(f"noise std sigma = {float(s.flatten()[bad.flatten()][0])} is not > 0")
    return s


def gaussian_channel(x: Tensor, sigma, generator: torch.Generator) -> Tensor:
    """y = x + sigma z, z ~ N(0, 1) per element; sigma a scalar or one value per row."""
    _check_sigma(sigma)
    s = _rows(sigma, x.shape[0], x).to(x.dtype)
    z = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=generator.device)
    return x + s * z.to(x.device)


def gaussian_tilt(y: Tensor, sigma) -> tuple[Tensor, Tensor]:
    """(A_ext, B_ext) = (1 / sigma^2, y / sigma^2): the Gaussian likelihood exp(-(y - x)^2 /
    (2 sigma^2)) as a tilt exp(-A x^2 / 2 + B x) of the visible prior (the x-free factor drops)."""
    _check_sigma(sigma)
    s2 = _rows(sigma, y.shape[0], y).square().to(y.dtype)
    return (1.0 / s2).expand_as(y).contiguous(), y / s2


def site_histograms(x_train: Tensor, levels: int = 256) -> tuple[Tensor, Tensor]:
    """Per-site empirical prior of pixels on the grid k / (levels - 1) (8-bit data scaled to
    [0, 1]): ``(values (levels,), counts (N, levels))``. Values off the grid go to the nearest."""
    values = torch.linspace(0.0, 1.0, levels, dtype=torch.float64)
    idx = (x_train.to(torch.float64).clamp(0, 1) * (levels - 1)).round().long()
    counts = torch.zeros(x_train.shape[1], levels, dtype=torch.float64)
    counts.scatter_add_(1, idx.T.cpu().contiguous(), torch.ones(idx.T.shape, dtype=torch.float64))
    return values, counts


def pointwise_gaussian(y: Tensor, sigma, values: Tensor, counts: Tensor, block: int = 64) -> Tensor:
    """Posterior mean of each pixel under its own empirical prior (``site_histograms``) and the
    Gaussian channel: sum_v v c_iv N(y_i; v, sigma) / sum_v c_iv N(y_i; v, sigma) (log-sum-exp,
    one (block, N, levels) tensor per block of rows)."""
    _check_images(y, counts.shape[0], "noisy images")
    _check_sigma(sigma)
    s = _rows(sigma, y.shape[0], y).cpu()
    log_c = torch.log(counts).unsqueeze(0)  # (1, N, L), -inf where a value never occurs
    out = []
    for start in range(0, y.shape[0], block):
        yb = y[start : start + block].to(torch.float64).cpu().unsqueeze(-1)  # (b, N, 1)
        sb = s[start : start + block].unsqueeze(-1)  # (b, 1, 1)
        logw = log_c - (yb - values).square() / (2.0 * sb.square())
        w = torch.softmax(logw, dim=-1)
        out.append((w * values).sum(-1))
    return torch.cat(out, 0).to(dtype=y.dtype, device=y.device)


def tap_denoise_gaussian(
    machine: BoltzmannMachine,
    y: Tensor,
    sigma,
    init: Tensor,
    damping: float = tap.SolverSettings.damping,
    tol: float = 1e-8,
    max_iter: int = 1000,
    block: int = SOLVE_BLOCK,
) -> tap.TAPState:
    """TAP posterior means of real-valued images seen through the Gaussian channel: the visible
    prior tilted by the likelihood (A += 1/sigma^2, B += y/sigma^2, ``gaussian_tilt``), from
    ``init`` (e.g. ``pointwise_gaussian``), to convergence as ``tap_denoise``, ``block`` rows
    per solve."""
    n = machine.sizes[0]
    _check_images(y, n, "noisy images")
    _check_images(init, n, "initialisation")
    y = y.to(dtype=machine.dtype, device=machine.device)
    A_ext, B_ext = gaussian_tilt(y, sigma)
    return _solve_blocks(
        machine, init.to(y), (A_ext, B_ext), block, damping=damping, tol=tol, max_iter=max_iter
    )


def mse(estimate: Tensor, truth: Tensor) -> Tensor:
    """Mean squared error of each row."""
    return (estimate.to(torch.float64) - truth.to(torch.float64)).square().mean(1)


def psnr(mean_squared_error: float, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB, 10 log10(peak^2 / MSE)."""
    if mean_squared_error <= 0:
        return math.inf
    return 10.0 * math.log10(peak * peak / mean_squared_error)
