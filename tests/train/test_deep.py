"""Deep TAP machines (App. E, Alg. 4) against exact enumeration and finite differences."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from tiny_models import settings as tiny_settings

from tapmachine.core import tap
from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.train import PretrainSettings, TrainSettings, train
from tapmachine.train.pretrain import layer_inputs, pretrain

DT = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _configs(prior, n):
    codes = torch.arange(2**n)
    bits = ((codes[:, None] >> torch.arange(n)) & 1).to(DT)
    return 2.0 * bits - 1.0 if isinstance(prior, Spin) else bits


def _exact(machine, x=None):
    """Exact ln Z, and ln P(x) of the rows of ``x``, of a layered binary machine.

    The odd layers are enumerated jointly; given them the even layers are independent and
    summed in closed form (ln Z_l(field, 0) per unit). With ``x`` the visible layer is fixed.
    """
    odd = list(range(1, machine.n_layers, 2))
    grids = [_configs(machine.priors[l], machine.sizes[l]) for l in odd]
    index = torch.tensor(list(itertools.product(*[range(len(g)) for g in grids])))
    states = {l: g[index[:, i]] for i, (l, g) in enumerate(zip(odd, grids, strict=True))}

    def even_terms(skip_visible, x0=None):
        total = sum(machine.priors[l].log_prob(states[l]).sum(-1) for l in odd)
        for l in range(0, machine.n_layers, 2):
            field = 0.0
            if l > 0:
                field = field + states[l - 1] @ machine.weights[l - 1]
            if l < len(machine.weights):
                field = field + states[l + 1] @ machine.weights[l].T
            if l == 0 and skip_visible:
                # visible fixed at x0: the coupling term and ln P_0(x0)
                total = (
                    total[None, :] + x0 @ field.T + machine.priors[0].log_prob(x0).sum(-1)[:, None]
                )
                continue
            total = total + machine.priors[l].log_partition(field, torch.zeros_like(field)).sum(-1)
        return total

    log_z = torch.logsumexp(even_terms(False), 0)
    if x is None:
        return log_z, None
    return log_z, torch.logsumexp(even_terms(True, x), 1) - log_z


def _machine(prior_cls, sizes, scale, seed, positive=True):
    g = _gen(seed)
    ws = []
    for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True):
        W0 = torch.randn(n0, n1, dtype=DT, generator=g)
        ws.append(scale * (W0.abs() if positive else W0))
    field = -1.4 if prior_cls is Bernoulli else 0.5
    ps = [prior_cls(field + 0.3 * torch.randn(n, dtype=DT, generator=g)) for n in sizes]
    return BoltzmannMachine(tuple(ps), tuple(ws))


def test_enumerator_matches_rbm_closed_form():
    """The helper itself: for an RBM, ln P(x) = -F(x) - ln Z with F summed in closed form."""
    from tapmachine.core.estimators import exact_log_partition

    m = _machine(Bernoulli, (7, 5), 0.5, 0, positive=False)
    x = _configs(m.visible, 7)[:9]
    log_z, log_px = _exact(m, x)
    torch.testing.assert_close(log_z, exact_log_partition(m))
    torch.testing.assert_close(log_px, -m.free_energy_visible(x) - log_z)


@pytest.mark.parametrize("prior_cls", [Bernoulli, Spin])
def test_free_and_clamped_free_energies_cubic_in_couplings(prior_cls):
    """3 hidden layers: -F_TAP (free) -> ln Z and -F_TAP (clamped) -> the clamped
    log-partition of eq. (121), with errors falling as the cube of the coupling scale."""
    sizes = (6, 5, 4, 4)
    base = _machine(prior_cls, sizes, 1.0, 1)
    x = _configs(base.visible, sizes[0])[torch.randint(0, 64, (3,), generator=_gen(2))]
    scales = (0.008, 0.016, 0.032) if prior_cls is Bernoulli else (0.002, 0.004, 0.008)
    err_free, err_clamped = [], []
    for s in scales:
        m = base.replace(weights=[s * W for W in base.weights])
        free = tap.solve(m, torch.rand(3, sizes[0], dtype=DT, generator=_gen(3)), tol=1e-30)
        clamped = tap.solve(m, clamp=x, tol=1e-30)
        assert free.converged.all() and clamped.converged.all()
        log_z, log_px = _exact(m, x)
        err_free.append(float((-tap.free_energy(m, free) - log_z).abs().max()))
        # clamped log-partition: ln P(x) + ln Z - ln P_0(x)
        target = log_px + log_z - m.visible.log_prob(x).sum(-1)
        err_clamped.append(float((-tap.free_energy(m, clamped) - target).abs().max()))
    for errors in (err_free, err_clamped):
        slope = np.polyfit(np.log(scales), np.log(errors), 1)[0]
        assert 2.8 <= slope <= 3.3, (errors, slope)


def test_two_layer_dbm_with_zero_upper_couplings_is_the_rbm():
    g = _gen(4)
    rbm = _machine(Bernoulli, (8, 6), 0.4, 5, positive=False)
    top = Bernoulli(torch.randn(3, dtype=DT, generator=g))
    dbm = BoltzmannMachine((*rbm.priors, top), (rbm.W, torch.zeros(6, 3, dtype=DT)))
    x = torch.bernoulli(torch.full((5, 8), 0.4, dtype=DT), generator=g)
    init = torch.rand(4, 8, dtype=DT, generator=g)
    s_rbm = tap.solve(rbm, init, tol=1e-28)
    s_dbm = tap.solve(dbm, init, tol=1e-28)
    for l in (0, 1):
        torch.testing.assert_close(s_dbm.a[l], s_rbm.a[l], rtol=0, atol=1e-12)
    # the top layer sits at its prior, contributing nothing to F
    torch.testing.assert_close(s_dbm.a[2], torch.sigmoid(top.U).expand(4, 3))
    torch.testing.assert_close(tap.free_energy(dbm, s_dbm), tap.free_energy(rbm, s_rbm))
    ll_dbm = tap.log_likelihood(dbm, x, s_dbm, tol=1e-28)
    torch.testing.assert_close(ll_dbm, tap.log_likelihood(rbm, x, s_rbm), rtol=0, atol=1e-12)
    g_dbm = tap.tap_gradients(dbm, x, s_dbm, tol=1e-28)
    g_rbm = tap.tap_gradients(rbm, x, s_rbm)
    torch.testing.assert_close(g_dbm["weights"][0], g_rbm["weights"][0], rtol=0, atol=1e-12)
    for l in (0, 1):
        torch.testing.assert_close(g_dbm["priors"][l]["U"], g_rbm["priors"][l]["U"])
    # and the exact likelihoods agree as well
    torch.testing.assert_close(_exact(dbm, x)[1], _exact(rbm, x)[1])


@pytest.mark.parametrize("sizes", [(6, 5, 4), (5, 4, 4, 3)])
def test_joint_gradients_match_finite_differences(sizes):
    """Eqs. (126)-(129) at converged free and clamped solutions = d/dtheta of the batch-mean TAP
    log-likelihood (eq. 121) with the solutions re-solved (they are stationary points)."""
    m = _machine(Bernoulli, sizes, 0.5, 6, positive=False)
    g = _gen(7)
    x = torch.bernoulli(torch.full((4, sizes[0]), 0.5, dtype=DT), generator=g)
    init = torch.rand(3, sizes[0], dtype=DT, generator=g)
    kw = {"tol": 1e-30, "max_iter": 5000, "damping": 0.3}

    def ll(machine):
        free = tap.solve(machine, init, **kw)
        clamped = tap.solve(machine, clamp=x, **kw)
        assert free.converged.all() and clamped.converged.all()
        return float(tap.log_likelihood(machine, x, free, clamped=clamped).mean())

    free = tap.solve(m, init, **kw)
    grads = tap.tap_gradients(m, x, free, clamped=tap.solve(m, clamp=x, **kw))
    h = 1e-5
    for l, W in enumerate(m.weights):
        for i, j in ((0, 0), (W.shape[0] - 1, W.shape[1] - 1), (1, 2)):
            plus, minus = W.clone(), W.clone()
            plus[i, j] += h
            minus[i, j] -= h
            ws_p = [plus if k == l else w for k, w in enumerate(m.weights)]
            ws_m = [minus if k == l else w for k, w in enumerate(m.weights)]
            fd = (ll(m.replace(weights=ws_p)) - ll(m.replace(weights=ws_m))) / (2 * h)
            assert abs(fd - float(grads["weights"][l][i, j])) < 1e-6, (l, i, j)
    for l, prior in enumerate(m.priors):
        U = prior.U
        plus, minus = U.clone(), U.clone()
        plus[1] += h
        minus[1] -= h
        ps_p = [p.replace(U=plus) if k == l else p for k, p in enumerate(m.priors)]
        ps_m = [p.replace(U=minus) if k == l else p for k, p in enumerate(m.priors)]
        fd = (ll(m.replace(priors=ps_p)) - ll(m.replace(priors=ps_m))) / (2 * h)
        assert abs(fd - float(grads["priors"][l]["U"][1])) < 1e-6, l


def _tiny_data(n=120, seed=8):
    """Three 8-pixel prototypes with 5% flipped pixels."""
    g = _gen(seed)
    protos = torch.tensor(
        [[1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1], [1, 0, 1, 0, 1, 0, 1, 0]], dtype=DT
    )
    x = protos[torch.randint(0, 3, (n,), generator=g)]
    flip = torch.rand(x.shape, dtype=DT, generator=g) < 0.05
    return torch.where(flip, 1.0 - x, x)


def test_pretraining_then_joint_training_raises_exact_log_likelihood(capsys):
    x = _tiny_data()
    g = _gen(9)
    sizes = (8, 6, 4)
    mean = x.mean(0).clamp(1e-3, 1 - 1e-3)
    priors = [Bernoulli(torch.log(mean) - torch.log1p(-mean))]
    priors += [Bernoulli(torch.zeros(n, dtype=DT)) for n in sizes[1:]]
    weights = [
        0.1 * torch.randn(a, b, dtype=DT, generator=g)
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    m0 = BoltzmannMachine(tuple(priors), tuple(weights))
    settings = TrainSettings(
        epochs=30, batch_size=20, learning_rate=0.05, l2=0.0, eval_samples=20, train_iterations=5
    )
    pre = PretrainSettings(epochs=30, learning_rate=0.05)
    m1, histories = pretrain(m0, x, settings, pre, g, progress=False)
    assert len(histories) == 2 and all(len(h) == 30 for h in histories)
    # the stacked machine keeps the RBMs' couplings and the first RBM's visible prior
    assert m1.sizes == sizes
    m2, _ = train(m1, x, settings, g, progress=False)
    lls = [float(_exact(m, x)[1].mean()) for m in (m0, m1, m2)]
    with capsys.disabled():
        print(
            f"\nexact mean ln P(x): initial {lls[0]:.4f}, "
            f"pretrained {lls[1]:.4f}, joint {lls[2]:.4f}"
        )
    assert lls[1] > lls[0] + 0.5
    assert lls[2] > lls[1]


def test_pretraining_feeds_magnetisations_and_resumes(tmp_path):
    x = _tiny_data(60)
    g = _gen(10)
    m0 = BoltzmannMachine(
        (
            Bernoulli(torch.zeros(8, dtype=DT)),
            Bernoulli(torch.zeros(5, dtype=DT)),
            Bernoulli(torch.zeros(3, dtype=DT)),
        ),
        (
            0.01 * torch.randn(8, 5, dtype=DT, generator=g),
            0.01 * torch.randn(5, 3, dtype=DT, generator=g),
        ),
    )
    settings = TrainSettings(epochs=2, batch_size=20, learning_rate=0.05, eval_samples=10)
    pre = PretrainSettings(epochs=2, learning_rate=0.05)
    state = _gen(11).get_state()

    def run():  # the same call and generator state; a second call resumes from the checkpoints
        g = torch.Generator().manual_seed(0).set_state(state)
        return pretrain(m0, x, settings, pre, g, tmp_path, progress=False)[0]

    a = run()
    assert (tmp_path / "layer_1" / "epoch_2.pt").exists() and (
        tmp_path / "layer_2" / "epoch_2.pt"
    ).exists()
    b = run()
    for u, v in zip(a.weights, b.weights, strict=True):
        torch.testing.assert_close(u, v, rtol=0, atol=0)
    rbm = RBM(a.W, a.visible, a.hidden)
    torch.testing.assert_close(layer_inputs(rbm, x), torch.sigmoid(x @ a.W + a.hidden.U))
    drawn = layer_inputs(rbm, x, sample=True, generator=_gen(13))
    assert set(drawn.unique().tolist()) <= {0.0, 1.0}
    # Alg. 4's literal variant: the next RBM trains on one draw of binary states
    pre_s = PretrainSettings(epochs=2, learning_rate=0.05, inputs="samples")
    c, _ = pretrain(m0, x, settings, pre_s, _gen(14), progress=False)
    assert c.sizes == a.sizes and not torch.equal(c.weights[1], a.weights[1])


def test_adatap_inference_trains_an_rbm():
    """inference: adatap in the training loop raises the exact log-likelihood, about as much as
    TAP gradients do (App. D: "roughly equivalent")."""
    from tapmachine.core.estimators import exact_log_partition

    x = _tiny_data()
    g = _gen(12)
    mean = x.mean(0).clamp(1e-3, 1 - 1e-3)
    m0 = RBM(
        0.1 * torch.randn(8, 5, dtype=DT, generator=g),
        Bernoulli(torch.log(mean) - torch.log1p(-mean)),
        Bernoulli(torch.zeros(5, dtype=DT)),
    )
    settings = tiny_settings(
        epochs=30, batch_size=20, eval_samples=20, train_iterations=10, inference="adatap"
    )
    m1, _ = train(m0, x, settings, _gen(1), progress=False)
    tap_settings = dataclasses.replace(settings, inference="tap")
    m_tap, _ = train(m0, x, tap_settings, _gen(1), progress=False)

    def exact_ll(m):
        return float((-m.free_energy_visible(x) - exact_log_partition(m)).mean())

    print(
        f"exact ln P: initial {exact_ll(m0):.4f} "
        f"adaTAP {exact_ll(m1):.4f} TAP {exact_ll(m_tap):.4f}"
    )
    assert exact_ll(m1) > exact_ll(m0) + 0.5
    assert abs(exact_ll(m1) - exact_ll(m_tap)) < 0.5
