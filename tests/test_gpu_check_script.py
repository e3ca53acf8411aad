"""``benchmarks/gpu_check.sh`` on the CPU (``GPU_CHECK_DEVICE=cpu``, ``GPU_CHECK_QUICK=1``): the
script that a lent GPU's few minutes go to runs its parts, records each one's exit status, and
leaves the files of the parts it ran and no others. Some parts, not all: on a loaded 2-core
machine the DBM steps at the paper's size would only run into their time limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = {"cuda_tests_tap": "cuda_tests.txt", "tap_iteration": "tap.jsonl"}
PARTS["tap_side_by_side"] = "tap_side_by_side.jsonl"


@pytest.mark.slow
def test_the_gpu_check_runs_the_parts_it_is_given_and_records_them(tmp_path):
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "GPU_CHECK_DEVICE": "cpu",
        "GPU_CHECK_QUICK": "1",
        "GPU_CHECK_PARTS": " ".join(PARTS),
    }
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("\t") for line in (out / "parts.tsv").read_text().splitlines()[1:]]
    assert [(name, status) for name, status, _ in rows] == [
        ("environment", "0"),
        *((name, "0") for name in PARTS),
    ]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        {"environment.txt", "parts.tsv", *PARTS.values()}
    )
    assert " passed" in (out / "cuda_tests.txt").read_text()
    for name, file in PARTS.items():
        if file.endswith(".jsonl"):
            lines = (out / file).read_text().splitlines()
            results = [json.loads(line) for line in lines if line.startswith("{")]
            assert [r["name"] for r in results] == [name]
            assert results[0]["device"] == "cpu" and results[0]["quick"] is True
    side = json.loads((out / "tap_side_by_side.jsonl").read_text().splitlines()[-1])
    assert "error" not in side and set(side["alone_seconds"]) == {"25", "50", "100", "500"}
