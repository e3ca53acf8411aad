"""ln Z of an RBM by annealed importance sampling (App. F; Neal 2001; Salakhutdinov & Murray
2008), forward or reverse, with the 14,501-temperature schedule.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math

import torch
from torch import Tensor

from tapmachine.core import eta
from tapmachine.core.estimators.ais_layers import RandomBytes, ais_layer
from tapmachine.core.estimators.base_rate import base_field
from tapmachine.core.machine import BoltzmannMachine

__all__ = [
    "AISResult",
    "ais_log_partition",
    "as_betas",
    "linear_schedule",
    "log_mean_exp_and_stderr",
    "salakhutdinov_schedule",
]


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


def refined_schedule(betas: Tensor, factor: int) -> Tensor:
    """``betas`` with ``factor - 1`` equally spaced values inserted in every gap: each segment's
    step divided by ``factor`` (the 14,501 values of ``salakhutdinov_schedule`` become
    14,500 ``factor`` + 1), the ends kept. AIS's bias shrinks as the steps do (Neal 2001), so
    the estimate's move under refinement measures how far the schedule is from converged."""
    if int(factor) != factor or factor < 1:
        raise ValueError(f"a schedule's refinement factor must be a positive integer, not {factor}")
    betas = torch.as_tensor(betas, dtype=torch.float64)
    if factor == 1:
        return betas.clone()
    frac = torch.arange(factor, dtype=torch.float64) / factor
    inner = betas[:-1, None] + (betas[1:] - betas[:-1])[:, None] * frac
    return torch.cat([inner.reshape(-1), betas[-1:]])


def _child_generators(generator: torch.Generator | None, device, n: int) -> list[torch.Generator]:
    """``n`` generators seeded by draws from ``generator`` (the global RNG when None)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    seeds = torch.randint(0, 2**62, (n,), generator=generator, device=gen_device).tolist()
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]


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
    vis = ais_layer(machine.visible, R, generators[1])
    hid = ais_layer(machine.hidden, R, generators[1])
    use_base = bool(B0.abs().max() > 0)
    on_cpu = W.device.type == "cpu"
    sizes = [layer.size if (layer.needs_bytes and on_cpu) else 0 for layer in (hid, vis)]
    random_bytes = RandomBytes(sizes, R, W.device, generators[0], len(betas) - 1)
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


def log_mean_exp_and_stderr(logw: Tensor) -> tuple[float, float]:
    """logmeanexp(logw) and the delta-method stderr std(w) / (mean(w) sqrt(n)), in log space."""
    n = logw.numel()
    shift = logw.max()
    w = torch.exp(logw - shift)
    mean = w.mean()
    log_mean = float(torch.log(mean) + shift)
    if n < 2:
        return log_mean, float("nan")
    return log_mean, float(w.std(correction=1) / mean / math.sqrt(n))


def as_betas(betas) -> list[float]:
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
    random byte per unit plus an exact tie-break (``BinaryAISLayer``): torch's serial CPU
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
    schedule = as_betas(betas)
    dtype, device = machine.dtype, machine.device
    if n_groups is None:
        n_groups = torch.get_num_threads() if device.type == "cpu" else 1
    n_groups = max(1, min(int(n_groups), n_runs))
    gens = _child_generators(generator, device, 1 + 2 * n_groups)
    B0 = base_field(machine.visible, data, base).to(dtype=dtype, device=device)
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
    log_mean, stderr = log_mean_exp_and_stderr(logw)
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
