"""``benchmarks.converged_epoch._checkpoint``: which checkpoint the GPU check's converged steps
start from (the one asked for, else the model's latest, numerically, else none)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the benchmarks package sits beside src/

from benchmarks.converged_epoch import _checkpoint  # noqa: E402


def test_the_epoch_asked_for_else_the_latest_by_number_else_none(tmp_path):
    model = tmp_path / "bmnist_h500"
    assert _checkpoint(tmp_path, "bmnist_h500", 10) is None
    model.mkdir()
    for epoch in (3, 9, 12):
        (model / f"epoch_{epoch}.pt").touch()
    assert _checkpoint(tmp_path, "bmnist_h500", 10) == model / "epoch_12.pt"  # not "epoch_9"
    (model / "epoch_10.pt").touch()
    assert _checkpoint(tmp_path, "bmnist_h500", 10) == model / "epoch_10.pt"
