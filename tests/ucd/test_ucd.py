"""UCD-LMI (second paper) against exact answers by enumeration of tiny RBMs and DBMs.

Levels and seeds are fixed: every z-test uses a Bonferroni bound over all parameters at a
family-wise level of 1e-3 (two-sided), every chi-square test a level of 1e-3; each test draws
from its own seeded generator, so the outcome is deterministic.
"""

import itertools
import math

import pytest
import torch
from scipy import stats

from tapmachine import ucd
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.ucd import Target, UCDSettings

LEVEL = 1e-3
DT = torch.float64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def machine(sizes, seed, units="spin", gain=1.5):
    """Orthogonal couplings scaled by ``gain`` (so that the models are far from uniform)."""
    return ucd.random_machine(sizes, gen(seed), units=units, gain=gain, dtype=DT)


def all_states(m, layers):
    """Every configuration of ``layers`` (a list of per-layer tensors) as rows."""
    blocks = []
    for l in layers:
        n = m.sizes[l]
        bits = torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=DT)
        blocks.append(2 * bits - 1 if isinstance(m.priors[l], Spin) else bits)
    grid = list(itertools.product(*[range(len(b)) for b in blocks]))
    idx = torch.tensor(grid)
    return [blocks[i][idx[:, i]] for i in range(len(layers))]


def params_of(m):
    return [*m.weights, *[p.U for p in m.priors]]


def flat(grads):
    parts = [g.reshape(g.shape[0], -1) for g in grads["weights"]]
    parts += [d["U"].reshape(d["U"].shape[0], -1) for d in grads["priors"]]
    return torch.cat(parts, 1)


def exact_log_z_grad(m, v=None):
    """d ln Z / d theta (or d ln Z(v) / d theta for the posterior) by autograd over enumeration."""
    W = [w.clone().requires_grad_(True) for w in m.weights]
    U = [p.U.clone().requires_grad_(True) for p in m.priors]
    mm = BoltzmannMachine(tuple(type(p)(u) for p, u in zip(m.priors, U, strict=True)), tuple(W))
    if v is None:
        xs = all_states(m, list(range(m.n_layers)))
    else:
        hs = all_states(m, list(range(1, m.n_layers)))
        xs = [v.expand(hs[0].shape[0], -1), *hs]
    log_z = torch.logsumexp(-mm.energy(xs), 0)
    grads = torch.autograd.grad(log_z, [*W, *U])
    return torch.cat([g.reshape(-1) for g in grads])


def ztest(samples, exact):
    """Per-parameter z of the sample mean against the exact value; the Bonferroni threshold."""
    n = samples.shape[0]
    se = samples.std(0) / math.sqrt(n)
    z = (samples.mean(0) - exact) / se.clamp_min(1e-12)
    threshold = stats.norm.ppf(1 - LEVEL / (2 * samples.shape[1]))
    return z, threshold


# ----------------------------------------------------------------------------- local search
@pytest.mark.parametrize("sizes", [(6, 5), (4, 5, 3)])
def test_local_search_monotone_and_blockwise_minimum(sizes):
    m = machine(sizes, 1, gain=2.0)
    target = Target.joint(m)
    g = gen(2)
    x0 = target.uniform(target.blank(200), g)
    found = ucd.local_search(target, x0, g)
    e0, e1 = m.energy(x0), m.energy(found.state)
    assert (e1 <= e0 + 1e-12).all()
    assert (found.steps >= 1).all() and not found.capped.any()
    # every half-step of the search never raises the energy
    xs = x0
    for _ in range(30):
        for parity in (0, 1):
            new = ucd.block_update(target, xs, parity)
            assert (m.energy(new) <= m.energy(xs) + 1e-12).all()
            xs = new
    # block-wise minimum: no configuration of either block beats the final one given the other
    for parity in (0, 1):
        layers = [l for l in range(m.n_layers) if l % 2 == parity]
        configs = all_states(m, layers)
        k = configs[0].shape[0]
        best = torch.full((200,), float("inf"), dtype=DT)
        for i in range(k):  # 2^|block| configurations (< 2^10), each batched over chains
            trial = list(found.state)
            for j, l in enumerate(layers):
                trial[l] = configs[j][i].expand(200, -1)
            best = torch.minimum(best, m.energy(trial))
        assert (m.energy(found.state) <= best + 1e-12).all()
    # started at a block-wise minimum, the search stops after one step without moving
    again = ucd.local_search(target, found.state, g)
    assert (again.steps == 1).all()
    assert target.equal(again.state, found.state).all()


def test_local_search_posterior_keeps_visible_clamped():
    m = machine((5, 4, 3), 3, gain=2.0)
    target = Target.posterior(m)
    g = gen(4)
    v = 2.0 * (torch.rand(50, 5, generator=g, dtype=DT) < 0.5) - 1.0
    x0 = target.uniform(target.blank(50, {0: v}), g)
    found = ucd.local_search(target, x0, g)
    assert torch.equal(found.state[0], v)
    assert (m.energy(found.state) <= m.energy(x0) + 1e-12).all()


# ----------------------------------------------------------------------------- couplings
def _run(kernel, target, x0, steps):
    """X_0..X_steps and Y_0..Y_{steps-1} of a coupling started at X_0 = Y_0 = x0."""
    e0 = kernel.energy(x0)
    xs, ys = [x0], [x0]
    x, ex = kernel.first(x0, e0)
    y, ey = x0, e0
    xs.append(x)
    for _ in range(steps - 1):
        x, ex, y, ey = kernel.coupled(x, ex, y, ey)
        xs.append(x)
        ys.append(y)
    return xs, ys


def exact_joint(m):
    xs = all_states(m, list(range(m.n_layers)))
    return xs, torch.softmax(-m.energy(xs), 0)


def index_of(m, states):
    """Row of each chain's state in the enumeration order of ``all_states``."""
    code = torch.zeros(states[0].shape[0], dtype=torch.long)
    for l in range(m.n_layers):
        bits = (states[l] > 0).long()
        for b in range(bits.shape[1]):
            code = code * 2 + bits[:, b]
    return code


@pytest.mark.parametrize("name", ["mh", "gibbs"])
def test_coupled_chains_keep_the_exact_marginal(name):
    """X_t and Y_t of the coupling are each exact chains: started at pi they stay at pi."""
    m = machine((3, 2), 5)
    xs_all, p = exact_joint(m)
    g = gen(6)
    n = 40_000
    draw = torch.multinomial(p, n, replacement=True, generator=g)
    x0 = [s[draw] for s in xs_all]
    target = Target.joint(m)
    kernel = ucd.COUPLINGS[name](target, g)
    xs, ys = _run(kernel, target, x0, 4)
    for states in (xs[4], ys[3], xs[1]):
        counts = torch.bincount(index_of(m, states), minlength=p.numel()).double()
        chi2, pvalue = stats.chisquare(counts.numpy(), (p * n).numpy())
        assert pvalue > LEVEL, f"{name}: chi2 {chi2:.1f}, p {pvalue:.2e}"


@pytest.mark.parametrize("parity", [0, 1])
@pytest.mark.parametrize("clamp", [False, True])
def test_marginal_energy_sums_out_the_other_parity(parity, clamp):
    """exp(-E_even), exp(-E_odd) (eqs. 20-26) against sums of exp(-E) over the summed layers."""
    m = machine((3, 2, 2), 23, gain=2.0)
    target = Target.marginal(m, parity, clamp_visible=clamp)
    joint = all_states(m, list(range(m.n_layers)))
    if clamp:
        keep = (joint[0] == joint[0][5]).all(-1)  # one visible configuration
        joint = [x[keep] for x in joint]
    log_p = -m.energy(joint)
    shown = [l for l in range(m.n_layers) if l not in target.summed]
    key = torch.cat([joint[l] for l in shown], 1)
    uniq, inverse = torch.unique(key, dim=0, return_inverse=True)
    summed = torch.full((uniq.shape[0],), -float("inf"), dtype=DT)
    summed = summed.scatter_reduce(0, inverse, log_p, reduce="amax")
    summed = (
        summed
        + torch.zeros_like(summed).index_add(0, inverse, torch.exp(log_p - summed[inverse])).log()
    )
    first = [None] * m.n_layers
    col = 0
    for l in shown:
        first[l] = uniq[:, col : col + m.sizes[l]]
        col += m.sizes[l]
    got = -target.energy(first)
    diff = got - summed
    assert torch.allclose(diff, diff[0].expand_as(diff), atol=1e-10)


def test_mh_coupling_keeps_marginalised_targets_exact():
    """The MH coupling on E_even of a DBM: X_t started at exp(-E_even) stays there (chi-square)."""
    m = machine((2, 2, 2), 29)
    target = Target.marginal(m, 0, clamp_visible=False)
    states = all_states(m, [0, 2])
    full = [states[0], None, states[1]]
    p = torch.softmax(-target.energy(full), 0)
    g = gen(30)
    n = 40_000
    draw = torch.multinomial(p, n, replacement=True, generator=g)
    x0 = [full[0][draw], None, full[2][draw]]
    kernel = ucd.MHCoupling(target, g)
    xs, ys = _run(kernel, target, x0, 3)
    powers = 2 ** torch.arange(3, -1, -1)  # all_states orders configurations as binary numbers
    for st in (xs[3], ys[2]):
        idx = ((torch.cat([st[0], st[2]], 1) > 0).long() * powers).sum(1)
        counts = torch.bincount(idx, minlength=16).double()
        assert stats.chisquare(counts.numpy(), (p * n).numpy()).pvalue > LEVEL


def test_coupled_chains_detect_a_wrong_marginal():
    """The chi-square test has power: frequencies of a tempered model are rejected."""
    m = machine((3, 2), 5)
    xs_all, p = exact_joint(m)
    hot = BoltzmannMachine(m.priors, tuple(0.7 * w for w in m.weights))
    g = gen(6)
    n = 40_000
    draw = torch.multinomial(exact_joint(hot)[1], n, replacement=True, generator=g)
    counts = torch.bincount(draw, minlength=p.numel()).double()
    assert stats.chisquare(counts.numpy(), (p * n).numpy()).pvalue < LEVEL


@pytest.mark.parametrize("name", ["mh", "gibbs"])
def test_coupling_meets_and_stays_met(name):
    m = machine((4, 3), 7)
    target = Target.joint(m)
    g = gen(8)
    x0 = target.uniform(target.blank(500), g)
    kernel = ucd.COUPLINGS[name](target, g)
    steps = 200
    xs, ys = _run(kernel, target, x0, steps)
    met = torch.stack([target.equal(xs[t], ys[t - 1]) for t in range(1, steps + 1)])  # t = 1..
    assert met[-1].all(), "every chain should have met within 200 steps"
    tau = met.long().argmax(0) + 1
    after = torch.arange(1, steps + 1)[:, None] >= tau[None, :]
    assert met[after].all(), "X_t = Y_{t-1} must hold for every t >= tau"
    assert (tau > 1).any() and (tau == 1).any()
    # the driver's tau has the same distribution: compare means loosely (different draws)
    est = ucd.couple(target, ucd.COUPLINGS[name](target, gen(9)), x0, cap=1000)
    assert abs(est[1].double().mean() - tau.double().mean()) < 0.25 * tau.double().mean()


def test_maximal_coupling_of_identical_conditionals_is_the_identity():
    m = machine((5, 4), 9)
    target = Target.joint(m)
    g = gen(10)
    xs = target.uniform(target.blank(300), g)
    fields = {1: m.input_to(1, xs)}
    bx, by, left = ucd.maximal_coupling(target, [1], fields, fields, g)
    assert torch.equal(bx[1], by[1]) and left == 0


def test_cap_is_reported_when_hit():
    """Gibbs couplings of a 60 x 60 RBM do not meet in 5 steps: tau = cap, flagged capped."""
    m = machine((60, 60), 31, gain=1.0)
    est = ucd.coupling_steps(m, "gibbs", 50, 5, gen(32))
    assert est.capped.any()
    assert (est.tau[est.capped] == 5).all() and (est.tau <= 5).all()
    summary = est.summary()
    assert summary["capped"] == float(est.capped.sum())
    assert summary["corrected_fraction"] == pytest.approx(float((est.tau > 1).double().mean()))


def test_mh_first_rejection_gives_tau_one():
    """tau = 1 exactly for the chains whose first proposal is rejected (x_1 = y_0)."""
    m = machine((30, 30), 11, gain=1.0)
    est = ucd.coupling_steps(m, "mh_lmi", 300, 100, gen(12))
    assert (est.tau == 1).float().mean() > 0.9
    assert not est.corrected[est.tau == 1].any()


# ----------------------------------------------------------------------------- unbiasedness
CASES = {
    "rbm": (3, 3),
    "dbm": (2, 3, 2),
}


def _draws(m, settings, seed, n, v=None):
    if v is None:
        est = ucd.model_expectation(m, n, settings, gen(seed), per_chain=True)
    else:
        est = ucd.posterior_expectation(m, v.expand(n, -1), settings, gen(seed), per_chain=True)
    assert not est.capped.any()
    return flat(est.grads), est


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    m = machine(CASES[request.param], 13)
    v = torch.tensor([[1.0, -1.0] + [1.0] * (m.sizes[0] - 2)], dtype=DT)
    return request.param, m, v


N_DRAWS = 40_000


@pytest.mark.parametrize("phase", ["model", "posterior"])
def test_estimator_is_unbiased_and_marginalising_reduces_variance(case, phase):
    name, m, v = case
    v = None if phase == "model" else v
    exact = exact_log_z_grad(m, v)
    report = {}
    for marg in (False, True):
        settings = UCDSettings(coupling="mh", init="local_mode", marginalise=marg, cap=10_000)
        samples, est = _draws(m, settings, 100 + marg, N_DRAWS, v)
        z, threshold = ztest(samples, exact)
        report[marg] = (samples.var(0).sum().item(), z.abs().max().item())
        print(
            f"{name}/{phase} marginalise={marg}: max|z| {z.abs().max():.2f} (bound "
            f"{threshold:.2f}), total variance {samples.var(0).sum():.4f}, "
            f"corrected {est.corrected.double().mean():.3f}"
        )
        assert z.abs().max() < threshold, f"{name}/{phase} marginalise={marg}: z = {z}"
    assert report[True][0] < report[False][0], report


def test_gibbs_coupling_estimator_is_unbiased(case):
    name, m, _ = case
    exact = exact_log_z_grad(m)
    settings = UCDSettings(coupling="gibbs", init="uniform", marginalise=False, cap=10_000)
    samples, _ = _draws(m, settings, 200, N_DRAWS)
    z, threshold = ztest(samples, exact)
    print(f"{name}/gibbs: max|z| {z.abs().max():.2f} (bound {threshold:.2f})")
    assert z.abs().max() < threshold


def test_local_mode_alone_is_biased(case):
    """f(X_0) without the correction of eq. 10 fails the same z-test."""
    name, m, _ = case
    exact = exact_log_z_grad(m)
    target = Target.joint(m)
    x0, _, _ = ucd.initial_state(target, N_DRAWS, gen(300), "local_mode")
    samples = flat(target.statistics(x0, per_chain=True))
    z, threshold = ztest(samples, exact)
    print(f"{name}/local mode alone: max|z| {z.abs().max():.2f} (bound {threshold:.2f})")
    assert z.abs().max() > threshold


def test_binary_units_estimator_is_unbiased():
    """{0, 1} units (no centering) go through the same code."""
    m = machine((3, 2), 17, units="binary", gain=2.5)
    exact = exact_log_z_grad(m)
    samples, _ = _draws(m, UCDSettings(cap=10_000), 400, N_DRAWS)
    z, threshold = ztest(samples, exact)
    assert z.abs().max() < threshold


# ----------------------------------------------------------------------------- API and init
def test_gradient_structure_and_summary():
    m = machine((6, 5, 4), 19)
    v = 2.0 * (torch.rand(8, 6, generator=gen(20), dtype=DT) < 0.5) - 1.0
    grads, pos, neg = ucd.log_likelihood_gradient(m, v, UCDSettings(), gen(21), n_chains=16)
    assert [tuple(w.shape) for w in grads["weights"]] == [(6, 5), (5, 4)]
    assert [tuple(p["U"].shape) for p in grads["priors"]] == [(6,), (5,), (4,)]
    assert pos.tau.shape == (8,) and neg.tau.shape == (16,)
    summary = neg.summary("neg_")
    assert set(summary) >= {"neg_tau_mean", "neg_corrected_fraction", "neg_T_mean", "neg_capped"}


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="coupling"):
        UCDSettings(coupling="hmc")
    with pytest.raises(ValueError, match="cap"):
        UCDSettings(cap=0)
    with pytest.raises(ValueError, match="marginalised"):
        UCDSettings(coupling="gibbs", marginalise=True)
    with pytest.raises(ValueError, match="method"):
        ucd.coupling_steps(machine((2, 2), 1), "mala", 2, 2, gen(0))


def test_non_binary_units_are_rejected():
    from tapmachine.core.priors import TruncatedGaussian

    m = BoltzmannMachine(
        (TruncatedGaussian(torch.zeros(3), torch.ones(3), 0.0, 1.0), Bernoulli(torch.zeros(2))),
        (torch.zeros(3, 2),),
    )
    with pytest.raises(ValueError, match="binary units"):
        Target.joint(m)


def test_orthogonal_and_logistic_init():
    g = gen(22)
    for rows, cols in [(7, 7), (9, 4), (4, 9)]:
        W = ucd.orthogonal(rows, cols, g, torch.float64)
        small = min(rows, cols)
        gram = W.T @ W if rows >= cols else W @ W.T
        assert torch.allclose(gram, torch.eye(small, dtype=DT), atol=1e-12)
    b = ucd.logistic(200_000, g, dtype=torch.float64)
    # Logistic(0, s): mean 0, variance s^2 pi^2 / 3 with s = 0.5
    assert abs(b.mean()) < 0.01
    assert b.var().item() == pytest.approx(0.25 * math.pi**2 / 3, rel=0.02)
    m = ucd.random_machine([5, 4, 3], g)
    assert all(isinstance(p, Spin) for p in m.priors)
    assert torch.equal(ucd.to_spin(torch.tensor([0.0, 1.0])), torch.tensor([-1.0, 1.0]))


@pytest.mark.parametrize("parity", [None, 0, 1])
def test_mh_meeting_probability_is_the_exact_rejection_probability(parity):
    """P(tau = 1 | X_0 = Y_0 = x0) = 1 - E_{x' ~ Unf}[min(1, exp(E(x0) - E(x')))] + 1 / |S|: the
    first proposal rejected (Sec. 3.3), or x' = x0 itself (then x_1 = y_0 as well), on the joint
    and the marginalised targets (S the free layers' states).

    So tau = 1 in DBM training is the meeting rule working, not a wrong comparison: from a local
    mode of a 784-200-200 DBM the log acceptance of a uniform proposal is about -1,600 to -2,500.
    """
    m = machine((4, 3, 2), 17, gain=1.0)
    target = Target.joint(m) if parity is None else Target.marginal(m, parity, False)
    states = [None] * m.n_layers
    for l, x in zip(target.free, all_states(m, target.free), strict=True):
        states[l] = x
    x0_row = 5
    x0 = [None if x is None else x[x0_row : x0_row + 1] for x in states]
    e0 = target.energy(x0)
    accept = torch.exp(torch.clamp(e0 - target.energy(states), max=0.0)).mean()
    exact = float(1.0 - accept) + 1.0 / states[target.free[0]].shape[0]
    n = 20_000
    start = [None if x is None else x.expand(n, -1).clone() for x in x0]
    _, tau, _ = ucd.couple(target, ucd.MHCoupling(target, gen(23)), start, cap=10_000)
    observed = float((tau == 1).double().mean())
    se = math.sqrt(exact * (1 - exact) / n)
    assert 0.05 < exact < 0.95
    assert abs(observed - exact) < 4 * se, (observed, exact, se)


@pytest.mark.parametrize("units", ["spin", "binary"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_block_update_is_binary_mode_of_input_to_exactly(units, dtype):
    """The fused block update (fields summed and thresholded in place) gives exactly the values
    of ``binary_mode(prior, input_to)``, ties at zero field included, and leaves its input alone;
    clamped layers (the posterior's visible layer) stay."""
    m = ucd.random_machine([7, 6, 5, 4], gen(3), units=units, gain=2.0, dtype=dtype)
    v = Target.joint(m).uniform(Target.joint(m).blank(300), gen(5))[0]
    for target in (Target.joint(m), Target.posterior(m)):
        xs = target.uniform(target.blank(300, {0: v}), gen(4))
        before = [x.clone() for x in xs]
        for parity in (0, 1):
            new = ucd.block_update(target, xs, parity)
            for l in range(m.n_layers):
                expected = xs[l]
                if l in target.free and l % 2 == parity:
                    expected = ucd.binary_mode(m.priors[l], m.input_to(l, xs))
                assert torch.equal(new[l], expected), (l, parity)
        assert all(torch.equal(a, b) for a, b in zip(xs, before, strict=True))
    # ties: zero couplings and biases put every field at exactly 0, the mode's +1 / 1 side
    zero = BoltzmannMachine(
        tuple(type(p)(torch.zeros_like(p.U)) for p in m.priors),
        tuple(torch.zeros_like(w) for w in m.weights),
    )
    target = Target.joint(zero)
    new = ucd.block_update(target, target.uniform(target.blank(10), gen(6)), 1)
    assert all((new[l] == 1).all() for l in (1, 3))
