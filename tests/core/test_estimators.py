"""AIS, pseudo-likelihood and test log-likelihood against exact enumeration (App. F)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.nn.functional import softplus

from tapmachine.core import estimators as est
from tapmachine.core.estimators.ais_layers import BinaryAISLayer, RandomBytes
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussian

#: Fixed tolerance (nats) on |AIS - exact| for the enumerable RBMs below, on top of the
#: requirement that the +-3 stderr band contain the exact value.
AIS_TOL = 0.05

#: Short schedule for tests: Salakhutdinov's shape (coarse, then finer steps near beta = 1).
TEST_BETAS = torch.cat(
    [
        torch.linspace(0.0, 0.5, 501, dtype=torch.float64)[:-1],
        torch.linspace(0.5, 0.9, 1001, dtype=torch.float64)[:-1],
        torch.linspace(0.9, 1.0, 1501, dtype=torch.float64),
    ]
)


def _random_rbm(nv, nh, std, seed, prior=Bernoulli, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(nv, nh, generator=g, dtype=torch.float64) * std
    Uv = torch.randn(nv, generator=g, dtype=torch.float64) * 0.5
    Uh = torch.randn(nh, generator=g, dtype=torch.float64) * 0.5
    return RBM(W, prior(Uv), prior(Uh)).to(dtype=dtype)


def _binary_data(n, nv, seed, spin=False):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(nv, generator=g) * 0.8 + 0.1
    x = (torch.rand(n, nv, generator=g) < p).float()
    return 2.0 * x - 1.0 if spin else x


def _all_states(n, spin=False):
    s = torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=torch.float64)
    return 2.0 * s - 1.0 if spin else s


# --------------------------------------------------------------------------------------------
# Schedule and base-rate model
# --------------------------------------------------------------------------------------------


def test_salakhutdinov_schedule():
    b = est.salakhutdinov_schedule()
    assert b.numel() == 14501 and b[0] == 0.0 and b[-1] == 1.0
    steps = b.diff()
    assert torch.all(steps > 0)
    assert torch.allclose(steps[:500], torch.tensor(1e-3, dtype=torch.float64))
    assert torch.allclose(steps[500:4500], torch.tensor(1e-4, dtype=torch.float64))
    assert torch.allclose(steps[4500:], torch.tensor(1e-5, dtype=torch.float64))


def test_base_rate_field_matches_data_means():
    m = _random_rbm(12, 4, 0.1, seed=0, dtype=torch.float64)
    x = _binary_data(200, 12, seed=1)
    x[:, 0] = 0.0  # an empty pixel: clipped mean
    B0 = est.base_rate_field(m.visible, x)
    mean = torch.sigmoid(m.visible.U + B0)
    expected = x.double().mean(0).clamp(est.BASE_CLIP, 1 - est.BASE_CLIP)
    assert torch.allclose(mean, expected, atol=1e-12)
    assert torch.equal(est.base_rate_field(m.visible, None), torch.zeros(12, dtype=torch.float64))
    spins = Spin(m.visible.U)
    B0s = est.base_rate_field(spins, 2 * x - 1)
    expected_s = (2 * x - 1).double().mean(0).clamp(-1 + 2 * est.BASE_CLIP, 1 - 2 * est.BASE_CLIP)
    assert torch.allclose(torch.tanh(spins.U + B0s), expected_s, atol=1e-12)


# --------------------------------------------------------------------------------------------
# AIS against exact enumeration
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prior, std",
    # spins x = 2b - 1 couple 4x as strongly as {0, 1} units at the same W
    [(Bernoulli, 0.1), (Bernoulli, 0.5), (Bernoulli, 1.0), (Spin, 0.1), (Spin, 0.5)],
)
def test_ais_matches_exact(prior, std):
    m = _random_rbm(14, 10, std, seed=int(10 * std), prior=prior)
    exact = float(est.exact_log_partition(m))
    data = _binary_data(300, 14, seed=3, spin=prior is Spin)
    g = torch.Generator().manual_seed(1234)
    for kwargs in ({}, {"data": data}):
        r = est.ais_log_partition(m, n_runs=100, betas=TEST_BETAS, generator=g, **kwargs)
        assert r.lower <= exact <= r.upper, (kwargs.keys(), r.log_z, r.stderr, exact)
        assert abs(r.log_z - exact) < AIS_TOL, (r.log_z, exact)
        assert r.n_betas == TEST_BETAS.numel() and r.log_weights.shape == (100,)
        assert r.log_weights.dtype == torch.float64
        assert math.isclose(r.upper - r.log_z, 3 * r.stderr) and r.stderr > 0


def test_ais_defaults():
    """``ais_log_partition(machine)``: Salakhutdinov's 14,501 betas, 100 runs, own prior as base."""
    m = _random_rbm(10, 6, 1.0, seed=8)
    torch.manual_seed(0)
    r = est.ais_log_partition(m)
    exact = float(est.exact_log_partition(m))
    assert r.n_betas == 14501 and r.log_weights.shape == (100,)
    assert r.lower <= exact <= r.upper and abs(r.log_z - exact) < AIS_TOL


def test_ais_reverse_matches_exact():
    m = _random_rbm(14, 10, 0.5, seed=5)
    exact = float(est.exact_log_partition(m))
    data = _binary_data(300, 14, seed=3)
    g = torch.Generator().manual_seed(7)
    r = est.ais_log_partition(m, data=data, betas=TEST_BETAS, generator=g, reverse=True)
    assert r.reverse and r.lower <= exact <= r.upper and abs(r.log_z - exact) < AIS_TOL


def test_ais_zero_weights_is_exact():
    """W = 0 and the machine's own prior as base: every intermediate is the base, ln Z = 0."""
    g = torch.Generator().manual_seed(0)
    m = RBM(torch.zeros(20, 7), Bernoulli(torch.randn(20, generator=g)), Bernoulli(torch.ones(7)))
    r = est.ais_log_partition(m, n_runs=50, betas=est.linear_schedule(300), generator=g)
    assert r.log_z_base == 0.0
    assert abs(r.log_z) < 1e-12 and r.stderr < 1e-12
    assert torch.all(r.log_weights.abs() < 1e-12)


def test_ais_zero_weights_with_data_base():
    """W = 0, base fitted to data: ln Z_0 is the closed form, and AIS recovers ln Z = 0."""
    g = torch.Generator().manual_seed(0)
    Uv = torch.randn(20, generator=g)
    m = RBM(torch.zeros(20, 7), Bernoulli(Uv), Bernoulli(torch.ones(7)))
    data = _binary_data(100, 20, seed=2)
    r = est.ais_log_partition(m, data=data, n_runs=50, betas=est.linear_schedule(1000), generator=g)
    m_clip = data.mean(0).clamp(est.BASE_CLIP, 1 - est.BASE_CLIP)
    U_base = torch.logit(m_clip)
    expected_base = float((softplus(U_base) - softplus(Uv)).sum())
    assert math.isclose(r.log_z_base, expected_base, rel_tol=1e-5, abs_tol=1e-5)
    assert r.lower <= 0.0 <= r.upper and abs(r.log_z) < 0.01


def _truncated_gaussian_rbm(nv, nh, std, seed):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(nv, nh, generator=g, dtype=torch.float64) * std
    U = torch.randn(nv, generator=g, dtype=torch.float64)
    V = torch.rand(nv, generator=g, dtype=torch.float64) * 2 + 0.5
    hidden = Bernoulli(torch.randn(nh, generator=g, dtype=torch.float64) * 0.5)
    return RBM(W, TruncatedGaussian(U, V, -1.0, 1.0), hidden).to(dtype=torch.float32)


def test_base_rate_field_truncated_gaussian():
    """Generic priors: B_0 solves f_a(B_0, 0) = data mean (bisection)."""
    m = _truncated_gaussian_rbm(5, 3, 0.5, seed=0).to(dtype=torch.float64)
    x = torch.rand(100, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = 1.8 * x - 0.95
    B0 = est.base_rate_field(m.visible, x)
    mean = m.visible.moments(B0, torch.zeros_like(B0))[0]
    assert torch.allclose(mean, x.mean(0), atol=1e-8)


def test_ais_truncated_gaussian_visible():
    """Truncated-Gaussian visible units on [-1, 1], binary hidden (enumerated by the exact
    reference). The TG sampler is costly per call, hence a short schedule on a small model."""
    m = _truncated_gaussian_rbm(6, 5, 0.5, seed=3)
    exact = float(est.exact_log_partition(m))
    data = 1.6 * torch.rand(200, 6, generator=torch.Generator().manual_seed(0)) - 0.9
    g = torch.Generator().manual_seed(2)
    for kwargs in ({}, {"data": data}):
        r = est.ais_log_partition(
            m, n_runs=100, betas=est.linear_schedule(100), generator=g, **kwargs
        )
        assert r.lower <= exact <= r.upper, (kwargs.keys(), r.log_z, r.stderr, exact)
        assert abs(r.log_z - exact) < AIS_TOL, (r.log_z, exact)


def test_ais_explicit_base():
    m = _random_rbm(12, 6, 0.5, seed=4)
    exact = float(est.exact_log_partition(m))
    U_base = torch.linspace(-2.0, 2.0, 12)
    expected_base = float((softplus(U_base) - softplus(m.visible.U)).sum())
    g = torch.Generator().manual_seed(3)
    for base in (Bernoulli(U_base), U_base - m.visible.U):
        r = est.ais_log_partition(m, betas=TEST_BETAS, generator=g, base=base)
        assert math.isclose(r.log_z_base, expected_base, rel_tol=1e-5, abs_tol=1e-5)
        assert r.lower <= exact <= r.upper and abs(r.log_z - exact) < AIS_TOL
    with pytest.raises(ValueError):
        est.ais_log_partition(m, base=Spin(U_base))


def test_ais_groups_of_runs():
    """Any split of the runs into groups (threads on a CPU) estimates the same ln Z; the torch
    thread count and grad mode of the caller are left alone."""
    m = _random_rbm(12, 8, 0.5, seed=6)
    exact = float(est.exact_log_partition(m))
    m = m.replace(weights=[m.W.clone().requires_grad_(True)])
    threads = torch.get_num_threads()
    for n_groups in (1, 3):
        g = torch.Generator().manual_seed(n_groups)
        r = est.ais_log_partition(m, betas=TEST_BETAS, generator=g, n_groups=n_groups)
        assert r.lower <= exact <= r.upper and abs(r.log_z - exact) < AIS_TOL
        assert not r.log_weights.requires_grad and r.log_weights.shape == (100,)
    assert torch.get_num_threads() == threads


def test_ais_is_reproducible_and_float64():
    m = _random_rbm(10, 8, 0.5, seed=2, dtype=torch.float64)
    exact = float(est.exact_log_partition(m))
    runs = [
        est.ais_log_partition(
            m,
            n_runs=40,
            betas=est.linear_schedule(2000),
            generator=torch.Generator().manual_seed(5),
        )
        for _ in range(2)
    ]
    assert torch.equal(runs[0].log_weights, runs[1].log_weights)
    assert runs[0].lower <= exact <= runs[0].upper


def test_ais_rejects_bad_schedules():
    m = _random_rbm(4, 3, 0.1, seed=0)
    with pytest.raises(ValueError):
        est.ais_log_partition(m, betas=[0.0, 0.5])
    with pytest.raises(ValueError):
        est.ais_log_partition(m, betas=[0.0, 0.6, 0.5, 1.0])
    with pytest.raises(ValueError):
        est.ais_log_partition(m, reverse=True)


def test_binary_sampler_is_exact():
    """The byte-plus-tie-break draw has the right frequencies, also for p near 0 and 1."""
    n_runs, n = 200, 64
    g = torch.Generator().manual_seed(0)
    layer = BinaryAISLayer(Bernoulli(torch.zeros(n)), n_runs, g)
    random_bytes = RandomBytes([n], n_runs, "cpu", torch.Generator().manual_seed(1), 10)
    field = torch.linspace(-12.0, 12.0, n).expand(n_runs, n)
    layer.set_field(field.contiguous())
    p = layer.P[0].double().clone()
    out, total, draws = torch.empty(n_runs, n), torch.zeros(n, dtype=torch.float64), 500
    for _ in range(draws):
        total += layer.sample(out, random_bytes.next()[0]).double().sum(0)
    freq = total / (n_runs * draws)
    z = (freq - p) / (p * (1 - p) / (n_runs * draws)).sqrt()
    assert z.abs().max() < 5.0 and abs(z.mean()) < 0.5


# --------------------------------------------------------------------------------------------
# Pseudo-likelihood and test log-likelihood
# --------------------------------------------------------------------------------------------


def _brute_force_conditionals(machine, x, spin=False):
    """ln P(x_i | x_-i) for every row and site, from energies summed over all hidden states."""
    hs = _all_states(machine.sizes[1], spin=spin)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for r in range(x.shape[0]):
        for i in range(x.shape[1]):
            logp = []
            for value in (x[r, i], (-x[r, i]) if spin else 1.0 - x[r, i]):
                v = x[r].clone()
                v[i] = value
                e = machine.energy([v.expand(hs.shape[0], -1), hs])
                logp.append(torch.logsumexp(-e, 0))
            out[r, i] = logp[0] - torch.logaddexp(logp[0], logp[1])
    return out


@pytest.mark.parametrize("prior", [Bernoulli, Spin])
def test_pseudo_likelihood_matches_brute_force(prior, monkeypatch):
    spin = prior is Spin
    m = _random_rbm(7, 4, 0.8, seed=11, prior=prior, dtype=torch.float64)
    x = _binary_data(5, 7, seed=4, spin=spin).double()
    cond = _brute_force_conditionals(m, x, spin=spin)
    exact = est.pseudo_log_likelihood(m, x)
    assert torch.allclose(exact, cond.sum(1), atol=1e-10)
    # chunked over sites: same numbers
    monkeypatch.setattr(est, "PL_CHUNK_ELEMENTS", 9)
    assert torch.allclose(est.pseudo_log_likelihood(m, x), exact, atol=1e-12)
    # stochastic version on a fixed subset, scaled by Nv / n_sites
    sites = torch.tensor([5, 0, 3])
    stoch = est.pseudo_log_likelihood(m, x, sites=sites)
    assert torch.allclose(stoch, cond[:, sites].sum(1) * 7 / 3, atol=1e-10)
    # one subset per row
    per_row = torch.tensor([[5, 0, 3], [1, 2, 6], [4, 5, 6], [0, 1, 2], [3, 4, 6]])
    stoch = est.pseudo_log_likelihood(m, x, sites=per_row)
    assert torch.allclose(stoch, cond.gather(1, per_row).sum(1) * 7 / 3, atol=1e-10)
    # the generator draws every row's subset (site_subsets)
    drawn = est.pseudo_log_likelihood(m, x, n_sites=3, generator=torch.Generator().manual_seed(9))
    chosen = est.site_subsets(5, 7, 3, torch.Generator().manual_seed(9))
    assert torch.allclose(drawn, cond.gather(1, chosen).sum(1) * 7 / 3, atol=1e-10)


def test_mean_and_stderr_is_the_mean_and_bessel_corrected_standard_error():
    mean, se = est.mean_and_stderr(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    # mean 3; squared deviations 4 + 1 + 0 + 9 = 14 over n - 1 = 3; se = sqrt(14 / 3) / 2.
    assert mean == 3.0 and se == pytest.approx(math.sqrt(14 / 3) / 2, rel=1e-15)
    assert est.mean_and_stderr(torch.tensor([-2.5])) == (-2.5, 0.0)
    assert all(math.isnan(v) for v in est.mean_and_stderr(torch.empty(0)))


def test_site_subsets_are_distinct_uniform_and_independent_between_rows():
    g = torch.Generator().manual_seed(0)
    draws = est.site_subsets(20000, 6, 2, g)
    assert draws.shape == (20000, 2)
    assert torch.all(draws[:, 0] != draws[:, 1])
    # each of the 15 unordered pairs equally likely: 20000 / 15 = 1333 +- 35 (binomial sd)
    pairs = torch.sort(draws, dim=1).values
    counts = torch.bincount(pairs[:, 0] * 6 + pairs[:, 1], minlength=36)
    counts = counts[counts > 0]
    assert counts.numel() == 15
    assert float((counts - 20000 / 15).abs().max()) < 5 * math.sqrt(20000 / 15 * 14 / 15)
    # rows differ: a shared subset would repeat one pair in every row
    assert (pairs[1:] != pairs[:-1]).any(dim=1).float().mean() > 0.9
    with pytest.raises(ValueError, match="n_sites"):
        est.site_subsets(3, 6, 7, g)


def test_pseudo_likelihood_standard_error_over_rows_is_calibrated():
    # The stochastic PL's plain standard error over rows must match the spread of its mean
    # over fresh samples of images and sites: it does when rows draw their own sites, and not
    # when one subset is shared by all rows (its site-choice error is common to every row).
    m = _random_rbm(16, 6, 1.0, seed=3, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    p = torch.rand(16, generator=g, dtype=torch.float64) * 0.8 + 0.1

    def spread_and_stderr(sites):
        images = (torch.rand(300, 400, 16, generator=g, dtype=torch.float64) < p).double()
        runs = torch.stack([est.pseudo_log_likelihood(m, x, 4, g, sites()) for x in images])
        spread = float(runs.mean(1).std())
        stderr = float((runs.std(1) / math.sqrt(runs.shape[1])).mean())
        return spread / stderr

    assert 0.85 < spread_and_stderr(lambda: None) < 1.18  # 300 repeats: 4% sd on the ratio
    assert spread_and_stderr(lambda: torch.randperm(16, generator=g)[:4]) > 2


def test_pseudo_likelihood_stochastic_is_unbiased():
    m = _random_rbm(12, 5, 0.5, seed=1, dtype=torch.float64)
    x = _binary_data(4, 12, seed=2).double()
    exact = est.pseudo_log_likelihood(m, x)
    g = torch.Generator().manual_seed(0)
    runs = torch.stack(
        [est.pseudo_log_likelihood(m, x, n_sites=3, generator=g) for _ in range(4000)]
    )
    se = runs.std(0) / math.sqrt(runs.shape[0])
    assert torch.all((runs.mean(0) - exact).abs() < 4 * se)


def test_pseudo_likelihood_rejects_continuous_visibles():
    m = _truncated_gaussian_rbm(4, 3, 0.5, seed=0)
    with pytest.raises(NotImplementedError, match="binary"):
        est.pseudo_log_likelihood(m, torch.zeros(2, 4))


def test_test_log_likelihood_normalises():
    m = _random_rbm(9, 5, 0.7, seed=3, dtype=torch.float64)
    states = _all_states(9)
    ll = est.test_log_likelihood(m, states, est.exact_log_partition(m))
    assert abs(float(torch.logsumexp(ll, 0))) < 1e-10
    r = est.AISResult(1.0, 0.1, 0.7, 1.3, torch.zeros(3), 10)
    assert torch.allclose(
        est.test_log_likelihood(m, states[:3], r), -m.free_energy_visible(states[:3]) - 1.0
    )


def _log_partition_by_both_layers(m) -> float:
    """ln Z summed over every joint configuration of both layers (eq. 36's weight)."""
    values = [[-1.0, 1.0] if isinstance(p, Spin) else [0.0, 1.0] for p in m.priors]
    v = torch.tensor(list(itertools.product(values[0], repeat=m.sizes[0])), dtype=m.W.dtype)
    h = torch.tensor(list(itertools.product(values[1], repeat=m.sizes[1])), dtype=m.W.dtype)
    log_w = (
        m.priors[0].log_prob(v).sum(-1)[:, None]
        + m.priors[1].log_prob(h).sum(-1)[None, :]
        + v @ m.W @ h.T
    )
    return float(torch.logsumexp(log_w.flatten(), 0))


@pytest.mark.parametrize("prior", [Bernoulli, Spin])
@pytest.mark.parametrize("nv, nh", [(6, 1), (6, 3), (5, 9)])
@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 12])
def test_exact_log_partition_split_into_low_and_high_states_is_the_joint_sum(prior, nv, nh, chunk):
    """Every split of the enumerated layer's states into chunks (low bits) and high bits,
    down to one state a chunk, and either layer enumerated (the smaller: nh = 9 > nv = 5
    enumerates the visible layer), against the sum over both layers' joint states."""
    m = _random_rbm(nv, nh, 0.8, seed=nv + nh, prior=prior, dtype=torch.float64)
    assert float(est.exact_log_partition(m, chunk=chunk)) == pytest.approx(
        _log_partition_by_both_layers(m), abs=1e-12
    )


def test_exact_log_partition_float32_chunks_and_unit_guard():
    """float32 chunks (summed in float64) against float64 throughout on an RBM with strong
    couplings (ln Z in the hundreds); more units than ``max_units`` is refused by name."""
    g = torch.Generator().manual_seed(3)
    m = RBM(
        torch.randn(40, 12, generator=g, dtype=torch.float64) * 1.5,
        Bernoulli(torch.randn(40, generator=g, dtype=torch.float64)),
        Bernoulli(torch.randn(12, generator=g, dtype=torch.float64)),
    )
    full = est.exact_log_partition(m)
    fast = est.exact_log_partition(m, chunk=1 << 9, chunk_dtype=torch.float32)
    assert fast.dtype == torch.float64 and float(full) > 50
    assert float(fast) == pytest.approx(float(full), rel=1e-6)
    with pytest.raises(ValueError, match="2\\^12 states of layer 1; at most 11 units"):
        est.exact_log_partition(m, max_units=11)
