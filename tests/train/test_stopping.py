"""A checkpointed training stopped by SIGTERM or Ctrl-C keeps its state first (``train.stopping``):
at the next minibatch boundary, or in the checkpoint of the epoch whose evaluation was under way,
and resumes from it with the numbers of an uninterrupted run. The signals are sent to this
process from inside the training, so where they land is exact."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from tiny_models import SPEC, bars_and_stripes, settings

from tapmachine.core.errors import StoppedBySignal, TapmachineError
from tapmachine.core.seeding import seeded_generator
from tapmachine.io.modelfile import EpochInProgress, in_progress_path
from tapmachine.pipeline import cli
from tapmachine.train import build_machine, loop, train

X = bars_and_stripes().repeat(4, 1)  # 120 rows: 12 batches of 10 an epoch
TIMINGS = ("train_seconds", "epoch_seconds", "epoch_cpu_seconds")


def _run(folder, on_step=None, on_epoch=None, epochs=3):
    g = seeded_generator(11, "stopping")
    m = build_machine(SPEC, X, 0.5, g)
    s = settings(epochs=epochs, learning_rate={"start": 0.05, "end": 0.01})
    return train(
        m, X, s, g, checkpoint_dir=folder, progress=False, on_step=on_step, on_epoch=on_epoch
    )


def _same_run(a, b) -> None:
    (ma, ha), (mb, hb) = a, b
    for x, y in zip([*ma.weights, ma.visible.U], [*mb.weights, mb.visible.U], strict=True):
        assert torch.equal(x, y)
    assert [{k: v for k, v in r.items() if k not in TIMINGS} for r in ha] == [
        {k: v for k, v in r.items() if k not in TIMINGS} for r in hb
    ]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("whole"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_mid_epoch_keeps_the_state_at_the_next_batch_and_stops(
    tmp_path, capsys, whole, signum
):
    before = signal.getsignal(signum)

    def signal_in_epoch_2(step, _):
        if step == 12 + 5:
            os.kill(os.getpid(), signum)

    with pytest.raises(StoppedBySignal) as stopped:
        _run(tmp_path, signal_in_epoch_2)
    assert stopped.value.signum == signum and stopped.value.exit_status == 128 + signum
    kept = in_progress_path(tmp_path)
    assert f"after batch 5 of epoch 2 kept in {kept}" in str(stopped.value)
    assert EpochInProgress.load(kept).batches == 5
    assert signal.getsignal(signum) == before
    capsys.readouterr()
    resumed = _run(tmp_path)
    assert "resuming epoch 2 after its batch 5" in capsys.readouterr().err
    _same_run(whole, resumed)


def test_a_signal_during_an_evaluation_stops_after_that_epochs_checkpoint(
    tmp_path, capsys, monkeypatch, whole
):
    real = loop.evaluate_tap_log_likelihood
    logged = []

    def signal_in_first_evaluation(*args, **kw):
        if not logged:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kw)

    monkeypatch.setattr(loop, "evaluate_tap_log_likelihood", signal_in_first_evaluation)
    with pytest.raises(StoppedBySignal, match="after epoch 1 kept in .*epoch_1.pt"):
        _run(tmp_path, on_epoch=lambda epoch, *_: logged.append(epoch))
    assert logged == [1]  # the epoch is logged before the stop
    assert (tmp_path / "epoch_1.pt").exists() and not in_progress_path(tmp_path).exists()
    monkeypatch.setattr(loop, "evaluate_tap_log_likelihood", real)
    capsys.readouterr()
    resumed = _run(tmp_path)
    assert "resuming epoch" not in capsys.readouterr().err
    _same_run(whole, resumed)


def test_a_signal_in_the_last_epoch_stops_before_the_job_goes_on(tmp_path, whole):
    """The stop is not lost when training has nothing left: the job (which would write model.pt
    or pretrain its next layer) stops too, and its rerun finds every epoch done."""

    def signal_in_last_batch(step, _):
        if step == 3 * 12:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(StoppedBySignal, match="after batch 12 of epoch 3"):
        _run(tmp_path, signal_in_last_batch)
    _same_run(whole, _run(tmp_path))


def test_a_second_signal_acts_as_it_would_without_the_stop(tmp_path):
    class SecondSignal(Exception):
        pass

    def before(signum, frame):
        raise SecondSignal

    previous = signal.signal(signal.SIGTERM, before)
    try:

        def two_signals(step, _):
            if step == 3:
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)

        with pytest.raises(SecondSignal):
            _run(tmp_path, two_signals)
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_training_without_checkpoints_leaves_the_signals_alone():
    seen = []
    g = seeded_generator(11, "no-checkpoints")
    m = build_machine(SPEC, X, 0.5, g)
    train(
        m, X, settings(epochs=1), g, progress=False,
        on_step=lambda *_: seen.append(signal.getsignal(signal.SIGTERM)),
    )  # fmt: skip
    assert seen and all(h == signal.getsignal(signal.SIGTERM) for h in seen)


def test_the_command_exits_as_a_process_the_signal_ended(monkeypatch, capsys):
    from tapmachine.pipeline.stages import train as train_stage

    def stopped(*args, **kwargs):
        raise StoppedBySignal(signal.SIGTERM, "training state after batch 3 of epoch 1 kept in x")

    monkeypatch.setattr(train_stage, "train_model", stopped)
    code = cli.main(["train", "--model", "m", "--spec", "{}", "--data", "d", "--outdir", "o"])
    err = capsys.readouterr().err
    assert code == 143, err
    assert err == (
        "tapmachine: error: stopped on SIGTERM: training state after batch 3 of epoch 1 kept in x\n"
    )
    assert issubclass(StoppedBySignal, TapmachineError)
