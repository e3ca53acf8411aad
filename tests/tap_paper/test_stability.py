"""Which data-started fixed points Alg. 1 can converge to (``tap_paper.stability``), and the
``tapmachine stability`` command on a trained checkpoint."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli
from tapmachine.io.data import Dataset, save_dataset
from tapmachine.tap_paper.stability import fixed_point_stability

DT = torch.float64


def test_fixed_points_alg1_reaches_are_stable_and_the_others_not(cycling_rbm):
    """On an RBM where Alg. 1 converges, every fixed point is reached in the first pass and is
    stable under it; on the RBM where it converges from no start, every fixed point comes from
    the second pass and is unstable at damping 0.5, stable at 0.95."""
    g = torch.Generator().manual_seed(5)
    W = 0.8 * torch.randn(10, 6, dtype=DT, generator=g)
    tame = BoltzmannMachine(
        (Bernoulli(torch.randn(10, dtype=DT, generator=g)), Bernoulli(torch.randn(6, dtype=DT))),
        (W,),
    )
    x = (torch.rand(30, 10, generator=g, dtype=DT) < 0.5).to(DT)
    records = fixed_point_stability(tame, x, max_iter=2000, merge_tol=1e-4)
    assert records and all(r["first_pass"] and r["polished"] for r in records)
    assert all(r["radius"] < 1 for r in records)
    assert sum(r["starts"] for r in records) == 30

    machine, x = cycling_rbm
    records = fixed_point_stability(machine, x, max_iter=2000, merge_tol=1e-4)
    assert records and not any(r["first_pass"] for r in records)
    polished = [r for r in records if r["polished"]]
    assert polished and all(r["radius"] > 1 and r["radius_retry"] < 1 for r in polished)


def test_stability_command_writes_one_row_per_fixed_point(tmp_path):
    """``tapmachine stability`` on a trained model's checkpoints: a CSV row per unique fixed
    point and epoch, starts summing to the rows asked for; a missing epoch is a usage error."""
    from tapmachine.pipeline.cli import main
    from tapmachine.pipeline.stages import train as train_stage

    g = torch.Generator().manual_seed(0)
    x = (torch.rand(120, 16, generator=g) < 0.3).numpy().astype(np.uint8)
    data = tmp_path / "tiny.npz"
    save_dataset(
        Dataset(x[:100], np.zeros(100, int), x[100:], np.zeros(20, int), (4, 4), {}, "tiny"), data
    )
    spec = {
        "dataset": "tiny",
        "visible": {"prior": "bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 5}],
        "epochs": 2,
        "batch_size": 50,
        "learning_rate": 0.05,
        "weight_init_std": 0.1,
        "eval": {"n_samples": 50},
    }
    model_dir = tmp_path / "tiny"
    train_stage.train_model("tiny", spec, data, model_dir, seed=1)
    out = tmp_path / "stability.csv"
    args = ["stability", "--model-dir", str(model_dir), "--data", str(data), "--out", str(out)]
    assert main([*args, "--epochs", "1,2", "--rows", "20"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert {r["epoch"] for r in rows} == {"1", "2"}
    for epoch in ("1", "2"):
        assert sum(int(r["starts"]) for r in rows if r["epoch"] == epoch) == 20
    assert main([*args, "--epochs", "99"]) == 2
    # the Arnoldi estimate from 12 products (D = 42) gives the same radii
    krylov = tmp_path / "krylov.csv"
    args[-1] = str(krylov)
    assert main([*args, "--epochs", "1,2", "--rows", "20", "--krylov", "12"]) == 0
    estimated = list(csv.DictReader(krylov.open()))
    assert len(estimated) == len(rows)
    for dense, arnoldi in zip(rows, estimated, strict=True):
        for key in ("radius", "radius_retry"):
            assert float(arnoldi[key]) == pytest.approx(float(dense[key]), rel=1e-6)
    assert main([*args, "--epochs", "1", "--krylov", "0"]) == 2
