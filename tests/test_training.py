"""The training loop: learning happens, resume is exact, divergence stops cleanly."""

import dataclasses
import math

import pytest
import torch

from tapmachine import training
from tapmachine.estimators import exact_log_partition
from tapmachine.training import TrainingError, TrainSettings


def bars_and_stripes(n=4):
    """All 2^(n+1) - 2 bars-and-stripes images of n x n pixels, float64."""
    rows = []
    for code in range(2**n):
        bits = torch.tensor([(code >> i) & 1 for i in range(n)], dtype=torch.float64)
        rows.append(bits[:, None].expand(n, n).reshape(-1))
        rows.append(bits[None, :].expand(n, n).reshape(-1))
    return torch.unique(torch.stack(rows), dim=0)


SPEC = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 6}]}


def settings(**kw):
    base = dict(
        epochs=4,
        batch_size=10,
        learning_rate=0.05,
        momentum=0.5,
        l2=0.0,
        weight_init_std=0.01,
        eval_samples=30,
        max_iter=300,
    )
    base.update(kw)
    return TrainSettings(**base)


def exact_mean_log_likelihood(machine, x):
    return float((-machine.free_energy_visible(x) - exact_log_partition(machine)).mean())


def test_tap_training_raises_exact_and_tap_log_likelihood():
    x = bars_and_stripes().repeat(4, 1)
    g = training.seeded_generator(0, "bas")
    machine = training.build_machine(SPEC, x, 0.01, g)
    before = exact_mean_log_likelihood(machine, x)
    machine, history = training.train(
        machine, x, settings(epochs=40, learning_rate=0.3), g, progress=False
    )
    after = exact_mean_log_likelihood(machine, x)
    assert after > before + 1.0, (before, after)
    assert history[-1]["tap_ll"] > history[0]["tap_ll"]
    assert [h["epoch"] for h in history] == list(range(1, 41))


def test_resume_gives_identical_results(tmp_path):
    x = bars_and_stripes().repeat(3, 1)
    s = settings(epochs=4)

    def run(ckpt, epochs):
        g = training.seeded_generator(3, "resume")
        m = training.build_machine(SPEC, x, 0.01, g)
        return training.train(
            m, x, dataclasses.replace(s, epochs=epochs), g, checkpoint_dir=ckpt, progress=False
        )

    straight, hist_a = run(tmp_path / "a", 4)
    run(tmp_path / "b", 2)  # "interrupted" after epoch 2
    resumed, hist_b = run(tmp_path / "b", 4)
    torch.testing.assert_close(straight.W, resumed.W, rtol=0, atol=0)
    torch.testing.assert_close(straight.visible.U, resumed.visible.U, rtol=0, atol=0)
    assert [h["tap_ll"] for h in hist_a] == [h["tap_ll"] for h in hist_b]


def test_divergence_stops_with_clear_error_and_keeps_last_checkpoint(tmp_path, monkeypatch):
    x = bars_and_stripes()  # 30 rows: 3 batches of 10 per epoch
    real_gradients = training._gradients
    calls = []

    def blow_up_in_epoch_2(*args):
        grads = real_gradients(*args)
        calls.append(1)
        if len(calls) > 4:
            grads["weights"] = [torch.full_like(w, float("nan")) for w in grads["weights"]]
        return grads

    monkeypatch.setattr(training, "_gradients", blow_up_in_epoch_2)
    g = training.seeded_generator(1, "div")
    m = training.build_machine(SPEC, x, 0.01, g)
    with pytest.raises(TrainingError, match="diverged at epoch 2, batch 1: weights"):
        training.train(m, x, settings(epochs=3), g, checkpoint_dir=tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pt")) == ["epoch_1.pt"]


def test_learning_rate_schedule():
    assert training.learning_rate(0.005, 7, 100) == 0.005
    sched = {"start": 1e-2, "end": 1e-5}
    assert training.learning_rate(sched, 1, 100) == pytest.approx(1e-2)
    assert training.learning_rate(sched, 100, 100) == pytest.approx(1e-5)
    rates = [training.learning_rate(sched, e, 100) for e in range(1, 101)]
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False))


@pytest.mark.parametrize(
    "prior", ["bernoulli", "spin", "truncated_gaussian", "truncated_gauss_bernoulli"]
)
def test_machine_state_round_trip(prior):
    x = torch.rand(50, 9, dtype=torch.float64)
    if prior == "bernoulli":
        x = (x > 0.5).double()
    if prior == "spin":
        x = 2.0 * (x > 0.5).double() - 1.0
    if prior == "truncated_gauss_bernoulli":
        x = x * (x > 0.3)
    spec = {
        "visible": {"prior": prior},
        "hidden": [{"prior": "bernoulli", "units": 4}, {"prior": "bernoulli", "units": 3}],
    }
    m = training.build_machine(spec, x, 0.1, training.seeded_generator(0, prior))
    back = training.machine_from_state(training.machine_state(m), dtype=torch.float64)
    assert back.sizes == (9, 4, 3)
    for a, b in zip(m.priors, back.priors, strict=True):
        assert type(a) is type(b) and a.config() == b.config()
        for k in a.params():
            torch.testing.assert_close(a.params()[k], b.params()[k])
    for Wa, Wb in zip(m.weights, back.weights, strict=True):
        torch.testing.assert_close(Wa, Wb)


def test_seeded_generators_are_reproducible_and_distinct():
    a = torch.rand(3, generator=training.seeded_generator(1, "m", "train"))
    b = torch.rand(3, generator=training.seeded_generator(1, "m", "train"))
    c = torch.rand(3, generator=training.seeded_generator(1, "m", "harvest"))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_changed_settings_restart_instead_of_resuming(tmp_path):
    x = bars_and_stripes()
    g = training.seeded_generator(2, "stale")
    m = training.build_machine(SPEC, x, 0.01, g)
    training.train(m, x, settings(epochs=2), g, checkpoint_dir=tmp_path, progress=False)
    g = training.seeded_generator(2, "stale")
    _, history = training.train(
        m, x, settings(epochs=3, learning_rate=0.01), g, checkpoint_dir=tmp_path, progress=False
    )
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert all(h["learning_rate"] == 0.01 for h in history)


def test_checkpoints_of_other_numerics_are_not_resumed(tmp_path, monkeypatch):
    x = bars_and_stripes()

    def run(epochs):
        g = training.seeded_generator(6, "code")
        m = training.build_machine(SPEC, x, 0.01, g)
        training.train(m, x, settings(epochs=epochs), g, checkpoint_dir=tmp_path, progress=False)
        return (tmp_path / "epoch_1.pt").stat().st_mtime_ns

    first = run(2)
    assert run(3) == first  # same numerics: epochs 1-2 resumed, epoch_1.pt untouched
    monkeypatch.setattr(training, "NUMERICS_VERSION", training.NUMERICS_VERSION + 1)
    assert run(3) != first  # other numerics: retrained from scratch


def test_more_epochs_extend_a_finished_run(tmp_path):
    x = bars_and_stripes()
    g = training.seeded_generator(4, "extend")
    m = training.build_machine(SPEC, x, 0.01, g)
    training.train(m, x, settings(epochs=2), g, checkpoint_dir=tmp_path, progress=False)
    g = training.seeded_generator(4, "extend")
    m = training.build_machine(SPEC, x, 0.01, g)
    _, history = training.train(
        m, x, settings(epochs=3), g, checkpoint_dir=tmp_path, progress=False
    )
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pt")) == [
        "epoch_1.pt",
        "epoch_2.pt",
        "epoch_3.pt",
    ]


def test_rho_steps_stay_in_the_unit_interval_and_follow_the_gradient():
    rho = torch.tensor([1e-4, 0.3, 0.5, 0.9999])
    grad = torch.tensor([1e6, -50.0, 3.0, 1e6])
    new = training._step_prior_parameter("rho", rho, grad, lr=0.01)
    assert ((new > 0) & (new < 1)).all()
    assert torch.equal(torch.sign(new - rho), torch.sign(grad))
    U = torch.tensor([0.5])
    assert training._step_prior_parameter(
        "U", U, torch.tensor([2.0]), lr=0.1
    ).item() == pytest.approx(0.7)


@pytest.mark.parametrize("method", ["cd", "pcd"])
def test_sampling_baselines_train_in_the_same_loop(method):
    x = bars_and_stripes().repeat(4, 1)
    g = training.seeded_generator(0, method)
    machine = training.build_machine(SPEC, x, 0.01, g)
    before = exact_mean_log_likelihood(machine, x)
    machine, history = training.train(
        machine, x, settings(epochs=40, learning_rate=0.3, method=method), g, progress=False
    )
    assert exact_mean_log_likelihood(machine, x) > before + 1.0
    assert len(history) == 40 and all(math.isfinite(h["tap_ll"]) for h in history)
