"""DBM AIS and the mean-field bound (``tapmachine.ucd.ais``) against exact enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch

from tapmachine.core.priors import Spin
from tapmachine.ucd import ais
from tapmachine.ucd.init import random_machine

DT = torch.float64


def _enumerate(m):
    """Every state of the machine (one tensor per layer) and its ln of unnormalised probability."""
    n = sum(m.sizes)
    bits = torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=DT)
    if isinstance(m.visible, Spin):
        bits = 2.0 * bits - 1.0
    xs = list(torch.split(bits, list(m.sizes), dim=1))
    return xs, -m.energy(xs)


def _exact_data_terms(m):
    """The distinct visible states v and ln sum_h exp(-E(v, h)) for each, by enumeration."""
    xs, logp = _enumerate(m)
    v = torch.unique(xs[0], dim=0)
    match = (v[:, None, :] == xs[0][None, :, :]).all(-1)
    return v, torch.logsumexp(torch.where(match, logp[None, :], -torch.inf), 1)


def _machine(sizes, units, gain, seed=3):
    g = torch.Generator().manual_seed(seed)
    return random_machine(sizes, g, units=units, gain=gain, dtype=DT)


@pytest.mark.parametrize("units", ["spin", "binary"])
@pytest.mark.parametrize("sizes", [(6, 4, 3), (5, 4, 3, 2), (7, 5)])
@pytest.mark.parametrize("gain", [1.0, 3.0])
def test_ais_log_partition_matches_enumeration(units, sizes, gain):
    m = _machine(sizes, units, gain)
    _, logp = _enumerate(m)
    exact = float(torch.logsumexp(logp, 0))
    g = torch.Generator().manual_seed(11)
    z = torch.zeros(50, sizes[0], dtype=DT)
    data = m.visible.sample(z, z, generator=g)
    res = ais.dbm_ais_log_partition(
        m, data, n_runs=200, betas=ais.segmented_schedule(1000), generator=g
    )
    assert res.stderr > 0
    assert abs(res.log_z - exact) < 4.0 * res.stderr + 1e-3, (res.log_z, exact, res.stderr)
    assert abs(res.log_z - exact) < 0.1


def test_ais_with_a_two_step_schedule_is_plain_importance_sampling():
    """betas = (0, 1): one importance-sampling step from the base; with no couplings it is exact."""
    m = _machine((6, 4, 3), "binary", 1.0)
    m = m.replace(weights=[0.0 * w for w in m.weights])
    res = ais.dbm_ais_log_partition(
        m, None, n_runs=10, betas=[0.0, 1.0], generator=torch.Generator().manual_seed(0)
    )
    assert res.log_z == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("units", ["spin", "binary"])
@pytest.mark.parametrize("sizes", [(6, 4, 3), (5, 4, 3, 2)])
def test_mean_field_bound_is_below_exact_and_rises_with_sweeps(units, sizes):
    m = _machine(sizes, units, 3.0)
    v, exact = _exact_data_terms(m)
    one = ais.mean_field_lower_bound(m, v, 1)
    many = ais.mean_field_lower_bound(m, v, 50)
    assert (many <= exact + 1e-9).all()
    assert (one <= exact + 1e-9).all()
    assert (many >= one - 1e-9).all() and (many > one + 1e-6).any()


@pytest.mark.parametrize("units", ["spin", "binary"])
def test_mean_field_bound_is_tight_at_weak_coupling(units):
    gaps = []
    for gain in (0.05, 0.5, 2.0):
        m = _machine((6, 4, 3), units, gain)
        v, exact = _exact_data_terms(m)
        gaps.append(float((exact - ais.mean_field_lower_bound(m, v, 50)).max()))
    assert gaps[0] < 3e-3
    assert gaps[0] < gaps[1] < gaps[2]


def test_mean_field_bound_is_exact_for_an_rbm():
    """One hidden layer: the posterior is factorial, so the bound at the fixed point is exact."""
    m = _machine((6, 5), "spin", 2.0)
    v, exact = _exact_data_terms(m)
    torch.testing.assert_close(ais.mean_field_lower_bound(m, v, 5), exact, atol=1e-10, rtol=0)


def test_test_log_likelihood_combines_bound_and_log_z():
    m = _machine((6, 4, 3), "binary", 1.0)
    v, _ = _exact_data_terms(m)
    res = ais.dbm_ais_log_partition(
        m,
        v,
        n_runs=50,
        betas=ais.segmented_schedule(200),
        generator=torch.Generator().manual_seed(1),
    )
    out = ais.dbm_test_log_likelihood(m, v, res, 30)
    bound = ais.mean_field_lower_bound(m, v, 30)
    assert out["ais_ll"] == pytest.approx(float(bound.mean()) - res.log_z)
    assert out["ais_ll_stderr"] >= res.stderr


def test_segmented_schedule_reproduces_the_salakhutdinov_schedule():
    from tapmachine.core.estimators import salakhutdinov_schedule

    torch.testing.assert_close(ais.segmented_schedule(14501), salakhutdinov_schedule())
    s = ais.segmented_schedule(101)
    assert s.numel() == 101 and s[0] == 0 and s[-1] == 1 and (s[1:] > s[:-1]).all()


def test_bad_input_is_rejected():
    m = _machine((6, 4, 3), "binary", 1.0)
    with pytest.raises(ValueError, match="n_runs"):
        ais.dbm_ais_log_partition(m, n_runs=1)
    with pytest.raises(ValueError, match="n_betas"):
        ais.segmented_schedule(2)
    with pytest.raises(ValueError, match="shape"):
        ais.mean_field_lower_bound(m, torch.zeros(3, 5, dtype=DT))
