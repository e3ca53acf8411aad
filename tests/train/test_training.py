"""The training loop: learning happens, resume is exact, divergence stops cleanly."""

import dataclasses
import math

import pytest
import torch
from tiny_models import (
    SPEC,
    bars_and_stripes,
    converged_training,
    exact_mean_log_likelihood,
    settings,
)

from tapmachine.core import tap
from tapmachine.core.seeding import seeded_generator
from tapmachine.core.tap import fused as fused_module
from tapmachine.io.modelfile import machine_from_state, machine_state
from tapmachine.io.runlog import resumed_epoch
from tapmachine.train import (
    TrainingError,
    TrainSettings,
    build_machine,
    evaluate_tap_log_likelihood,
    loop,
    resume,
    train,
    train_from_spec,
)
from tapmachine.train.evaluation import pass_and_validity
from tapmachine.train.methods import METHODS
from tapmachine.train.resume import fingerprint
from tapmachine.train.tap_gradient import converged_tap_gradients
from tapmachine.train.update import RHO_RANGE, learning_rate, step_prior_parameter


def test_tap_training_raises_exact_and_tap_log_likelihood():
    x = bars_and_stripes().repeat(4, 1)
    g = seeded_generator(0, "bas")
    machine = build_machine(SPEC, x, 0.01, g)
    before = exact_mean_log_likelihood(machine, x)
    machine, history = train(machine, x, settings(epochs=40, learning_rate=0.3), g, progress=False)
    after = exact_mean_log_likelihood(machine, x)
    assert after > before + 1.0, (before, after)
    assert history[-1]["tap_ll"] > history[0]["tap_ll"]
    assert [h["epoch"] for h in history] == list(range(1, 41))


def test_resume_gives_identical_results(tmp_path, capsys):
    x = bars_and_stripes().repeat(3, 1)
    s = settings(epochs=4)

    def run(ckpt, epochs):
        g = seeded_generator(3, "resume")
        m = build_machine(SPEC, x, 0.01, g)
        return train(
            m, x, dataclasses.replace(s, epochs=epochs), g, checkpoint_dir=ckpt, progress=False
        )

    straight, hist_a = run(tmp_path / "a", 4)
    _, hist_first = run(tmp_path / "b", 2)  # "interrupted" after epoch 2
    assert resumed_epoch(capsys.readouterr().err) == 0
    resumed, hist_b = run(tmp_path / "b", 4)
    # the log of a start names the epoch it resumed from (the wall-time report reads it)
    assert resumed_epoch(capsys.readouterr().err) == 2
    torch.testing.assert_close(straight.W, resumed.W, rtol=0, atol=0)
    torch.testing.assert_close(straight.visible.U, resumed.visible.U, rtol=0, atol=0)
    assert [h["tap_ll"] for h in hist_a] == [h["tap_ll"] for h in hist_b]
    # the epochs before the stop keep their own times: a resumed job's cost is their sum
    timing = ["epoch_seconds", "epoch_cpu_seconds"]
    assert [[h[k] for k in timing] for h in hist_b[:2]] == [
        [h[k] for k in timing] for h in hist_first
    ]
    assert all(0 < h["epoch_cpu_seconds"] for h in hist_b)


def test_a_resume_hands_the_epochs_trained_before_to_on_history_at_once(tmp_path):
    """Extended from 3 to 5 epochs, a job gets the 3 rows it trained before in one
    ``on_history`` call and ``on_epoch`` for epochs 4 and 5 only; without ``on_history`` the
    3 rows come to ``on_epoch`` one by one, as before."""
    x = bars_and_stripes()

    def run(folder, epochs, **callbacks):
        g = seeded_generator(9, "history")
        m = build_machine(SPEC, x, 0.01, g)
        return train(m, x, settings(epochs=epochs), g, checkpoint_dir=folder, progress=False,
                     **callbacks)  # fmt: skip

    run(tmp_path / "a", 3)
    run(tmp_path / "b", 3)
    calls = []
    run(
        tmp_path / "a", 5,
        on_history=lambda rows, machine: calls.append([r["epoch"] for r in rows]),
        on_epoch=lambda epoch, row, machine: calls.append(epoch),
    )  # fmt: skip
    assert calls == [[1, 2, 3], 4, 5]
    calls.clear()
    run(tmp_path / "b", 5, on_epoch=lambda epoch, row, machine: calls.append(epoch))
    assert calls == [1, 2, 3, 4, 5]


def test_a_resume_on_other_torch_threads_says_so_in_the_log(tmp_path, capsys):
    """Each epoch records its torch threads; a start that resumes on another number writes a
    line saying its run parts from an uninterrupted one (their matrix products sum otherwise),
    and a start on as many writes none."""
    x = bars_and_stripes().repeat(3, 1)
    before = torch.get_num_threads()

    def run(epochs, threads):
        torch.set_num_threads(threads)
        g = seeded_generator(3, "threads")
        m = build_machine(SPEC, x, 0.01, g)
        return train(m, x, settings(epochs=epochs), g, checkpoint_dir=tmp_path, progress=False)

    try:
        run(2, 1)
        capsys.readouterr()
        _, history = run(3, 2)
        err = capsys.readouterr().err
        _, _ = run(4, 2)
        again = capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
    assert [h["torch_threads"] for h in history] == [1, 1, 2]
    assert "resuming on 2 torch threads where epoch 2 trained on 1" in err
    assert resumed_epoch(again) == 3
    assert "torch threads" not in again


def test_divergence_stops_with_clear_error_and_keeps_last_checkpoint(tmp_path, monkeypatch):
    x = bars_and_stripes()  # 30 rows: 3 batches of 10 per epoch
    real_gradients = METHODS["tap"].gradients
    calls = []

    def blow_up_in_epoch_2(*args):
        grads = real_gradients(*args)
        calls.append(1)
        if len(calls) > 4:
            grads["weights"] = [torch.full_like(w, float("nan")) for w in grads["weights"]]
        return grads

    monkeypatch.setitem(
        METHODS, "tap", dataclasses.replace(METHODS["tap"], gradients=blow_up_in_epoch_2)
    )
    g = seeded_generator(1, "div")
    m = build_machine(SPEC, x, 0.01, g)
    with pytest.raises(TrainingError, match="diverged at epoch 2, batch 1: weights"):
        train(m, x, settings(epochs=3), g, checkpoint_dir=tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pt")) == ["epoch_1.pt"]


def test_learning_rate_schedule():
    assert learning_rate(0.005, 7, 100) == 0.005
    sched = {"start": 1e-2, "end": 1e-5}
    assert learning_rate(sched, 1, 100) == pytest.approx(1e-2)
    assert learning_rate(sched, 100, 100) == pytest.approx(1e-5)
    rates = [learning_rate(sched, e, 100) for e in range(1, 101)]
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False))
    assert learning_rate(sched, 101, 100) == pytest.approx(1e-5)  # a further partial_fit


@pytest.mark.parametrize("method", ["tap", "pcd"])
def test_a_carried_state_continues_the_run_it_came_from(method):
    """Epochs run one ``train(..., carried=, until=)`` call at a time (an estimator's
    ``partial_fit``) give the parameters, momentum and history of one uninterrupted run, bit for
    bit: the loop's epoch is the same function either way."""
    x = bars_and_stripes().repeat(4, 1)
    s = settings(epochs=3, method=method, learning_rate={"start": 0.05, "end": 0.01})
    g1, g2 = seeded_generator(0, "carried"), seeded_generator(0, "carried")
    whole, history = train(build_machine(SPEC, x, 0.01, g1), x, s, g1, progress=False)
    carried = loop.Carried.start(build_machine(SPEC, x, 0.01, g2), x, s, g2)
    for epoch in (1, 2, 3):
        train(carried.machine, x, s, g2, progress=False, carried=carried, until=epoch)
        assert carried.epoch == epoch and len(carried.history) == epoch
    for a, b in zip(
        [*whole.weights, whole.visible.U],
        [*carried.machine.weights, carried.machine.visible.U],
        strict=True,
    ):
        assert torch.equal(a, b)
    assert [r["tap_ll"] for r in history] == [r["tap_ll"] for r in carried.history]
    with pytest.raises(ValueError, match="carried state"):
        train(whole, x, s, g2, checkpoint_dir="nowhere", carried=carried)


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
    m = build_machine(spec, x, 0.1, seeded_generator(0, prior))
    back = machine_from_state(machine_state(m), dtype=torch.float64)
    assert back.sizes == (9, 4, 3)
    for a, b in zip(m.priors, back.priors, strict=True):
        assert type(a) is type(b) and a.config() == b.config()
        for k in a.params():
            torch.testing.assert_close(a.params()[k], b.params()[k])
    for Wa, Wb in zip(m.weights, back.weights, strict=True):
        torch.testing.assert_close(Wa, Wb)


def test_seeded_generators_are_reproducible_and_distinct():
    a = torch.rand(3, generator=seeded_generator(1, "m", "train"))
    b = torch.rand(3, generator=seeded_generator(1, "m", "train"))
    c = torch.rand(3, generator=seeded_generator(1, "m", "harvest"))
    assert torch.equal(a, b) and not torch.equal(a, c)


def _train_twice(folder, label: str, first: TrainSettings, second: TrainSettings) -> list:
    """Train ``first``, then ``second`` from the same seed and initial machine, both with their
    checkpoints in ``folder``; the second run's history."""
    x = bars_and_stripes()
    for s in (first, second):
        g = seeded_generator(2, label)
        m = build_machine(SPEC, x, 0.01, g)
        _, history = train(m, x, s, g, checkpoint_dir=folder, progress=False)
    return history


def test_changed_settings_restart_instead_of_resuming(tmp_path):
    history = _train_twice(
        tmp_path, "stale", settings(epochs=2), settings(epochs=3, learning_rate=0.01)
    )
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert all(h["learning_rate"] == 0.01 for h in history)


def test_checkpoints_of_other_numerics_are_not_resumed(tmp_path, monkeypatch):
    x = bars_and_stripes()

    def run(epochs):
        g = seeded_generator(6, "code")
        m = build_machine(SPEC, x, 0.01, g)
        train(m, x, settings(epochs=epochs), g, checkpoint_dir=tmp_path, progress=False)
        return (tmp_path / "epoch_1.pt").stat().st_mtime_ns

    first = run(2)
    assert run(3) == first  # same numerics: epochs 1-2 resumed, epoch_1.pt untouched
    monkeypatch.setattr(resume, "NUMERICS_VERSION", resume.NUMERICS_VERSION + 1)
    assert run(3) != first  # other numerics: retrained from scratch


def test_the_fingerprint_leaves_out_only_what_changes_no_training_number():
    """Every setting enters the resume fingerprint except the converged mode's keys in a
    fixed-iteration run, the evaluation's second pass, ``fuse``, the CUDA graphs' keys,
    ``checkpoint_every``, ``eval_every`` and, at a constant step size, the number of epochs."""
    x = bars_and_stripes()
    m = build_machine(SPEC, x, 0.01, seeded_generator(7, "fp"))
    base = settings()
    fp = fingerprint(m, x, base)
    # Fixed iterations: the converged mode's tolerance, cap and weighting are not used.
    unused = dataclasses.replace(base, train_tol=1e-3, train_max_iter=7, train_unique=False)
    assert fingerprint(m, x, unused) == fp
    # The evaluation's second pass touches no training numbers: a run may resume with it changed.
    assert fingerprint(m, x, dataclasses.replace(base, retry_damping=None)) == fp
    # Compiled sweeps give the same iterates up to rounding.
    assert fingerprint(m, x, dataclasses.replace(base, fuse=not base.fuse)) == fp
    # Captured steps give the same numbers up to rounding (tests/train/test_graphs.py).
    captured = dataclasses.replace(base, cuda_graphs=False, cuda_graph_sweeps=3)
    assert fingerprint(m, x, captured) == fp
    assert fingerprint(m, x, dataclasses.replace(base, checkpoint_every=4)) == fp
    assert fingerprint(m, x, dataclasses.replace(base, eval_every=5)) == fp
    assert fingerprint(m, x, dataclasses.replace(base, epochs=base.epochs + 5)) == fp
    decaying = dataclasses.replace(base, learning_rate={"start": 0.1, "end": 0.01})
    assert fingerprint(m, x, dataclasses.replace(decaying, epochs=9)) != fingerprint(m, x, decaying)
    conv = dataclasses.replace(base, train_iterations="converge")
    assert fingerprint(m, x, conv) != fp
    assert fingerprint(m, x, dataclasses.replace(conv, train_tol=1e-6)) != fingerprint(m, x, conv)
    for changed in (
        {"rho_step": "plain"},
        {"inference": "adatap"},
        {"solver": "anderson"},
        {"solver": "newton_damped"},
        {"solver": "newton_sor"},
        {"train_noise": {"fraction": 0.5, "p": 0.1}},
        {"evaluate": False},
        {"momentum": 0.25},
    ):
        assert fingerprint(m, x, dataclasses.replace(base, **changed)) != fp, changed


def test_a_checkpoint_of_an_older_layout_stops_training_with_a_clear_error(tmp_path):
    """A checkpoint written before ``modelfile.CHECKPOINT_FORMAT`` (PCD chains under ``chains``,
    no ``format``) is not resumed, scored or removed: training stops and names the file, its
    format and the one this code reads."""
    from tapmachine.io.modelfile import CHECKPOINT_FORMAT, Checkpoint, CheckpointFormatError

    x = bars_and_stripes()
    g = seeded_generator(8, "old")
    m = build_machine(SPEC, x, 0.01, g)
    pcd = settings(epochs=1, method="pcd")
    train(m, x, pcd, g, checkpoint_dir=tmp_path, progress=False)
    path = tmp_path / "epoch_1.pt"
    blob = torch.load(path, weights_only=True)
    assert blob["format"] == CHECKPOINT_FORMAT and "visible" in blob["state"]
    del blob["format"]
    blob["chains"] = blob.pop("state")["visible"]
    torch.save(blob, path)
    with pytest.raises(CheckpointFormatError, match=r"epoch_1.pt is a checkpoint of format 1;"):
        Checkpoint.load(path)
    g = seeded_generator(8, "old")
    m = build_machine(SPEC, x, 0.01, g)
    message = rf"format 1; .* reads format {CHECKPOINT_FORMAT} only .* remove {tmp_path}"
    with pytest.raises(TrainingError, match=message):
        train(m, x, settings(epochs=2, method="pcd"), g, checkpoint_dir=tmp_path, progress=False)
    assert path.exists()


def test_more_epochs_extend_a_finished_run(tmp_path):
    history = _train_twice(tmp_path, "extend", settings(epochs=2), settings(epochs=3))
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pt")) == [
        "epoch_1.pt",
        "epoch_2.pt",
        "epoch_3.pt",
    ]


def test_checkpoint_every_keeps_its_multiples_and_the_last_epoch_and_changes_no_number(tmp_path):
    """checkpoint_every 3 over 7 epochs keeps epochs 3, 6 and 7; extended to 10 epochs (resumed
    from epoch 7) it keeps 3, 6, 9 and 10, epoch 7 going once epoch 8's is written. The model
    equals, bit for bit, one trained for 10 epochs in one go keeping every checkpoint."""
    x = bars_and_stripes()

    def run(folder, **kw):
        g = seeded_generator(5, "every")
        m = build_machine(SPEC, x, 0.01, g)
        machine, history = train(m, x, settings(**kw), g, checkpoint_dir=folder, progress=False)
        return machine, history, sorted(int(p.stem[6:]) for p in folder.glob("epoch_*.pt"))

    thinned = tmp_path / "thinned"
    assert run(thinned, epochs=7, checkpoint_every=3)[2] == [3, 6, 7]
    machine, history, kept = run(thinned, epochs=10, checkpoint_every=3)
    assert kept == [3, 6, 9, 10] and [h["epoch"] for h in history] == list(range(1, 11))
    whole, whole_history, all_kept = run(tmp_path / "whole", epochs=10)
    assert all_kept == list(range(1, 11))
    for a, b in zip(machine.weights, whole.weights, strict=True):
        assert torch.equal(a, b)
    assert [h["tap_ll"] for h in history] == [h["tap_ll"] for h in whole_history]
    with pytest.raises(TrainingError, match="checkpoint_every must be a positive integer, not 0"):
        settings(checkpoint_every=0)


def test_an_epoch_checkpoint_that_is_not_kept_is_written_only_when_its_seconds_are_due(
    tmp_path, monkeypatch
):
    """checkpoint_every 3 over 7 epochs writes epochs 3, 6 and 7 only where unkept epochs are
    never due (their state held in memory, not pickled), every epoch where they are always due,
    and the model is the same either way."""
    from tapmachine.train import checkpointing

    x = bars_and_stripes()
    written = []
    real = checkpointing.save_checkpoint

    def counted(ckpt, path):
        written.append(path.name)
        real(ckpt, path)

    monkeypatch.setattr(checkpointing, "save_checkpoint", counted)

    def run(folder, seconds):
        g = seeded_generator(5, "unkept")
        m = build_machine(SPEC, x, 0.01, g)
        s = settings(epochs=7, checkpoint_every=3)
        machine, _ = train(
            m, x, s, g, checkpoint_dir=folder, progress=False, unkept_checkpoint_seconds=seconds
        )
        return machine, sorted(int(p.stem[6:]) for p in folder.glob("epoch_*.pt"))

    held, kept = run(tmp_path / "held", math.inf)
    assert written == ["epoch_3.pt", "epoch_6.pt", "epoch_7.pt"] and kept == [3, 6, 7]
    written.clear()
    each, kept = run(tmp_path / "each", 0.0)
    assert written == [f"epoch_{e}.pt" for e in range(1, 8)] and kept == [3, 6, 7]
    for a, b in zip(held.weights, each.weights, strict=True):
        assert torch.equal(a, b)


def test_a_job_stopped_mid_epoch_after_an_unwritten_epoch_resumes_at_its_batch_bit_for_bit(
    tmp_path, capsys
):
    """Epoch 1's checkpoint is not kept (checkpoint_every 3) and not yet due: it is held in
    memory, and written before the part-way state of epoch 2, so a job stopped at epoch 2's
    5th batch resumes there and ends as an uninterrupted run."""
    x = bars_and_stripes().repeat(4, 1)  # 12 batches of 10 an epoch
    s = settings(epochs=3, checkpoint_every=3, train_iterations="converge")

    def run(folder, on_step=None):
        g = seeded_generator(4, "held-epoch")
        m = build_machine(SPEC, x, 0.5, g)
        return train(
            m, x, s, g, checkpoint_dir=folder, progress=False, on_step=on_step,
            in_progress_seconds=0.0, unkept_checkpoint_seconds=math.inf,
        )  # fmt: skip

    whole, history = run(tmp_path / "whole")

    on_disk = []

    def stop_in_epoch_2(step, metrics):  # a kill: what is on disk when it comes
        if step == 12 + 5:
            on_disk.extend(sorted(p.name for p in (tmp_path / "stopped").glob("*.pt")))
            raise _Stopped

    with pytest.raises(_Stopped):
        run(tmp_path / "stopped", stop_in_epoch_2)
    assert on_disk == ["epoch_1.pt", "in_progress.pt"]
    capsys.readouterr()
    resumed, resumed_history = run(tmp_path / "stopped")
    assert "resuming epoch 2 after its batch 4" in capsys.readouterr().err
    for a, b in zip(whole.weights, resumed.weights, strict=True):
        assert torch.equal(a, b)
    timing = ("train_seconds", "epoch_seconds", "epoch_cpu_seconds")
    assert [{k: v for k, v in h.items() if k not in timing} for h in history] == [
        {k: v for k, v in h.items() if k not in timing} for h in resumed_history
    ]
    assert sorted(p.name for p in (tmp_path / "stopped").glob("epoch_*.pt")) == ["epoch_3.pt"]


def test_eval_every_scores_its_multiples_and_the_last_epoch_and_changes_no_number(tmp_path):
    """eval_every 3 over 7 epochs scores epochs 3, 6 and 7 (the others record their training
    numbers only), each as a run scoring every epoch does, and trains the same model bit for
    bit. A run scored every epoch for 4 epochs resumes with eval_every 3: epochs 1-4 keep their
    scores, epoch 5 has none."""
    x = bars_and_stripes()

    def run(folder, **kw):
        g = seeded_generator(6, "eval-every")
        m = build_machine(SPEC, x, 0.01, g)
        return train(m, x, settings(**kw), g, checkpoint_dir=folder, progress=False)

    every, every_history = run(tmp_path / "every", epochs=7)
    sparse, sparse_history = run(tmp_path / "sparse", epochs=7, eval_every=3)
    for a, b in zip(sparse.weights, every.weights, strict=True):
        assert torch.equal(a, b)
    scored = [h["epoch"] for h in sparse_history if "tap_ll" in h]
    assert scored == [3, 6, 7]
    assert [h["epoch"] for h in sparse_history] == list(range(1, 8))
    for h in sparse_history:
        assert "w_norm" in h and "epoch_seconds" in h  # the training numbers of every epoch
        if "tap_ll" in h:
            assert h["tap_ll"] == every_history[h["epoch"] - 1]["tap_ll"]
        else:
            assert "n_unique" not in h and "log_z_tap" not in h

    changed = tmp_path / "changed"
    run(changed, epochs=4)
    _, history = run(changed, epochs=7, eval_every=3)
    assert [h["epoch"] for h in history if "tap_ll" in h] == [1, 2, 3, 4, 6, 7]
    assert [h["tap_ll"] for h in history if "tap_ll" in h] == [
        every_history[e - 1]["tap_ll"] for e in (1, 2, 3, 4, 6, 7)
    ]
    with pytest.raises(TrainingError, match="eval.every must be a positive integer, not 0"):
        settings(eval_every=0)
    assert TrainSettings.from_spec({"eval": {"every": 30, "n_samples": 5}}).eval_every == 30


def test_a_changed_second_pass_evaluates_again_only_the_epochs_that_were_scored(
    tmp_path, monkeypatch
):
    """With eval_every 2 over 3 epochs (epochs 2 and 3 scored), a resume with another
    retry_damping scores epochs 2 and 3 again and leaves epoch 1 unscored; the history is the
    one a run with that value throughout records at eval_every 2."""
    x = bars_and_stripes().repeat(3, 1)
    s = settings(epochs=3, max_iter=12, tol=1e-14, retry_damping=None, eval_every=2)

    def run(ckpt, epochs, retry):
        g = seeded_generator(3, "retry-every")
        m = build_machine(SPEC, x, 0.01, g)
        s_run = dataclasses.replace(s, epochs=epochs, retry_damping=retry)
        return train(m, x, s_run, g, checkpoint_dir=ckpt, progress=False)[1]

    throughout = run(tmp_path / "a", 4, 0.0)
    run(tmp_path / "b", 3, 0.3)
    real = evaluate_tap_log_likelihood
    counted = []
    for module in (loop, resume):
        monkeypatch.setattr(
            module, "evaluate_tap_log_likelihood", lambda *a: counted.append(1) or real(*a)
        )
    resumed = run(tmp_path / "b", 4, 0.0)
    assert len(counted) == 3  # epochs 2 and 3 again, then epoch 4
    assert [h["epoch"] for h in resumed if "tap_ll" in h] == [2, 3, 4]
    keys = ["tap_ll", "n_converged_retry", "n_unique"]
    scored = [h for h in resumed if "tap_ll" in h]
    assert [[h[k] for k in keys] for h in scored[::2]] == [
        [h[k] for k in keys] for h in throughout if "tap_ll" in h
    ]


def test_rho_steps_stay_in_the_unit_interval_and_follow_the_gradient():
    rho = torch.tensor([1e-4, 0.3, 0.5, 0.9999])
    grad = torch.tensor([1e6, -50.0, 3.0, 1e6])
    new = step_prior_parameter("rho", rho, grad, lr=0.01)
    assert ((new > 0) & (new < 1)).all()
    assert torch.equal(torch.sign(new - rho), torch.sign(grad))
    U = torch.tensor([0.5])
    assert step_prior_parameter("U", U, torch.tensor([2.0]), lr=0.1).item() == pytest.approx(0.7)


@pytest.mark.parametrize("method", ["cd", "pcd"])
def test_sampling_baselines_train_in_the_same_loop(method):
    x = bars_and_stripes().repeat(4, 1)
    g = seeded_generator(0, method)
    machine = build_machine(SPEC, x, 0.01, g)
    before = exact_mean_log_likelihood(machine, x)
    machine, history = train(
        machine, x, settings(epochs=40, learning_rate=0.3, method=method), g, progress=False
    )
    assert exact_mean_log_likelihood(machine, x) > before + 1.0
    assert len(history) == 40 and all(math.isfinite(h["tap_ll"]) for h in history)


# ----------------------------------------------------------------------------------------------
# Alg. 2 with Alg. 1 run to convergence (train_iterations: converge)
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_converged_iteration_training_raises_the_exact_log_likelihood():
    # near the end, some rows need ~1,000 damped iterations
    before, after, history = converged_training("bas-converge", max_iter=3000)
    assert after > before + 1.0, (before, after)
    # The per-epoch statistics of the converged steps are recorded and sensible.
    last = history[-1]
    assert 0.0 < last["train_converged_fraction"] <= 1.0
    assert 1.0 <= last["train_mean_iterations"] <= 200.0
    assert last["train_mean_solutions"] >= 1.0


def test_converged_steps_count_steps_where_nearly_every_row_converged(cycling_rbm):
    """``converged_steps`` counts a step only when >= 99% of its rows converged: on the RBM
    where Alg. 1 at damping 0.5 cycles from every start none does, with the per-unit Newton
    solver every one does; ``unconverged_steps`` counts the steps with no converged row."""
    m, x = cycling_rbm
    counts = {}
    for solver in ("damped", "newton_sor"):
        stats = {}
        for _ in range(2):
            converged_tap_gradients(
                m, x, x, tap.SolverSettings(solver, tol=1e-20, max_iter=500), stats=stats
            )
        counts[solver] = (stats["steps"], stats["converged_steps"], stats["unconverged_steps"])
    assert counts == {"damped": (2, 0, 2), "newton_sor": (2, 2, 0)}


def _random_rbm(seed, nv=8, nh=5, std=0.6):
    from tapmachine.core.machine import BoltzmannMachine
    from tapmachine.core.priors import Bernoulli

    g = torch.Generator().manual_seed(seed)
    W = std * torch.randn(nv, nh, generator=g, dtype=torch.float64)
    U = 0.5 * torch.randn(nv, generator=g, dtype=torch.float64)
    V = 0.5 * torch.randn(nh, generator=g, dtype=torch.float64)
    return BoltzmannMachine(priors=(Bernoulli(U), Bernoulli(V)), weights=(W,)), g


def _tap_ll(machine, x, init, unique_tol):
    """Batch mean of eq. 39 with Alg. 1 converged from ``init`` (unique or all converged rows)."""
    from tapmachine.core import tap

    states = tap.solve(machine, init, damping=0.5, tol=1e-28, max_iter=5000)
    assert bool(states.converged.all())
    keep = tap.unique(states, unique_tol)[0] if unique_tol else torch.arange(init.shape[0])
    return float(tap.log_likelihood(machine, x, states.select(keep)).mean())


@pytest.mark.parametrize("unique_tol", [None, 1e-3])
def test_eq40_gradient_at_converged_solutions_matches_finite_differences(unique_tol):
    """At converged TAP solutions dF/d(a, c) = 0, so eqs. 40-42 with the solutions held fixed
    are the total derivative of the TAP log-likelihood (eq. 39), which finite differences
    (solutions re-converged from the same initialisations) measure independently."""
    machine, g = _random_rbm(7)
    x = (torch.rand(12, 8, generator=g, dtype=torch.float64) < 0.5).to(torch.float64)
    grads = converged_tap_gradients(
        machine, x, x, tap.SolverSettings(tol=1e-28, max_iter=5000), unique_tol=unique_tol
    )
    h = 1e-5

    def with_weight(i, j, delta):
        W = machine.W.clone()
        W[i, j] += delta
        return machine.replace(weights=[W])

    def with_field(layer, unit, delta):
        priors = list(machine.priors)
        U = priors[layer].U.clone()
        U[unit] += delta
        priors[layer] = priors[layer].replace(U=U)
        return machine.replace(priors=priors)

    def central(perturbed):
        return (
            _tap_ll(perturbed(h), x, x, unique_tol) - _tap_ll(perturbed(-h), x, x, unique_tol)
        ) / (2 * h)

    checked = 0
    for i, j in [(0, 0), (3, 2), (7, 4), (5, 1)]:
        fd = central(lambda d, i=i, j=j: with_weight(i, j, d))
        assert grads["weights"][0][i, j].item() == pytest.approx(fd, rel=1e-5, abs=1e-8)
        checked += 1
    for layer, unit in [(0, 2), (1, 3)]:
        fd = central(lambda d, layer=layer, unit=unit: with_field(layer, unit, d))
        assert grads["priors"][layer]["U"][unit].item() == pytest.approx(fd, rel=1e-5, abs=1e-8)
        checked += 1
    assert checked == 6


def test_fixed_iterations_are_not_the_converged_gradient():
    """The 3-iteration gradient differs from eq. 40 at converged solutions (the test above
    would fail for it): the two modes are really different estimators."""
    from tapmachine.core import tap

    machine, g = _random_rbm(7)
    x = (torch.rand(12, 8, generator=g, dtype=torch.float64) < 0.5).to(torch.float64)
    conv = converged_tap_gradients(machine, x, x, tap.SolverSettings(tol=1e-28, max_iter=5000))
    few = tap.tap_gradients(machine, x, tap.solve(machine, x, damping=0.5, max_iter=3))
    assert not torch.allclose(conv["weights"][0], few["weights"][0], atol=1e-4)


def test_converged_gradient_skips_rows_stopped_by_the_cap():
    """Rows that hit train_max_iter are left out; with none converged, all rows are used."""
    machine, g = _random_rbm(7)
    x = (torch.rand(12, 8, generator=g, dtype=torch.float64) < 0.5).to(torch.float64)
    stats = {}
    converged_tap_gradients(machine, x, x, tap.SolverSettings(tol=1e-28, max_iter=1), stats=stats)
    assert stats["unconverged_steps"] == 1 and stats["solutions"] == 12
    stats = {}
    converged_tap_gradients(
        machine, x, x, tap.SolverSettings(tol=1e-28, max_iter=5000), unique_tol=1e-3, stats=stats
    )
    assert stats["converged"] == 1.0 and 1 <= stats["solutions"] <= 12


def test_plain_rho_step_is_alg2_clipped_into_the_unit_interval():
    rho = torch.tensor([1e-4, 0.3, 0.5, 0.9999])
    grad = torch.tensor([-1e6, -5.0, 3.0, 1e6])
    new = step_prior_parameter("rho", rho, grad, lr=0.01, rho_step="plain")
    lo, hi = RHO_RANGE
    torch.testing.assert_close(new, torch.tensor([lo, 0.25, 0.53, hi]))


def test_bad_train_iterations_and_rho_step_are_rejected():
    with pytest.raises(TrainingError, match="train_iterations"):
        TrainSettings(train_iterations="forever")
    with pytest.raises(TrainingError, match="rho_step"):
        TrainSettings(rho_step="fisher")


def test_dbm_numerics_version_moves_only_dbm_fingerprints(monkeypatch):
    """A change of the DBM methods' arithmetic (ucd.dbm.NUMERICS_VERSION) retrains DBM runs and
    leaves RBM checkpoints resumable."""
    from tapmachine.ucd import dbm

    x = bars_and_stripes()
    m = build_machine(SPEC, x, 0.01, seeded_generator(7, "fp"))
    rbm, deep = settings(), settings(method="dbm_pcd")
    before = fingerprint(m, x, rbm), fingerprint(m, x, deep)
    monkeypatch.setattr(dbm, "NUMERICS_VERSION", dbm.NUMERICS_VERSION + 1)
    assert fingerprint(m, x, rbm) == before[0]
    assert fingerprint(m, x, deep) != before[1]


def test_evaluation_retries_rows_that_cycle_at_damping_one_half(cycling_rbm):
    """An RBM whose TAP iteration cycles at damping 0.5 from every row: without the second pass
    the evaluation has no solution (NaN); with it every row converges, and the result is the TAP
    log-likelihood of those solutions."""
    m, x = cycling_rbm
    without = settings(max_iter=2000, tol=1e-12, retry_damping=None)
    none = evaluate_tap_log_likelihood(m, x, without.solver_settings, without.dedup_tol)
    assert none["n_unique"] == none["n_converged"] == none["n_converged_retry"] == 0
    assert math.isnan(none["tap_ll"]) and math.isnan(none["log_z_tap"])
    assert none["mean_iterations"] == 2000
    second = without.solver_settings.replace(retry_damping=0.95)
    result = evaluate_tap_log_likelihood(m, x, second, without.dedup_tol)
    assert result["n_converged"] == result["n_converged_retry"] == len(x)
    assert result["mean_iterations"] > 2000
    states = tap.solve(m, x, damping=0.95, tol=1e-12, max_iter=4000)
    reps, _, _ = tap.unique(states, 1e-2)
    expected = tap.log_likelihood(m, x, states.select(reps), per_unit=True).mean()
    assert result["n_unique"] == reps.numel()
    assert result["tap_ll"] == pytest.approx(float(expected), abs=1e-9)
    # Every fixed point came from the second pass: none is left without it.
    assert result["n_unique_retry_only"] == result["n_unique"]
    assert math.isnan(result["tap_ll_first_pass"])
    strength = tap.onsager_strength(m, states.select(reps))  # solved otherwise: to 1e-4
    assert result["tap_validity"] == pytest.approx(float(strength.max()), rel=1e-4)


def test_evaluation_first_pass_curve_and_validity():
    """Rows that converge at damping 0.5 give the same log-likelihood with and without the
    second pass's fixed points (there are none), and the validity numbers are the largest and
    median Onsager strength of the unique solutions."""
    x = bars_and_stripes()
    m = build_machine(SPEC, x, 0.3, seeded_generator(3, "eval"))
    s = settings(max_iter=2000, tol=1e-12, retry_damping=0.95)
    result = evaluate_tap_log_likelihood(m, x, s.solver_settings, s.dedup_tol)
    assert result["n_converged_retry"] == 0 and result["n_unique_retry_only"] == 0
    assert result["tap_ll_first_pass"] == pytest.approx(result["tap_ll"], abs=1e-12)
    states = tap.solve(m, x, damping=0.5, tol=1e-12, max_iter=2000)
    reps, _, _ = tap.unique(states, s.dedup_tol)
    strength = tap.onsager_strength(m, states.select(reps))
    assert result["tap_validity"] == pytest.approx(float(strength.max()), rel=1e-6)
    assert result["tap_validity_median"] == pytest.approx(float(strength.median()), rel=1e-6)
    assert 0 < result["tap_validity_median"] <= result["tap_validity"]
    rho = tap.onsager_spectral_radius(m, states.select(reps))
    assert result["tap_validity_rho"] == pytest.approx(float(rho.max()), rel=1e-6)
    assert result["tap_validity_rho_median"] == pytest.approx(float(rho.median()), rel=1e-6)
    assert result["tap_validity_rho"] <= result["tap_validity"] + 1e-12  # the bound


def test_first_pass_curve_leaves_out_second_pass_fixed_points():
    """Solutions reached only by rows marked as second-pass (iterations > max_iter) are left
    out of tap_ll_first_pass, which equals eq. 39 computed from the others directly."""
    from tapmachine.core.machine import BoltzmannMachine
    from tapmachine.core.priors import Bernoulli

    x = bars_and_stripes()
    W = 2.0 * torch.randn(16, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    zeros = torch.zeros(22, dtype=torch.float64)
    m = BoltzmannMachine((Bernoulli(zeros[:16]), Bernoulli(zeros[16:])), (W,))
    states = tap.solve(m, x, damping=0.5, tol=1e-12, max_iter=2000)
    reps, inverse, _ = tap.unique(states, 1e-2)
    assert reps.numel() >= 2, "the test needs several fixed points"
    unique = states.select(reps)
    ll = float(tap.log_likelihood(m, x, unique, per_unit=True).mean())
    # Mark every row of solution 0 as reached in the second pass.
    states.iterations[inverse == 0] = 2001
    out = pass_and_validity(m, states, inverse, unique, ll, max_iter=2000)
    assert out["n_unique_retry_only"] == 1
    kept = torch.arange(reps.numel()) != 0
    expected = tap.log_likelihood(m, x, unique.select(kept), per_unit=True).mean()
    assert out["tap_ll_first_pass"] == pytest.approx(float(expected), abs=1e-10)
    assert out["tap_ll_first_pass"] != pytest.approx(ll, abs=1e-6)


def test_resuming_with_another_retry_damping_evaluates_earlier_epochs_again(tmp_path, monkeypatch):
    """retry_damping is not in the fingerprint: a run resumed with another value evaluates its
    earlier epochs again from their checkpoints (rewriting them, so an interrupted pass goes on
    where it stopped), and the history is the one a run with that value throughout records."""
    from tapmachine.io.modelfile import Checkpoint

    x = bars_and_stripes().repeat(3, 1)
    s = settings(epochs=3, max_iter=12, tol=1e-14, retry_damping=None)

    def run(ckpt, epochs, retry):
        g = seeded_generator(3, "retry")
        m = build_machine(SPEC, x, 0.01, g)
        s_run = dataclasses.replace(s, epochs=epochs, retry_damping=retry)
        return train(m, x, s_run, g, checkpoint_dir=ckpt, progress=False)[1]

    throughout = run(tmp_path / "a", 4, 0.0)
    assert all(h["n_converged_retry"] == h["n_converged"] > 0 for h in throughout)
    run(tmp_path / "b", 3, 0.3)
    # The first re-evaluation pass is interrupted after one epoch.
    real = evaluate_tap_log_likelihood
    calls = []

    def interrupted(*args):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(loop, "evaluate_tap_log_likelihood", interrupted)
    monkeypatch.setattr(resume, "evaluate_tap_log_likelihood", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", 4, 0.0)
    assert Checkpoint.load(tmp_path / "b" / "epoch_1.pt").settings["retry_damping"] == 0.0
    assert Checkpoint.load(tmp_path / "b" / "epoch_2.pt").settings["retry_damping"] == 0.3
    counted = []
    for module in (loop, resume):
        monkeypatch.setattr(
            module, "evaluate_tap_log_likelihood", lambda *a: counted.append(1) or real(*a)
        )
    before = [h["mean_iterations"] for h in Checkpoint.load(tmp_path / "b" / "epoch_3.pt").history]
    resumed = run(tmp_path / "b", 4, 0.0)
    assert [h["mean_iterations"] for h in resumed[:3]] != before
    assert len(counted) == 3  # epochs 2 and 3 again, then epoch 4
    keys = ["tap_ll", "n_converged_retry", "n_unique", "log_z_tap", "mean_iterations"]
    assert [[h[k] for k in keys] for h in resumed] == [[h[k] for k in keys] for h in throughout]
    for epoch in (1, 2, 3):
        ckpt = Checkpoint.load(tmp_path / "b" / f"epoch_{epoch}.pt")
        assert ckpt.settings["retry_damping"] == 0.0
        assert ckpt.history[-1]["tap_ll"] == throughout[epoch - 1]["tap_ll"]


def test_an_epoch_without_tap_solutions_is_a_gap_and_training_goes_on(tmp_path):
    """When TAP converges from no evaluated row (here: one iteration allowed, no second pass),
    the epoch's TAP numbers are NaN, training finishes, the harvest accepts its checkpoints and
    Fig. 3 draws the gaps."""
    import pandas as pd
    import tiny_harvest

    from tapmachine.figures import fig3
    from tapmachine.tap_paper import harvest

    data_file = tiny_harvest.synthetic_dataset(tmp_path / "synth.npz")
    spec = dict(tiny_harvest.SPEC, epochs=2)
    spec["tap"] = {"max_iter": 1, "tol": 1e-14, "retry_damping": None}
    model_dir = tmp_path / "models" / "tiny"
    machine = train_from_spec("tiny", spec, str(data_file), str(model_dir))
    assert torch.isfinite(machine.W).all() and machine.W.std() > 0.0
    metrics = model_dir / "metrics.csv"
    df = pd.read_csv(metrics)
    assert list(df["epoch"]) == [1, 2]
    assert df[["tap_ll", "tap_ll_stderr", "log_z_tap"]].isna().all().all()
    assert (df["n_unique"] == 0).all() and (df["n_converged"] == 0).all()
    model, ckpt = harvest.load_checkpoint(
        model_dir / "model.pt", model_dir / "checkpoints" / "epoch_1.pt", 1
    )
    assert ckpt.epoch == 1 and math.isnan(model.history[0]["tap_ll"])
    result = fig3.make([metrics], [model_dir / "model.pt"])
    table = result.table
    gaps = table[(table["kind"] == "claim") & (table["claim"] == "epochs_without_solution")]
    assert list(gaps["value"]) == [2.0]


def test_settings_defaults_are_the_schemas():
    """TrainSettings and PretrainSettings take their defaults from the config schema (``model``
    for RBMs and deep TAP machines, ``dbm_model`` for an entry of a DBM method)."""
    import yaml

    from tapmachine.io.schema import SCHEMA_FILE, resolve
    from tapmachine.train import PretrainSettings

    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    defs = schema["$defs"]
    model, dbm_model = defs["model"]["properties"], defs["dbm_model"]["properties"]
    tap_keys = model["tap"]["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(TrainSettings)}
    for key, prop in model.items():
        if key in fields and key != "checkpoint_every":
            assert fields[key] == resolve(prop, schema)["default"], key
    # no default in the schema (a spec that leaves it out stays as it was): every epoch is kept
    assert "default" not in model["checkpoint_every"] and fields["checkpoint_every"] == 1
    for key, prop in tap_keys.items():
        if key != "relaxation":
            assert fields[key] == resolve(prop, schema)["default"], key
    # nor for newton_sor's relaxation: absent, it is the solver's own
    assert "default" not in resolve(tap_keys["relaxation"], schema)
    assert fields["relaxation"] == tap.NEWTON_SOR_RELAXATION == tap.SolverSettings.relaxation
    # the solver's keys come from $defs/tap_solver, its damping and solver as they are there
    solver = defs["tap_solver"]["properties"]
    assert fields["damping"] == solver["damping"]["default"] == tap.SolverSettings.damping
    assert fields["solver"] == solver["solver"]["default"]
    assert fields["eval_samples"] == model["eval"]["properties"]["n_samples"]["default"]
    pretrain = {f.name: f.default for f in dataclasses.fields(PretrainSettings)}
    assert pretrain == {k: p["default"] for k, p in model["pretrain"]["properties"].items()}
    dbm = TrainSettings.from_spec({"method": "dbm_pcd", "hidden": [3]})
    for key, prop in dbm_model.items():
        if key in fields and key != "ucd" and "default" in prop:
            assert getattr(dbm, key) == prop["default"], key
    assert dbm.momentum != fields["momentum"] and not dbm.evaluate
    assert TrainSettings.from_spec({"method": "dbm_pcd", "momentum": 0.3}).momentum == 0.3


@pytest.mark.parametrize("iterations", [3, "converge"])
def test_fused_tap_updates_train_the_same_model(iterations):
    """``tap.fuse`` (the compiled layer update) reaches the eager run's model: 3 epochs of
    fixed-iteration or converged training and their per-epoch evaluation, float64, the same
    parameters to 1e-10."""
    x = bars_and_stripes().double()
    models = []
    for fuse in (False, True):
        g = seeded_generator(5, "fuse")
        m = build_machine(SPEC, x, 0.3, g).to(dtype=torch.float64)
        s = settings(epochs=3, learning_rate=0.1, train_iterations=iterations, fuse=fuse)
        models.append(train(m, x, s, g, progress=False)[0])
    eager, fused = models
    assert fused_module._compiled is not None and not fused_module._failed
    torch.testing.assert_close(fused.W, eager.W, rtol=0.0, atol=1e-10)
    torch.testing.assert_close(fused.hidden.U, eager.hidden.U, rtol=0.0, atol=1e-10)


def test_a_truncated_gaussian_prior_from_one_row_is_finite():
    """One row has no sample variance (torch gives NaN): the precision takes its floor, as for
    a constant column, instead of a NaN prior that diverges at the first step."""
    from tapmachine.train.build import visible_prior

    prior = visible_prior({"prior": "truncated_gaussian"}, torch.tensor([[0.2, 0.7, 0.0]]))
    assert all(bool(torch.isfinite(v).all()) for v in prior.params().values())
    assert torch.equal(prior.V, torch.full((3,), 100.0))


class _Stopped(Exception):
    """A job stopped part-way through an epoch (a session's end)."""


@pytest.mark.parametrize(
    "method, extra",
    [("tap", {"train_iterations": "converge"}), ("pcd", {}), ("cd", {"resample": "bernoulli"})],
)
def test_a_job_stopped_mid_epoch_resumes_at_its_batch_bit_for_bit(tmp_path, capsys, method, extra):
    """With the state kept at every batch boundary (``in_progress_seconds=0``), a job stopped
    after its 5th minibatch of epoch 2 resumes at that batch: parameters, momentum and every
    number of the history but the timings equal an uninterrupted run's, and the epoch's timings
    add both parts. The file goes once its epoch is done."""
    from tapmachine.io.modelfile import EpochInProgress, in_progress_path
    from tapmachine.io.runlog import resumed_epoch, resumed_within

    x = bars_and_stripes().repeat(4, 1)  # 120 rows: 12 batches of 10 an epoch
    s = settings(epochs=3, method=method, learning_rate={"start": 0.05, "end": 0.01}, **extra)

    def run(folder, on_step=None, every=0.0):
        g = seeded_generator(4, "mid-epoch")
        m = build_machine(SPEC, x, 0.5, g)  # couplings strong enough that PCD's chains matter
        return train(
            m, x, s, g, checkpoint_dir=folder, progress=False, on_step=on_step,
            in_progress_seconds=every,
        )  # fmt: skip

    whole, history = run(tmp_path / "whole", every=None)
    steps_seen = []

    def stop_in_epoch_2(step, metrics):
        steps_seen.append(step)
        if step == 12 + 5:
            raise _Stopped

    with pytest.raises(_Stopped):
        run(tmp_path / "stopped", stop_in_epoch_2)
    kept = in_progress_path(tmp_path / "stopped")
    assert kept.exists()
    part = EpochInProgress.load(kept)
    assert part.seconds > 0 and part.cpu_seconds > 0
    capsys.readouterr()
    resumed_steps = []
    resumed, resumed_history = run(tmp_path / "stopped", lambda step, _: resumed_steps.append(step))
    err = capsys.readouterr().err
    assert "resuming epoch 2 after its batch 4" in err
    # the log names the seconds of epoch 2 trained before this start (job_times.wall_times
    # adds them)
    assert resumed_epoch(err) == 1
    assert resumed_within(err) == pytest.approx((part.seconds, part.cpu_seconds), abs=0.05)
    # the kept state is that after batch 4 (written before batch 5's update was offered again)
    assert resumed_steps[0] == 12 + 5 and resumed_steps[-1] == 36
    assert not kept.exists()
    for a, b in zip(
        [*whole.weights, whole.visible.U], [*resumed.weights, resumed.visible.U], strict=True
    ):
        assert torch.equal(a, b)
    timing = ("train_seconds", "epoch_seconds", "epoch_cpu_seconds")
    for a, b in zip(history, resumed_history, strict=True):
        assert {k: v for k, v in a.items() if k not in timing} == {
            k: v for k, v in b.items() if k not in timing
        }


def test_a_job_stopped_in_an_epochs_evaluation_resumes_after_its_last_batch(
    tmp_path, capsys, monkeypatch
):
    """The state after an epoch's last minibatch is kept too: a stop during the evaluation that
    follows costs the evaluation only, and the run ends as an uninterrupted one."""
    x = bars_and_stripes().repeat(4, 1)  # 12 batches an epoch
    s = settings(epochs=2)

    def run(folder):
        g = seeded_generator(8, "in-evaluation")
        m = build_machine(SPEC, x, 0.5, g)
        return train(m, x, s, g, checkpoint_dir=folder, progress=False, in_progress_seconds=0.0)

    whole, history = run(tmp_path / "whole")
    real = loop.evaluate_tap_log_likelihood
    calls = []

    def stop_in_second_evaluation(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise _Stopped
        return real(*args, **kw)

    monkeypatch.setattr(loop, "evaluate_tap_log_likelihood", stop_in_second_evaluation)
    with pytest.raises(_Stopped):
        run(tmp_path / "cut")
    monkeypatch.setattr(loop, "evaluate_tap_log_likelihood", real)
    capsys.readouterr()
    resumed, resumed_history = run(tmp_path / "cut")
    assert "resuming epoch 2 after its batch 12" in capsys.readouterr().err
    assert torch.equal(whole.W, resumed.W) and torch.equal(whole.visible.U, resumed.visible.U)
    assert [h["tap_ll"] for h in history] == [h["tap_ll"] for h in resumed_history]


def test_a_kept_mid_epoch_state_of_another_run_or_damaged_is_not_used(tmp_path, capsys):
    from tapmachine.io.modelfile import in_progress_path

    x = bars_and_stripes()
    folder = tmp_path / "ckpt"

    def run(lr, on_step=None):
        g = seeded_generator(5, "other")
        m = build_machine(SPEC, x, 0.01, g)
        s = settings(epochs=2, learning_rate=lr)
        return train(
            m, x, s, g, checkpoint_dir=folder, progress=False, on_step=on_step,
            in_progress_seconds=0.0,
        )  # fmt: skip

    def stop(step, _):
        if step == 2:
            raise _Stopped

    with pytest.raises(_Stopped):
        run(0.05, stop)
    assert in_progress_path(folder).exists()
    capsys.readouterr()
    run(0.02)  # other settings: every checkpoint and the kept state are stale
    assert "resuming epoch" not in capsys.readouterr().err
    with pytest.raises(_Stopped):
        run(0.05, stop)
    in_progress_path(folder).write_bytes(b"not a torch file")
    run(0.05)
    err = capsys.readouterr().err
    assert "in_progress.pt" in err and "resuming epoch" not in err
    assert not in_progress_path(folder).exists()


def test_check_finite_names_the_parameter_that_diverged_and_passes_finite_ones():
    """A NaN or an infinity anywhere, in a coupling or a prior parameter, is named; finite
    parameters pass, also when their sum overflows (so the quick sum decides nothing there)."""
    from tapmachine.train.update import check_finite

    m = build_machine(SPEC, bars_and_stripes(), 0.01, seeded_generator(1, "finite"))
    check_finite(m, 1, 1)
    largest = torch.finfo(m.weights[0].dtype).max
    huge = m.replace(weights=[torch.full_like(m.weights[0], largest)])
    assert not torch.isfinite(huge.weights[0].sum())
    check_finite(huge, 1, 1)
    for bad in (float("nan"), float("inf"), -float("inf")):
        W = m.weights[0].clone()
        W[2, 1] = bad
        with pytest.raises(TrainingError, match="diverged at epoch 3, batch 7: weights\\[0\\]"):
            check_finite(m.replace(weights=[W]), 3, 7)
    prior = m.priors[1]
    name, value = next(iter(prior.params().items()))
    broken = value.clone()
    broken.view(-1)[0] = float("nan")
    priors = [m.priors[0], prior.replace(**{name: broken}), *m.priors[2:]]
    with pytest.raises(TrainingError, match=f"layer 1 prior {name} not finite"):
        check_finite(m.replace(priors=priors), 1, 2)
