"""Denoising (Sec. VII.4): channels, OPE, 1-NN, TAP denoiser and MCC against exact answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import matthews_corrcoef

from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli, TruncatedGaussBernoulli
from tapmachine.tap_paper import denoise

DT = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _rbm(nv, nh, scale, seed):
    g = _gen(seed)
    W = scale * torch.randn(nv, nh, dtype=DT, generator=g)
    return RBM(
        W,
        Bernoulli(-0.5 + 0.5 * torch.randn(nv, dtype=DT, generator=g)),
        Bernoulli(0.3 * torch.randn(nh, dtype=DT, generator=g)),
    )


def _all_states(n):
    codes = torch.arange(2**n)
    return ((codes[:, None] >> torch.arange(n)) & 1).to(DT)


def _exact_posterior_means(machine, y, p):
    """<x_i> under P(x | y) proportional to P(y | x) P(x), every x enumerated (eq. 45)."""
    X = _all_states(machine.sizes[0])
    log_prior = -machine.free_energy_visible(X)  # ln P(x) + ln Z
    flips = (X[None, :, :] != y[:, None, :]).to(DT)  # (K, 2^n, n)
    log_lik = (flips * math.log(p) + (1 - flips) * math.log(1 - p)).sum(-1)  # eq. 43
    w = torch.softmax(log_lik + log_prior[None, :], dim=1)
    return w @ X


# --- channel field and OPE (eqs. 44, 46) ------------------------------------------------------


def test_channel_field_sign_matches_one_bit_posterior():
    """D = ln((1-p)/p)(2y-1): the log-odds P(y|x=1)/P(y|x=0) of one bit, computed from eq. 43."""
    y = torch.tensor([[0.0, 1.0]], dtype=DT)
    for p in (0.05, 0.2, 0.4):
        D = denoise.channel_field(y, p)
        exact = torch.tensor([[math.log(p / (1 - p)), math.log((1 - p) / p)]], dtype=DT)
        torch.testing.assert_close(D, exact)


def test_ope_hand_cases():
    m = torch.tensor([0.2, 0.5, 0.9], dtype=DT)
    y = torch.tensor([[1.0, 0.0, 0.0]], dtype=DT)
    # p = 0 returns y; p = 0.5 returns the prior means.
    torch.testing.assert_close(denoise.ope(y, 0.0, m), y)
    torch.testing.assert_close(denoise.ope(y, 0.5, m), m[None])
    torch.testing.assert_close(denoise.ope(y, 0.5 - 1e-9, m), m[None], atol=1e-8, rtol=0)
    # p = 0.1, m = 0.2, y = 1: P(x=1|y=1) = 0.2*0.9 / (0.2*0.9 + 0.8*0.1) by Bayes' rule.
    p = 0.1
    want = [0.2 * 0.9 / (0.2 * 0.9 + 0.8 * 0.1), 0.5 * 0.1 / (0.5 * 0.1 + 0.5 * 0.9)]
    want.append(0.9 * 0.1 / (0.9 * 0.1 + 0.1 * 0.9))
    torch.testing.assert_close(denoise.ope(y, p, m), torch.tensor([want], dtype=DT))


def test_ope_is_exact_posterior_of_factorised_prior():
    """For a machine with W = 0 (a factorised prior) the exact posterior means are the OPE."""
    machine = _rbm(6, 2, 0.0, 1)
    m = torch.sigmoid(machine.visible.U)
    g = _gen(2)
    y = torch.bernoulli(torch.full((5, 6), 0.4, dtype=DT), generator=g)
    exact = _exact_posterior_means(machine, y, 0.15)
    torch.testing.assert_close(denoise.ope(y, 0.15, m), exact)


def test_magnetisations_clip():
    x = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]], dtype=DT)
    m = denoise.magnetisations(x)
    want = torch.tensor([denoise.OPE_CLIP, 1 - denoise.OPE_CLIP, 0.5], dtype=DT)
    torch.testing.assert_close(m, want)


def test_bad_p_and_shapes_rejected():
    y = torch.zeros(2, 3, dtype=DT)
    for bad in (-0.1, 0.6, float("nan")):
        with pytest.raises(denoise.DenoiseError, match="flip probability p"):
            denoise.channel_field(y, bad)
    with pytest.raises(denoise.DenoiseError, match=r"shape \(K, 3\)"):
        denoise.ope(torch.zeros(2, 4), 0.1, torch.full((3,), 0.5))
    machine = _rbm(3, 2, 0.1, 0)
    with pytest.raises(denoise.DenoiseError, match=r"shape \(K, 3\)"):
        denoise.tap_denoise(machine, torch.zeros(2, 5, dtype=DT), 0.1, torch.full((3,), 0.5))
    tgb = RBM(
        torch.zeros(3, 2, dtype=DT),
        TruncatedGaussBernoulli(torch.full((3,), 0.5), torch.zeros(3), torch.ones(3)),
        Bernoulli(torch.zeros(2, dtype=DT)),
    )
    with pytest.raises(denoise.DenoiseError, match="Bernoulli"):
        denoise.tap_denoise(tgb, y, 0.1, torch.full((3,), 0.5))
    with pytest.raises(denoise.DenoiseError, match="sigma"):
        denoise.gaussian_tilt(y, 0.0)


# --- channel, MCC, 1-NN -------------------------------------------------------------------


def test_flip_rate_within_sampling_error():
    x = torch.bernoulli(torch.full((400, 784), 0.3), generator=_gen(0))
    for p in (0.0, 0.05, 0.3, 0.5):
        y = denoise.flip_channel(x, p, _gen(1))
        rate = float((y != x).double().mean())
        n = x.numel()
        assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12
    # One p per row (the stacked batch of the stage).
    ps = torch.tensor([0.1, 0.4]).repeat_interleave(200)
    y = denoise.flip_channel(x, ps, _gen(2))
    for i, p in enumerate((0.1, 0.4)):
        rows = slice(200 * i, 200 * (i + 1))
        rate = float((y[rows] != x[rows]).double().mean())
        assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / (200 * 784))


def test_stack_noise_layout_and_seeding():
    x = torch.bernoulli(torch.full((7, 20), 0.5), generator=_gen(0))
    y1, p_rows, clean = denoise.stack_noise(x, [0.0, 0.2, 0.5], _gen(3))
    y2, _, _ = denoise.stack_noise(x, [0.0, 0.2, 0.5], _gen(3))
    assert torch.equal(y1, y2) and y1.shape == (21, 20)
    assert torch.equal(y1[:7], x) and torch.equal(clean[7:14], x)
    assert torch.equal(p_rows, torch.tensor([0.0, 0.2, 0.5], dtype=DT).repeat_interleave(7))


def test_mcc_matches_sklearn():
    g = _gen(5)
    truth = torch.bernoulli(torch.full((30, 50), 0.3), generator=g)
    est = torch.where(torch.rand(30, 50, generator=g) < 0.2, 1 - truth, truth)
    est[0] = 0.0  # an empty margin: MCC 0 by convention
    est[1] = truth[1]
    got = denoise.mcc(est, truth)
    for i in range(30):
        want = matthews_corrcoef(truth[i].numpy(), est[i].numpy())
        assert got[i].item() == pytest.approx(want, abs=1e-12)


def test_nearest_neighbour_returns_training_image():
    g = _gen(6)
    x_train = torch.bernoulli(torch.full((300, 64), 0.3), generator=g)
    out = denoise.nearest_neighbours(x_train[:50], x_train, k=1, block=16)
    assert torch.equal(out, x_train[:50])
    # A noisy input goes to the brute-force Hamming nearest (checked row by row in numpy).
    y = denoise.flip_channel(x_train[:20], 0.1, g)
    got = denoise.nearest_neighbours(y, x_train, k=1)
    d = (y.numpy()[:, None, :] != x_train.numpy()[None, :, :]).sum(-1)
    want = x_train.numpy()[np.argmin(d, 1)]
    assert np.array_equal(got.numpy(), want)
    # k = 3 averages the three nearest.
    got3 = denoise.nearest_neighbours(y, x_train, k=3)
    order = np.argsort(d, 1, kind="stable")[:, :3]
    assert np.allclose(got3.numpy(), x_train.numpy()[order].mean(1))


# --- TAP denoiser ---------------------------------------------------------------------------


def test_tap_denoiser_at_p0_returns_clean_image():
    machine = _rbm(30, 10, 0.3, 7)
    x = torch.bernoulli(torch.full((12, 30), 0.4, dtype=DT), generator=_gen(8))
    m = torch.full((30,), 0.3, dtype=DT)
    state = denoise.tap_denoise(machine, x, 0.0, m)
    assert torch.equal(state.a[0], x) and bool(state.converged.all())
    tiny = denoise.tap_denoise(machine, x, 1e-9, m)
    assert torch.equal(tiny.a[0].round(), x)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_tap_posterior_means_approach_exact_marginals(p):
    """On an RBM small enough to enumerate, the TAP posterior means under the channel approach
    the exact posterior marginals as the couplings weaken, faster than naive mean field would
    (error O(W^3): halving W divides it by more than 4)."""
    g = _gen(9)
    y = torch.bernoulli(torch.full((6, 10), 0.4, dtype=DT), generator=g)
    errors = []
    for scale in (0.2, 0.1, 0.05):
        machine = _rbm(10, 6, scale, 10)
        exact = _exact_posterior_means(machine, y, p)
        m = torch.sigmoid(machine.visible.U)
        state = denoise.tap_denoise(machine, y, p, m, tol=1e-20, max_iter=3000)
        assert bool(state.converged.all())
        errors.append(float((state.a[0] - exact).abs().max()))
    assert errors[-1] < 5e-4
    assert errors[0] / errors[1] > 5 and errors[1] / errors[2] > 5


def test_tap_denoise_rows_independent_of_batch():
    """Stacking (image, p) pairs in one solve gives each row what it gets alone (the tilt follows
    its row when converged rows are dropped from the working set)."""
    machine = _rbm(20, 8, 0.3, 11)
    x = torch.bernoulli(torch.full((40, 20), 0.4, dtype=DT), generator=_gen(12))
    y, p_rows, _ = denoise.stack_noise(x[:10], [0.05, 0.2, 0.35, 0.45], _gen(13))
    m = torch.full((20,), 0.35, dtype=DT)
    together = denoise.tap_denoise(machine, y, p_rows, m, tol=1e-14)
    for k in (0, 13, 27, 39):
        alone = denoise.tap_denoise(machine, y[k : k + 1], p_rows[k], m, tol=1e-14)
        torch.testing.assert_close(together.a[0][k], alone.a[0][0], atol=1e-6, rtol=0)


def test_blocked_solve_equals_one_solve():
    """Rows solved ``block`` at a time (uneven last block, p = 0.5 rows copied across blocks)
    give the one-solve state row for row: means, fields, iteration counts, converged flags."""
    machine = _rbm(20, 8, 0.4, 18)
    x = torch.bernoulli(torch.full((9, 20), 0.4, dtype=DT), generator=_gen(19))
    y, p_rows, _ = denoise.stack_noise(x, [0.0, 0.1, 0.3, 0.5], _gen(20))
    m = torch.full((20,), 0.35, dtype=DT)
    one = denoise.tap_denoise(machine, y, p_rows, m, tol=1e-14, block=len(y))
    for block in (1, 4, 7):
        parts = denoise.tap_denoise(machine, y, p_rows, m, tol=1e-14, block=block)
        assert torch.equal(parts.iterations, one.iterations)
        assert torch.equal(parts.converged, one.converged)
        for got, want in zip(parts.a + parts.c + parts.B, one.a + one.c + one.B, strict=True):
            torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    sigma = torch.tensor([0.1, 0.4]).repeat_interleave(9)
    yg = x.repeat(2, 1) + sigma[:, None].to(DT) * torch.randn(18, 20, dtype=DT, generator=_gen(21))
    init = torch.full((18, 20), 0.5, dtype=DT)
    one = denoise.tap_denoise_gaussian(machine, yg, sigma, init, tol=1e-14, block=18)
    parts = denoise.tap_denoise_gaussian(machine, yg, sigma, init, tol=1e-14, block=5)
    assert torch.equal(parts.iterations, one.iterations)
    torch.testing.assert_close(parts.a[0], one.a[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(parts.A[0], one.A[0], atol=1e-12, rtol=0)
    with pytest.raises(denoise.DenoiseError, match="block must be >= 1, got 0"):
        denoise.tap_denoise(machine, y, p_rows, m, block=0)


# --- Gaussian channel -----------------------------------------------------------------------


def test_gaussian_tilt_against_quadrature():
    """TGB moments with A += 1/sigma^2, B += y/sigma^2 equal the posterior mean and variance of
    prior x likelihood by quadrature (spike at 0 + truncated Gaussian slab on [0, 1])."""
    rho = torch.tensor([0.3, 0.7, 0.5], dtype=DT)
    U = torch.tensor([0.5, -1.0, 2.0], dtype=DT)
    V = torch.tensor([2.0, 1.0, 5.0], dtype=DT)
    prior = TruncatedGaussBernoulli(rho, U, V, 0.0, 1.0)
    t = torch.linspace(0, 1, 200001, dtype=DT)
    for sigma, yv in itertools.product((0.1, 0.5), (-0.2, 0.3, 0.9)):
        y = torch.full((1, 3), yv, dtype=DT)
        A, B = denoise.gaussian_tilt(y, sigma)
        a, c = prior.moments(B, A)

        def lik(x, yv=yv, sigma=sigma):
            return torch.exp(-((yv - x) ** 2) / (2 * sigma**2))

        slab = torch.exp(-0.5 * V[:, None] * t**2 + U[:, None] * t)  # unnormalised TG
        z_tg = torch.trapezoid(slab, t, dim=1)
        w = rho[:, None] * slab / z_tg[:, None] * lik(t)
        z = (1 - rho) * lik(torch.tensor(0.0, dtype=DT)) + torch.trapezoid(w, t, dim=1)
        mean = torch.trapezoid(w * t, t, dim=1) / z
        second = torch.trapezoid(w * t * t, t, dim=1) / z
        torch.testing.assert_close(a[0], mean, atol=1e-7, rtol=1e-6)
        torch.testing.assert_close(c[0], second - mean**2, atol=1e-7, rtol=1e-6)


def test_pointwise_gaussian_is_posterior_mean_of_histogram():
    x_train = torch.tensor([[0.0, 1.0], [0.0, 0.5], [1.0, 1.0], [0.0, 1.0]], dtype=DT)
    values, counts = denoise.site_histograms(x_train, levels=3)
    y = torch.tensor([[0.4, 0.7]], dtype=DT)
    sigma = 0.3
    got = denoise.pointwise_gaussian(y, sigma, values, counts)
    for i in range(2):
        xs = x_train[:, i]
        w = torch.exp(-((y[0, i] - xs) ** 2) / (2 * sigma**2))
        assert got[0, i].item() == pytest.approx(float((w * xs).sum() / w.sum()), rel=1e-12)


def test_gaussian_channel_noise_std():
    x = torch.zeros(200, 500, dtype=DT)
    y = denoise.gaussian_channel(x, 0.3, _gen(0))
    assert float(y.std()) == pytest.approx(0.3, rel=0.02)
    assert denoise.psnr(0.01) == pytest.approx(20.0)


def test_tap_denoise_gaussian_weak_coupling_matches_pointwise():
    """With W = 0 the machine's visible prior factorises, and TAP with the Gaussian tilt returns
    the prior's own tilted means, whatever the start."""
    n = 5
    prior = TruncatedGaussBernoulli(
        torch.full((n,), 0.4, dtype=DT), torch.zeros(n, dtype=DT), torch.full((n,), 3.0, dtype=DT)
    )
    machine = RBM(torch.zeros(n, 3, dtype=DT), prior, Bernoulli(torch.zeros(3, dtype=DT)))
    y = torch.rand(4, n, dtype=DT, generator=_gen(1))
    state = denoise.tap_denoise_gaussian(
        machine, y, 0.2, torch.full((4, n), 0.5, dtype=DT), tol=1e-28
    )
    A, B = denoise.gaussian_tilt(y, 0.2)
    torch.testing.assert_close(state.a[0], prior.moments(B, A)[0])


def test_euclidean_nearest_neighbour():
    g = _gen(14)
    x_train = torch.rand(200, 30, generator=g)
    y = x_train[:25] + 0.05 * torch.randn(25, 30, generator=g)
    got = denoise.nearest_neighbours(y, x_train, k=1, metric="euclidean", block=7)
    d = ((y[:, None, :] - x_train[None]) ** 2).sum(-1)
    assert torch.equal(got, x_train[d.argmin(1)])


# --- noise-augmented TAP training (train_noise) --------------------------------------------


def test_noisy_initialisations_flip_only_the_fraction():
    from tapmachine.train.tap_gradient import (
        noisy_initialisations,
    )

    machine = _rbm(784, 5, 0.0, 0)
    x = torch.bernoulli(torch.full((200, 784), 0.3, dtype=DT), generator=_gen(20))
    y = noisy_initialisations(machine, x, {"fraction": 0.25, "p": 0.2}, _gen(21))
    assert torch.equal(y[50:], x[50:])
    rate = float((y[:50] != x[:50]).double().mean())
    assert abs(rate - 0.2) < 5 * math.sqrt(0.2 * 0.8 / (50 * 784))
    assert torch.equal(noisy_initialisations(machine, x, {"fraction": 0.0, "p": 0.2}, _gen(21)), x)


def test_train_noise_changes_only_the_model_term():
    """The data term of the TAP gradient keeps the clean batch: with p = 0.5 on every row the
    initialisations are pure noise, yet the visible-bias gradient's data part is unchanged."""
    from tapmachine.core import tap
    from tapmachine.train import TrainSettings
    from tapmachine.train.methods import gradients
    from tapmachine.train.tap_gradient import (
        noisy_initialisations,
    )

    machine = _rbm(30, 6, 0.2, 22)
    x = torch.bernoulli(torch.full((40, 30), 0.3, dtype=DT), generator=_gen(23))
    noise = {"fraction": 1.0, "p": 0.5}
    settings = TrainSettings(train_noise=noise, train_iterations=3)
    g1, g2 = _gen(24), _gen(24)
    got = gradients(machine, x, settings, None, g1)
    init = noisy_initialisations(machine, x, noise, g2)
    states = tap.solve(machine, init, damping=0.5, tol=1e-12, max_iter=3)
    want = tap.tap_gradients(machine, x, states)
    torch.testing.assert_close(got["weights"][0], want["weights"][0])
    assert not torch.allclose(init, x)


def test_train_noise_feeds_the_converged_mode_too():
    """With train_iterations: converge the noisy initialisations (same draws) are what Alg. 1
    iterates to convergence; the data term keeps the clean batch."""
    from tapmachine.core import tap
    from tapmachine.train import TrainSettings
    from tapmachine.train.methods import gradients
    from tapmachine.train.tap_gradient import (
        converged_tap_gradients,
        noisy_initialisations,
    )

    machine = _rbm(30, 6, 0.2, 22)
    x = torch.bernoulli(torch.full((40, 30), 0.3, dtype=DT), generator=_gen(23))
    noise = {"fraction": 0.5, "p": 0.3}
    settings = TrainSettings(train_noise=noise, train_iterations="converge")
    g1, g2 = _gen(25), _gen(25)
    got = gradients(machine, x, settings, None, g1)
    init = noisy_initialisations(machine, x, noise, g2)
    want = converged_tap_gradients(
        machine,
        x,
        init,
        tap.SolverSettings(tol=settings.train_tol, max_iter=settings.train_max_iter),
        unique_tol=settings.dedup_tol,
    )
    torch.testing.assert_close(got["weights"][0], want["weights"][0])
    clean = converged_tap_gradients(
        machine,
        x,
        x,
        tap.SolverSettings(tol=settings.train_tol, max_iter=settings.train_max_iter),
        unique_tol=settings.dedup_tol,
    )
    assert not torch.allclose(init, x)
    assert not torch.allclose(got["weights"][0], clean["weights"][0])


def test_train_noise_rejected_for_real_valued_visible_units():
    from tapmachine.train import TrainingError
    from tapmachine.train.tap_gradient import (
        check_train_noise,
    )

    tgb = RBM(
        torch.zeros(3, 2, dtype=DT),
        TruncatedGaussBernoulli(torch.full((3,), 0.5), torch.zeros(3), torch.ones(3)),
        Bernoulli(torch.zeros(2, dtype=DT)),
    )
    with pytest.raises(TrainingError, match="train_noise"):
        check_train_noise(tgb, {"fraction": 0.5, "p": 0.1})
    with pytest.raises(TrainingError, match=r"train_noise.p = 0.7"):
        check_train_noise(_rbm(3, 2, 0.0, 0), {"fraction": 0.5, "p": 0.7})


@pytest.mark.parametrize(
    "path, value, key",
    [
        (("models", "bmnist_h500_noiseaug", "train_noise", "p"), 0.6, "p"),
        (("models", "bmnist_h500_noiseaug", "train_noise", "fraction"), 1.5, "fraction"),
        (("denoise", "fig8", "ps"), [0.1, 0.7], "ps"),
        (("denoise", "fig8", "n_images"), 0, "n_images"),
        (("denoise", "real", "sigmas"), [0.0], "sigmas"),
        (("denoise", "fig8", "models", "tap_nh25"), "nope", r"denoise\.fig8\.models\.tap_nh25"),
        (("denoise", "fig8", "models", "tap_nh25"), "rmnist_h100", "needs bernoulli"),
        (("denoise", "real", "model"), "nope", r"denoise\.real\.model: 'nope'"),
        (("denoise", "fig9", "ps"), [0.05, 0.33], r"denoise\.fig9\.ps: 0\.33"),
    ],
)
def test_config_rejects_bad_denoise_values(path, value, key):
    import copy
    from pathlib import Path

    import yaml

    from tapmachine.io.schema import SCHEMA_FILE
    from tapmachine.pipeline.configuration import ConfigError, validate

    root = Path(__file__).resolve().parents[2]
    config = copy.deepcopy(yaml.safe_load((root / "config.yaml").read_text()))
    node = config
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=key):
        validate(config, SCHEMA_FILE)


# --- the stage and its figures, on tiny files ------------------------------------------------


def _tiny_files(tmp_path, real=False):
    from tapmachine.io.data import Dataset, save_dataset
    from tapmachine.io.modelfile import machine_state

    g = np.random.default_rng(0)
    if real:
        x = (g.integers(0, 256, size=(260, 16)) * (g.random((260, 16)) < 0.5) / 255.0).astype(
            np.float32
        )
        visible = TruncatedGaussBernoulli(
            torch.full((16,), 0.5), torch.zeros(16), torch.full((16,), 4.0)
        )
    else:
        x = (g.random((260, 16)) < 0.3).astype(np.float32)
        visible = Bernoulli(torch.full((16,), -0.8))
    ds = Dataset(x[:200], np.zeros(200, int), x[200:], np.zeros(60, int), (4, 4), {}, "tiny")
    data = save_dataset(ds, tmp_path / "tiny.npz")
    machine = RBM(0.2 * torch.randn(16, 5, generator=_gen(0)), visible, Bernoulli(torch.zeros(5)))
    model = tmp_path / "m" / "model.pt"
    model.parent.mkdir()
    spec = {"train_noise": None}
    torch.save({"machine": machine_state(machine), "name": "m", "spec": spec}, model)
    return data, model


def test_stage_bsc_baselines_and_figures(tmp_path):
    from tapmachine.figures import fig8, fig9
    from tapmachine.pipeline.stages import denoise as stage

    data, model = _tiny_files(tmp_path)
    s = stage.bsc_settings('{"ps": [0.0, 0.1, 0.3, 0.5], "n_images": 40, "fig9_image": 3}')
    out = stage.run_bsc(model, data, s, tmp_path / "b.csv", tmp_path / "b.npz")
    assert out["mcc"].shape == (4, 40) and np.all(out["mcc"][0] == 1.0)  # p = 0: exact
    base = stage.run_baselines(data, s, tmp_path / "o.csv", tmp_path / "o.npz")
    assert np.all(base["mcc_ope"][0] == 1.0)
    assert np.array_equal(out["fig9_noisy"], base["fig9_noisy"])  # the same realisation
    res = fig8.make([tmp_path / "b.npz"], tmp_path / "o.npz", [model], ["tap_nh5"])
    drawn = res.table[res.table["kind"] == "drawn"]
    assert set(drawn["method"]) == {"ope", "1nn", "tap_nh5"}
    assert {"method", "p", "mcc", "mcc_se"} <= set(drawn.columns) and len(drawn) == 12
    # The verdicts are in the held column, where the claims report counts them.
    rows = res.table[res.table["kind"] == "claim"].set_index("claim")
    beats = rows.loc["tap_beats_ope"]
    assert beats["held"] == ("held" if beats["value"] == 1 else "not held")  # Nh = 5 <= 100
    tracks = rows.loc["tap_tracks_1nn"]
    assert tracks["held"] == ("held" if abs(tracks["value"]) <= fig8.TRACK_TOL else "not held")
    recovers = res.table[res.table["claim"] == "recovers_at_p0"].set_index("model")
    assert recovers.loc["ope", "held"] == "held" and recovers.loc["tap_nh5", "held"] == "held"
    assert "1nn" not in recovers.index  # 1-NN at p = 0 is a row of its own
    nn = float(base["mcc_1nn"][0].mean())
    knn = rows.loc["1nn_recovers_at_p0"]
    assert knn["value"] == pytest.approx(nn)
    assert knn["held"] == ("held" if nn < fig8.RECOVER_MIN else "not held")
    res9 = fig9.make([tmp_path / "b.npz"], tmp_path / "o.npz", [model], [0.1, 0.5], ["tap_nh5"])
    same = res9.table[res9.table["claim"] == "same_noise_every_method"]["value"]
    assert float(same.iloc[0]) == 1.0
    # Every denoised digit is stored (rounded, as bits), and Fig. 9's classifier reads them.
    from tapmachine.io.data import load_dataset

    bits = np.unpackbits(out["estimates"], axis=-1, count=16)
    assert bits.shape == (4 * 40, 16)
    assert np.array_equal(bits[:40], load_dataset(data).x_test[:40])  # p = 0: the digits
    from tapmachine.ucd.fid import Classifier

    net = Classifier((4, 4), channels=(2,), features=4)
    torch.save({"state": net.state_dict(), "config": net.config}, tmp_path / "c.pt")
    res9 = fig9.make(
        [tmp_path / "b.npz"],
        tmp_path / "o.npz",
        [model],
        [0.1],
        ["tap_nh5"],
        tmp_path / "c.pt",
        data,
    )
    shares = res9.table[res9.table["claim"] == "true_label_share"]
    assert set(shares["model"]) == {"ope", "1nn", "tap_nh5"} and len(shares) == 3 * 2  # 0 < p < 0.5
    assert shares["value"].between(0, 1).all()
    assert (res9.table["claim"] == "digit_structure_kept").sum() == 1


def test_fig8_title_names_training_iterations_and_epochs_below_the_papers():
    from tapmachine.figures import fig8
    from tapmachine.io.modelfile import ModelFile

    def model(iterations, epochs):
        return ModelFile({}, "m", spec={"tap": {"train_iterations": iterations}, "epochs": epochs})

    assert fig8.reduced_note([model("converge", 100), model("converge", 100)]) == ""
    short = fig8.reduced_note([model("converge", 5)])
    assert "5 of 100 epochs" in short and "iterations" not in short
    fixed = fig8.reduced_note([model(3, 20), model(10, 100), model("converge", 100)])
    assert "20 of 100 epochs" in fixed and "TAP 3/10 iterations a step" in fixed
    (row,) = fig8._iterations_claims([model(3, 20), model(10, 100), model("converge", 100)])
    assert row["value"] == 3 and row["detail"].endswith(fig8.ITERATIONS_NOTE)
    assert fig8._iterations_claims([model("converge", 100)]) == []
    assert "epochs" not in fig8.reduced_note([model(3, 100)]).split(":")[0]


def test_stage_rejects_bad_input_before_writing(tmp_path):
    from tapmachine.pipeline.stages import denoise as stage

    data, model = _tiny_files(tmp_path)
    with pytest.raises(denoise.DenoiseError, match="ps"):
        stage.bsc_settings('{"ps": [0.1, 0.7]}')
    with pytest.raises(denoise.DenoiseError, match="unknown settings"):
        stage.bsc_settings('{"p": [0.1]}')
    s = stage.bsc_settings('{"n_images": 500}')
    with pytest.raises(denoise.DenoiseError, match="n_images = 500"):
        stage.run_bsc(model, data, s, tmp_path / "b.csv", tmp_path / "b.npz")
    (tmp_path / "r").mkdir()
    real_data, real_model = _tiny_files(tmp_path / "r", real=True)
    s = stage.bsc_settings('{"n_images": 10}')
    with pytest.raises(denoise.DenoiseError, match="Bernoulli"):
        stage.run_bsc(real_model, data, s, tmp_path / "b.csv", tmp_path / "b.npz")
    with pytest.raises(denoise.DenoiseError, match=r"\{0, 1\}"):
        stage.run_bsc(model, real_data, s, tmp_path / "b.csv", tmp_path / "b.npz")
    assert not (tmp_path / "b.csv").exists() and not (tmp_path / "b.npz").exists()


def test_stage_real_channel(tmp_path):
    from tapmachine.figures import fig_denoise_real
    from tapmachine.pipeline.stages import denoise as stage

    data, model = _tiny_files(tmp_path, real=True)
    s = stage.real_settings('{"sigmas": [0.1, 0.4], "n_images": 30}')
    out = stage.run_real(model, data, s, tmp_path / "r.csv", tmp_path / "r.npz")
    assert out["mse_tap"].shape == (2, 30)
    # Any sensible denoiser beats the noisy input itself at sigma = 0.4.
    assert out["mse_pointwise"][1].mean() < out["mse_noisy"][1].mean()
    res = fig_denoise_real.make(tmp_path / "r.npz", model)
    assert {"pointwise", "1nn", "tap", "noisy"} == set(res.table["method"].dropna())


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    from tapmachine.pipeline import cli

    data, model = _tiny_files(tmp_path)
    argv = [
        "denoise",
        "bsc",
        "--model-file",
        str(model),
        "--data",
        str(data),
        "--spec",
        '{"ps": [0.2, 0.9]}',
        "--out-csv",
        str(tmp_path / "b.csv"),
        "--out-npz",
        str(tmp_path / "b.npz"),
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "tapmachine: error:" in err and "0.9" in err
    assert not (tmp_path / "b.csv").exists()


def test_half_rows_solved_once_and_equal_to_a_lone_solve():
    """At p = 0.5 every image gets the same solution (no field, same start); the copy equals a
    solve of that row alone, and the other rows are unaffected."""
    machine = _rbm(20, 8, 0.4, 15)
    x = torch.bernoulli(torch.full((6, 20), 0.4, dtype=DT), generator=_gen(16))
    y, p_rows, _ = denoise.stack_noise(x, [0.1, 0.5], _gen(17))
    m = torch.full((20,), 0.35, dtype=DT)
    state = denoise.tap_denoise(machine, y, p_rows, m, tol=1e-14)
    alone = denoise.tap_denoise(machine, y[6:7], 0.5, m, tol=1e-14)
    for k in range(6, 12):
        torch.testing.assert_close(state.a[0][k], alone.a[0][0])
    first = denoise.tap_denoise(machine, y[:6], 0.1, m, tol=1e-14)
    torch.testing.assert_close(state.a[0][:6], first.a[0], atol=1e-9, rtol=0)
