"""``benchmarks.relaxation``: newton_sor's over-relaxation against Alg. 1's fixed points, and
where it finds a run's checkpoints."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the benchmarks package sits beside src/

from benchmarks.relaxation import _checkpoint, relaxation_comparison  # noqa: E402
from tapmachine.core.priors import Bernoulli  # noqa: E402
from tapmachine.core.tap import inference  # noqa: E402
from tests.tiny_models import random_machine  # noqa: E402


def test_every_omega_reaches_alg1s_one_fixed_point_and_each_is_applied():
    """A small RBM at moderate coupling has one TAP fixed point: every omega converges every row
    to Alg. 1's; the omegas change the sweeps (each was applied), and newton_sor's own omega is
    left as it was."""
    before = dict(inference.NEWTON)
    machine, g = random_machine(Bernoulli, (30, 12), 0.5, seed=3)
    x = (torch.rand(16, 30, generator=g, dtype=torch.float64) < 0.3).double()
    out = relaxation_comparison(machine, x, omegas=(1.0, 1.9), cap=500)
    assert out["rows"] == 16 and out["alg1_converged_share"] == 1.0
    for omega in ("1", "1.9"):
        assert out[f"omega_{omega}_converged_share"] == 1.0
        assert (
            out[f"omega_{omega}_at_alg1_fixed_point"] == out[f"omega_{omega}_compared_rows"] == 16
        )
    assert out["omega_1.9_sweeps_mean"] != out["omega_1_sweeps_mean"]
    assert inference.NEWTON == before


def test_a_runs_checkpoint_layout_and_a_benchmarks_are_both_found(tmp_path):
    assert _checkpoint(tmp_path, "bmnist_h25", 50) is None
    (tmp_path / "bmnist_h25").mkdir()
    (tmp_path / "bmnist_h25" / "epoch_50.pt").touch()
    assert _checkpoint(tmp_path, "bmnist_h25", 50) == tmp_path / "bmnist_h25" / "epoch_50.pt"
    run = tmp_path / "bmnist_h25" / "checkpoints"
    run.mkdir()
    (run / "epoch_50.pt").touch()
    assert _checkpoint(tmp_path, "bmnist_h25", 50) == run / "epoch_50.pt"
