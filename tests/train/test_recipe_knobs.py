"""The optimiser knobs of Salakhutdinov's CD training of the RBMs of Salakhutdinov & Murray
(2008): a two-level momentum, momentum on the biases, rows drawn anew as Bernoulli(grey level) at
every presentation, and a CD-k whose k rises while the step shrinks as 1 / k (``rbm.m``'s
``anneal_lr``); each checked against a hand computation or an exact count."""

import dataclasses

import numpy as np
import pytest
import torch
from tiny_models import settings

from tapmachine.core import contrastive
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli
from tapmachine.core.seeding import seeded_generator
from tapmachine.io import data
from tapmachine.train import TrainingError, TrainSettings, loop, train
from tapmachine.train.build import build_from_spec
from tapmachine.train.job import prepare
from tapmachine.train.loop import Carried, eval_rows, present, run_epoch
from tapmachine.train.resume import fingerprint
from tapmachine.train.update import (
    apply_update,
    learning_rate,
    momentum_at,
    prior_velocity_start,
    sampling_steps_at,
)

SCHEDULE = {"initial": 0.5, "final": 0.9, "switch_epoch": 5}
RISING_K = {"start": 1, "end": 25, "every": 10}


def _rbm() -> BoltzmannMachine:
    W = (torch.arange(12, dtype=torch.float32).reshape(4, 3) - 6.0) / 10.0
    return BoltzmannMachine(
        priors=(Bernoulli(torch.full((4,), 0.25)), Bernoulli(torch.zeros(3))), weights=(W,)
    )


def test_momentum_schedule_is_initial_through_the_switch_epoch_then_final():
    assert [momentum_at(SCHEDULE, e) for e in range(1, 9)] == [0.5] * 5 + [0.9] * 3
    assert [momentum_at(0.3, e) for e in (1, 6, 100)] == [0.3, 0.3, 0.3]
    assert momentum_at({"initial": 0.1, "final": 0.7, "switch_epoch": 0}, 1) == 0.7


def test_each_epoch_updates_with_its_scheduled_momentum(monkeypatch):
    seen = []

    def recording(machine, grads, velocity, lr, s, momentum=None):
        seen.append(momentum)
        return machine

    monkeypatch.setattr(loop, "apply_update", recording)
    x = torch.bernoulli(torch.full((20, 4), 0.5), generator=torch.Generator().manual_seed(1))
    s = settings(epochs=7, batch_size=10, momentum=SCHEDULE, method="cd", evaluate=False)
    train(_rbm(), x, s, seeded_generator(0, "schedule"), progress=False)
    assert seen == [0.5] * 10 + [0.9] * 4  # 2 batches an epoch


def test_rising_k_is_rbm_m_s_ceil_of_epoch_over_ten_up_to_25():
    epochs = range(1, 301)
    assert [sampling_steps_at(RISING_K, e) for e in epochs] == [
        min(25, -(-e // 10)) for e in epochs
    ]
    assert [sampling_steps_at({"start": 3, "end": 4, "every": 2}, e) for e in (1, 2, 3, 9)] == [
        3,
        3,
        4,
        4,
    ]
    assert sampling_steps_at(7, 120) == 7
    # rbm.m's epsilon = epsilon_0 / CD
    lr = {"over_sampling_steps": 0.05}
    assert [learning_rate(lr, e, 250, sampling_steps_at(RISING_K, e)) for e in (1, 11, 250)] == [
        0.05,
        0.025,
        0.05 / 25,
    ]


def test_each_epoch_samples_and_steps_with_its_scheduled_k(monkeypatch):
    """Over 3 epochs of {start: 1, end: 2, every: 2}: CD-1, CD-1, CD-2 with steps lr, lr, lr / 2,
    recorded per epoch in the metrics; a constant k leaves both alone and adds no column."""
    seen = []
    cd = contrastive.cd_gradients

    def recording(machine, x, k, generator):
        seen.append(k)
        return cd(machine, x, k, generator)

    monkeypatch.setattr(contrastive, "cd_gradients", recording)
    x = torch.bernoulli(torch.full((20, 4), 0.5), generator=torch.Generator().manual_seed(1))
    s = settings(
        epochs=3,
        batch_size=10,
        method="cd",
        evaluate=False,
        sampling_steps={"start": 1, "end": 2, "every": 2},
        learning_rate={"over_sampling_steps": 0.1},
    )
    _, history = train(_rbm(), x, s, seeded_generator(0, "rising"), progress=False)
    assert seen == [1, 1, 1, 1, 2, 2]  # 2 batches an epoch
    assert [row["sampling_steps"] for row in history] == [1, 1, 2]
    assert [row["learning_rate"] for row in history] == [0.1, 0.1, 0.05]
    seen.clear()
    constant = dataclasses.replace(s, sampling_steps=3, learning_rate=0.1)
    _, history = train(_rbm(), x, constant, seeded_generator(0, "rising"), progress=False)
    assert seen == [3] * 6 and "sampling_steps" not in history[0]


def test_bias_momentum_is_the_heavy_ball_step_of_the_biases():
    """Two updates with gradients g1, g2 at lr 0.1 and momentum 0.5: with prior momentum a bias
    moves by lr g1, then by 0.5 lr g1 + lr g2; without, by lr g1, then lr g2 (Alg. 2)."""
    m0 = _rbm()
    g1 = {"weights": [torch.zeros(4, 3)], "priors": [{"U": torch.tensor([1.0, -2, 0, 4])}]}
    g1["priors"].append({"U": torch.tensor([0.5, 0.0, -1.0])})
    g2 = {"weights": [torch.zeros(4, 3)], "priors": [{"U": torch.tensor([2.0, 2, 2, 2])}]}
    g2["priors"].append({"U": torch.tensor([0.0, 1.0, 1.0])})
    for on in (True, False):
        s = settings(l2=0.0, prior_momentum=on)
        velocity = [torch.zeros(4, 3)] + (prior_velocity_start(m0) if on else [])
        m = apply_update(m0, g1, velocity, 0.1, s, momentum=0.5)
        m = apply_update(m, g2, velocity, 0.1, s, momentum=0.5)
        for layer, start in enumerate((0.25, 0.0)):
            a, b = g1["priors"][layer]["U"], g2["priors"][layer]["U"]
            carried = 0.5 * 0.1 * a if on else 0.0
            expected = start + 0.1 * a + carried + 0.1 * b
            torch.testing.assert_close(m.priors[layer].U, expected, rtol=0, atol=1e-6)
    # the couplings' step is unchanged by the prior momentum
    assert torch.equal(m.W, m0.W)


def test_prior_momentum_velocities_are_carried_and_resumed(tmp_path):
    """The bias velocities are part of the carried state: a run stopped after 2 epochs and
    resumed from its checkpoint ends where an uninterrupted 4-epoch run ends."""
    x = torch.bernoulli(torch.full((30, 4), 0.4), generator=torch.Generator().manual_seed(2))
    s = settings(epochs=4, momentum=SCHEDULE, prior_momentum=True, method="cd", evaluate=False)
    whole, _ = train(_rbm(), x, s, seeded_generator(5, "pm"), progress=False)
    g = seeded_generator(5, "pm")
    train(_rbm(), x, dataclasses.replace(s, epochs=2), g, tmp_path, progress=False)
    g = seeded_generator(5, "pm")
    resumed, _ = train(_rbm(), x, s, g, tmp_path, progress=False)
    assert torch.equal(whole.W, resumed.W)
    for a, b in zip(whole.priors, resumed.priors, strict=True):
        assert torch.equal(a.U, b.U)
    carried = Carried.start(_rbm(), x, s, seeded_generator(5, "pm"))
    assert [v.shape for v in carried.velocity] == [(4, 3), (4,), (3,)]


def test_present_draws_bernoulli_of_each_value_anew_and_reproducibly():
    p = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0])
    x = p.repeat(40_000, 1)
    g = torch.Generator().manual_seed(11)
    first, second = present(x, "bernoulli", g), present(x, "bernoulli", g)
    for draw in (first, second):
        assert set(draw.unique().tolist()) <= {0.0, 1.0}
        sigma = torch.sqrt(p * (1 - p) / x.shape[0])
        assert (draw.mean(0) - p).abs().le(4 * sigma + 1e-12).all(), draw.mean(0)
    assert not torch.equal(first, second)  # a fresh draw at each presentation
    # the two draws are independent: P(both 1) = p^2 for the middle column
    both = (first[:, 2] * second[:, 2]).mean()
    assert abs(float(both) - 0.25) < 4 * np.sqrt(0.25 * 0.75 / x.shape[0])
    again = present(x, "bernoulli", torch.Generator().manual_seed(11))
    assert torch.equal(again, first)
    assert present(x, None, g) is x


def test_training_presents_fresh_binary_draws_of_the_grey_rows(monkeypatch):
    """With resample bernoulli, CD sees {0, 1} rows whose mean is the grey level, drawn anew
    every epoch, and the same draws again from the same seed."""
    batches = []
    cd = contrastive.cd_gradients

    def recording(machine, x, k, generator):
        batches.append(x.clone())
        return cd(machine, x, k, generator)

    monkeypatch.setattr(contrastive, "cd_gradients", recording)
    grey = torch.tensor([0.2, 0.5, 0.7, 1.0]).repeat(500, 1)
    s = settings(epochs=2, batch_size=500, method="cd", resample="bernoulli", evaluate=False)
    train(_rbm(), grey, s, seeded_generator(0, "resample"), progress=False)
    first = torch.stack(batches)
    assert first.shape == (2, 500, 4)
    assert set(first.unique().tolist()) == {0.0, 1.0}
    assert not torch.equal(first[0], first[1])
    mean = first.reshape(-1, 4).mean(0)
    sigma = torch.sqrt(grey[0] * (1 - grey[0]) / 1000)
    assert (mean - grey[0]).abs().le(4 * sigma + 1e-12).all(), mean
    batches.clear()
    train(_rbm(), grey, s, seeded_generator(0, "resample"), progress=False)
    assert torch.equal(torch.stack(batches), first)


def test_the_evaluation_scores_one_fixed_draw_without_touching_the_training_stream():
    grey = torch.full((50, 4), 0.5)
    s = settings(eval_samples=30, resample="bernoulli")
    rows = eval_rows(grey, s)
    assert rows.shape == (30, 4) and set(rows.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(rows, eval_rows(grey, s))
    assert torch.equal(eval_rows(grey, settings(eval_samples=30)), grey[:30])
    g = seeded_generator(0, "eval")
    state = g.get_state()
    carried = Carried.start(_rbm(), grey, dataclasses.replace(s, method="cd"), g)
    assert torch.equal(g.get_state(), state)
    metrics = run_epoch(carried, grey, dataclasses.replace(s, method="cd", batch_size=50), g)
    assert np.isfinite(metrics["tap_ll"])


def _grey_dataset(tmp_path, x):
    path = tmp_path / "grey.npz"
    y = np.zeros(len(x), dtype=np.int64)
    data.save_dataset(data.Dataset(x, y, x[:4], y[:4], (2, 2), {}, "grey"), path)
    return path


def test_grey_levels_are_accepted_for_resampled_bernoulli_models_only(tmp_path):
    x = np.random.default_rng(0).uniform(size=(20, 4)).astype(np.float32)
    path = _grey_dataset(tmp_path, x)
    spec = {
        "visible": {"prior": "bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 3}],
        "batch_size": 10,
        "method": "cd",
    }
    with pytest.raises(TrainingError, match=r"is outside \{0, 1\}"):
        prepare("plain", spec, path)
    job = prepare("resampled", {**spec, "resample": "bernoulli"}, path)
    assert job.settings.resample == "bernoulli" and torch.equal(job.x, torch.as_tensor(x))
    outside = _grey_dataset(tmp_path, x * 2.0)
    with pytest.raises(TrainingError, match=r"is outside \[0, 1\], the values of the grey"):
        prepare("resampled", {**spec, "resample": "bernoulli"}, outside)
    spin = {**spec, "visible": {"prior": "spin"}, "resample": "bernoulli"}
    with pytest.raises(TrainingError, match="visible units must be bernoulli, not Spin"):
        prepare("spin", spin, path)


def test_bad_momentum_schedules_and_resamples_are_refused():
    with pytest.raises(TrainingError, match="switch_epoch"):
        TrainSettings(momentum={"initial": 0.5, "final": 0.9})
    with pytest.raises(TrainingError, match="resample must be one of"):
        TrainSettings(resample="gaussian")
    with pytest.raises(TrainingError, match="start <= end"):
        TrainSettings(sampling_steps={"start": 5, "end": 2, "every": 1})
    with pytest.raises(TrainingError, match="over_sampling_steps"):
        TrainSettings(learning_rate={"over_sampling_steps": 0.1, "end": 0.01})


def test_the_knobs_enter_the_fingerprint_only_when_set():
    """Set, each knob changes the resume fingerprint; off, the fingerprint is the one the code
    before them computed (this value), so earlier checkpoints still resume."""
    x = torch.tensor([[0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float32)
    base = TrainSettings(method="cd", sampling_steps=2)
    fp = fingerprint(_rbm(), x, base)
    assert fp == "7be81f6715521aba9a78737808504c39804a5789c1de4f559ce08928b3030283"
    for changed in (
        {"prior_momentum": True},
        {"resample": "bernoulli"},
        {"momentum": SCHEDULE},
        {"visible_init": "neutral"},
        {"sampling_steps": RISING_K},
        {"learning_rate": {"over_sampling_steps": 0.05}},
        {"relaxation": 1.6},
    ):
        assert fingerprint(_rbm(), x, dataclasses.replace(base, **changed)) != fp, changed


def test_a_neutral_visible_start_has_zero_biases_and_the_same_couplings():
    x = torch.tensor([[1.0, 0, 1, 1], [1, 0, 0, 1], [1, 0, 1, 0], [1, 0, 0, 0]])
    spec = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 3}]}
    means = build_from_spec(spec, x, settings(), seeded_generator(4, "init"))
    zero = build_from_spec(spec, x, settings(visible_init="neutral"), seeded_generator(4, "init"))
    m = torch.tensor([1 - 1e-3, 1e-3, 0.5, 0.5])  # the data means, clamped
    torch.testing.assert_close(means.visible.U, torch.log(m / (1 - m)))
    assert torch.equal(zero.visible.U, torch.zeros(4)) and torch.equal(zero.W, means.W)
    assert torch.equal(zero.hidden.U, means.hidden.U)
    with pytest.raises(TrainingError, match="visible_init must be one of"):
        settings(visible_init="zero")
