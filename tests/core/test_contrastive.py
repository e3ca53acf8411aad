"""CD-k and PCD gradients against the exact log-likelihood gradient of enumerable RBMs."""

from __future__ import annotations

import torch

from tapmachine.core import contrastive as cd
from tapmachine.core.estimators import exact_log_partition
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussian

NV, NH = 6, 4


def _machine(seed, std=0.5, prior=Bernoulli):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(NV, NH, generator=g, dtype=torch.float64) * std
    Uv = torch.randn(NV, generator=g, dtype=torch.float64) * 0.5
    Uh = torch.randn(NH, generator=g, dtype=torch.float64) * 0.5
    return RBM(W, prior(Uv), prior(Uh))


def _dataset(n=60, seed=0):
    """Two prototypes with 10% bit flips: a clearly structured 6-bit distribution."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1]], dtype=torch.float64)
    x = protos[torch.randint(0, 2, (n,), generator=g)]
    flips = torch.rand(n, NV, generator=g, dtype=torch.float64) < 0.1
    return torch.where(flips, 1.0 - x, x)


def _with_params(machine, params):
    W, Uv, Uh = params
    return machine.replace(
        priors=[machine.visible.replace(U=Uv), machine.hidden.replace(U=Uh)], weights=[W]
    )


def _mean_log_likelihood(machine, x):
    return (-machine.free_energy_visible(x)).mean() - exact_log_partition(machine)


def _exact_gradient(machine, x):
    """d/dtheta of the exactly enumerated mean log-likelihood, by autograd."""
    params = [machine.W.clone(), machine.visible.U.clone(), machine.hidden.U.clone()]
    for p in params:
        p.requires_grad_(True)
    ll = _mean_log_likelihood(_with_params(machine, params), x)
    return torch.autograd.grad(ll, params)


def _flat(grads: dict) -> torch.Tensor:
    """Gradient dict -> one vector: W, then each prior's parameters in sorted-name order."""
    parts = [grads["weights"][0].reshape(-1)]
    parts += [layer[k].reshape(-1) for layer in grads["priors"] for k in sorted(layer)]
    return torch.cat(parts)


def _autograd(machine, fn):
    """d fn(machine) / d(all parameters), flattened in the order of ``_flat``."""
    W = machine.W.clone().requires_grad_(True)
    leaves, priors = [W], []
    for prior in machine.priors:
        new = {k: v.clone().requires_grad_(True) for k, v in sorted(prior.params().items())}
        leaves += list(new.values())
        priors.append(prior.replace(**new))
    value = fn(machine.replace(priors=priors, weights=[W]))
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, leaves)])


def _tg_machine(seed, nv=4, nh=3, std=0.5):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(nv, nh, generator=g, dtype=torch.float64) * std
    U = torch.randn(nv, generator=g, dtype=torch.float64)
    V = torch.rand(nv, generator=g, dtype=torch.float64) + 0.5
    hidden = Bernoulli(torch.randn(nh, generator=g, dtype=torch.float64) * 0.5)
    return RBM(W, TruncatedGaussian(U, V, -1.0, 1.0), hidden)


def _cosine(a, b):
    return float(a @ b / (a.norm() * b.norm()))


def _all_states(n, spin=False):
    codes = torch.arange(2**n)
    s = ((codes[:, None] >> torch.arange(n)) & 1).to(torch.float64)
    return 2 * s - 1 if spin else s


def test_output_structure():
    m, x = _machine(0), _dataset()
    g = cd.cd_gradients(m, x, 1, torch.Generator().manual_seed(0))
    assert set(g) == {"weights", "priors"} and len(g["weights"]) == 1 and len(g["priors"]) == 2
    assert g["weights"][0].shape == (NV, NH)
    assert g["priors"][0]["U"].shape == (NV,) and g["priors"][1]["U"].shape == (NH,)


def test_positive_phase_is_gradient_of_minus_free_energy():
    """Eqs. (12)-(14), data terms: exactly d/dtheta of mean(-F(x))."""
    for prior in (Bernoulli, Spin):
        m = _machine(1, prior=prior)
        x = _dataset()
        if prior is Spin:
            x = 2 * x - 1
        params = [m.W.clone(), m.visible.U.clone(), m.hidden.U.clone()]
        for p in params:
            p.requires_grad_(True)
        target = torch.autograd.grad(
            (-_with_params(m, params).free_energy_visible(x)).mean(), params
        )
        pos = cd.positive_phase(m, x)
        assert torch.allclose(_flat(pos), torch.cat([t.reshape(-1) for t in target]), atol=1e-12)


def test_positive_phase_truncated_gaussian_layers():
    """Same identity with truncated-Gaussian visible (U, V) or hidden units."""
    m = _tg_machine(4, nv=5, nh=3)
    x = 1.8 * torch.rand(20, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = x - 0.9
    target = _autograd(m, lambda mm: (-mm.free_energy_visible(x)).mean())
    assert torch.allclose(_flat(cd.positive_phase(m, x)), target, atol=1e-12)
    flipped = RBM(m.W.T.contiguous(), m.hidden, m.visible)  # binary visible, TG hidden
    xb = _all_states(3)
    target = _autograd(flipped, lambda mm: (-mm.free_energy_visible(xb)).mean())
    assert torch.allclose(_flat(cd.positive_phase(flipped, xb)), target, atol=1e-12)


def test_cd_truncated_gaussian_visible_points_uphill():
    m = _tg_machine(5)
    x = 1.8 * torch.rand(40, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = x - 0.9
    exact = _autograd(m, lambda mm: _mean_log_likelihood(mm, x))
    est = _flat(cd.cd_gradients(m, x.repeat(100, 1), 1, torch.Generator().manual_seed(0)))
    assert float(est @ exact) > 0 and _cosine(est, exact) > 0.9, _cosine(est, exact)


def test_model_average_of_statistics_is_gradient_of_log_z():
    """The Rao-Blackwellised negative statistics, averaged under the exact model, give d ln Z."""
    m = _machine(2, std=0.8)
    states = _all_states(NV)
    p = torch.exp(-m.free_energy_visible(states) - exact_log_partition(m))
    params = [m.W.clone(), m.visible.U.clone(), m.hidden.U.clone()]
    for q in params:
        q.requires_grad_(True)
    target = torch.autograd.grad(exact_log_partition(_with_params(m, params)), params)
    # weight each state's statistics by its probability: replicate rows in proportion
    stats = [cd.sufficient_statistics(m, s[None]) for s in states]
    avg = sum(pi * _flat(st) for pi, st in zip(p, stats, strict=True))
    assert torch.allclose(avg, torch.cat([t.reshape(-1) for t in target]), atol=1e-10)


def test_cd_and_pcd_point_uphill():
    """CD-1, CD-10 and PCD, averaged over many chains, align with the exact gradient."""
    m, x = _machine(3, std=0.5), _dataset()
    exact = torch.cat([t.reshape(-1) for t in _exact_gradient(m, x)])
    xs = x.repeat(100, 1)  # 6000 chains, 100 per data row
    g = torch.Generator().manual_seed(0)
    cos = {}
    for k in (1, 10):
        est = _flat(cd.cd_gradients(m, xs, k, g))
        assert float(est @ exact) > 0
        cos[f"cd{k}"] = _cosine(est, exact)
    chains = cd.PersistentChains.from_data(x, n_chains=6000, generator=g)
    for _ in range(20):  # burn-in under fixed parameters
        chains.advance(m, 5, g)
    est = _flat(cd.pcd_gradients(m, xs, chains, 1, g))
    assert float(est @ exact) > 0
    cos["pcd"] = _cosine(est, exact)
    assert cos["cd10"] > 0.9 and cos["pcd"] > 0.95, cos


def test_persistent_chains_from_data():
    x = _dataset(10)
    chains = cd.PersistentChains.from_data(
        x, n_chains=25, generator=torch.Generator().manual_seed(0)
    )
    assert chains.visible.shape == (25, NV) and chains.n_chains == 25
    rows = {tuple(r.tolist()) for r in x}
    assert all(tuple(r.tolist()) in rows for r in chains.visible)
    # every row is used before any is repeated
    assert len({tuple(r.tolist()) for r in chains.visible[:10]}) == len(rows)


def test_pcd_training_raises_exact_log_likelihood():
    """Plain SGD with PCD-1 gradients on a structured 6-bit dataset."""
    x = _dataset(n=64, seed=1)
    g = torch.Generator().manual_seed(0)
    m = RBM(
        torch.randn(NV, NH, generator=g, dtype=torch.float64) * 0.01,
        Bernoulli(torch.zeros(NV, dtype=torch.float64)),
        Bernoulli(torch.zeros(NH, dtype=torch.float64)),
    )
    chains = cd.PersistentChains.from_data(x, n_chains=100, generator=g)
    lr = 0.3
    start = float(_mean_log_likelihood(m, x))
    for _ in range(300):
        grad = cd.pcd_gradients(m, x, chains, 1, g)
        m = m.replace(
            priors=[
                p.replace(U=p.U + lr * d["U"])
                for p, d in zip(m.priors, grad["priors"], strict=True)
            ],
            weights=[m.W + lr * grad["weights"][0]],
        )
    end = float(_mean_log_likelihood(m, x))
    # uniform start: -6 ln 2 = -4.16 nats per row; the generating distribution's entropy is
    # 2.6 nats (the 64 training rows allow somewhat more)
    assert end - start > 1.0 and end > -3.0, (start, end)
