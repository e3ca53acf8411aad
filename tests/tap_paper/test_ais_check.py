"""``tapmachine ais-check``: AIS of one model at a baseline and with more work, against the
enumerated ln Z of a small RBM."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from tapmachine.core import estimators
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.io.data import Dataset, save_dataset
from tapmachine.io.modelfile import ModelFile
from tapmachine.pipeline import cli
from tapmachine.tap_paper.likelihood import ais_check as check


def _rbm(nv=14, nh=8, std=0.6, seed=3):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(nv, nh, generator=g, dtype=torch.float64) * std
    U = torch.randn(nv, generator=g, dtype=torch.float64) * 0.3
    return RBM(W, Bernoulli(U), Bernoulli(torch.zeros(nh, dtype=torch.float64)))


def _images(n, nv, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, nv, generator=g) < 0.4).double()


def test_a_refined_schedule_divides_every_step_and_keeps_the_values():
    base = estimators.salakhutdinov_schedule()
    fine = estimators.refined_schedule(base, 10)
    assert fine.numel() == 14500 * 10 + 1 == 145001
    torch.testing.assert_close(fine[::10], base)
    steps = fine.diff()
    assert steps.min() > 0
    # the three segments' steps, each divided by 10
    assert steps.max() == pytest.approx(1e-4, rel=1e-6)
    assert steps.min() == pytest.approx(1e-6, rel=1e-6)
    torch.testing.assert_close(estimators.refined_schedule(base, 1), base)
    with pytest.raises(ValueError, match="refinement factor"):
        estimators.refined_schedule(base, 0)


def test_every_estimate_of_the_check_brackets_the_enumerated_log_partition():
    """Forward estimates at the baseline's seeds, with 8x the runs and on a 4x finer schedule,
    and the reverse estimate, each within 4 standard errors (plus the bias of a short schedule)
    of the enumeration; the exact row is -F - ln Z exactly, and shifts are from the first row."""
    machine = _rbm()
    train, test = _images(300, 14, 1), _images(100, 14, 2)
    settings = check.AISCheckSettings(
        runs=(50, 400), densities=(1, 4), seeds=3, schedule="linear", n_betas=300
    )
    rows = check.ais_check(machine, train, test, settings)
    kinds = [(r["direction"], r["runs"], r["density"], r["seed"]) for r in rows]
    assert kinds == [
        ("forward", 50, 1, 0),
        ("forward", 50, 1, 1),
        ("forward", 50, 1, 2),
        ("forward", 400, 1, 0),
        ("forward", 50, 4, 0),
        ("reverse", 50, 1, 0),
        ("exact", 0, 0, 0),
    ]
    log_z = float(estimators.exact_log_partition(machine))
    neg_f = float(-machine.free_energy_visible(test).mean())
    assert rows[-1]["ll_test"] == pytest.approx(neg_f - log_z, abs=1e-9)
    assert [r["n_betas"] for r in rows[:6]] == [300, 300, 300, 300, 1197, 300]
    for r in rows[:-1]:
        assert abs(r["log_z"] - log_z) < 4 * r["log_z_stderr"] + 0.05, r
        assert r["ll_test"] == pytest.approx(neg_f - r["log_z"])
        assert r["ll_shift"] == pytest.approx(r["ll_test"] - rows[0]["ll_test"])
    assert rows[0]["ll_shift"] == 0.0
    # the seeds differ, and 8x the runs shrinks the standard error
    assert len({r["log_z"] for r in rows[:3]}) == 3
    assert rows[3]["log_z_stderr"] < rows[0]["log_z_stderr"]
    text = check.summary(rows)
    assert "3 seed(s)" in text and "reverse" in text and "exact" in text


def test_check_settings_refuse_what_cannot_run():
    with pytest.raises(ValueError, match="runs"):
        check.AISCheckSettings(runs=(1,))
    with pytest.raises(ValueError, match="densities"):
        check.AISCheckSettings(densities=(0,))
    with pytest.raises(ValueError, match="seeds"):
        check.AISCheckSettings(seeds=0)


def test_the_command_writes_one_row_per_estimate(tmp_path, capsys):
    machine = _rbm()
    x = _images(260, 14, 4).numpy().astype(np.uint8)
    data = tmp_path / "tiny.npz"
    save_dataset(
        Dataset(x[:200], np.zeros(200, int), x[200:], np.zeros(60, int), (2, 7), {}, "tiny"), data
    )
    model_dir = tmp_path / "models" / "tiny"
    model_dir.mkdir(parents=True)
    ModelFile.from_machine(machine, "tiny", spec={"epochs": 1}).save(model_dir / "model.pt")
    out = tmp_path / "check.csv"
    argv = ["ais-check", "--model-dir", str(model_dir), "--data", str(data), "--out", str(out)]
    argv += ["--runs", "20,60", "--density", "1,2", "--seeds", "2", "--n-betas", "200"]
    assert cli.main(argv + ["--dtype", "float64"]) == 0
    table = pd.read_csv(out)
    assert list(table["direction"]) == ["forward"] * 4 + ["reverse", "exact"]
    assert set(table["model"]) == {"tiny"} and set(table["dataset"]) == {"tiny"}
    assert all(math.isfinite(v) for v in table["ll_test"])
    printed = capsys.readouterr().out
    assert "range over every estimate" in printed and f"wrote {out}" in printed

    assert cli.main(argv[:-8] + ["--runs", "a,b"]) == 2
    assert "--runs takes comma-separated integers" in capsys.readouterr().err
    assert cli.main(argv[:-8] + ["--epoch", "3"]) == 2
    assert "epoch_3.pt not found" in capsys.readouterr().err
