"""``tap_side_by_side``: whether Fig. 3's four binary-MNIST RBMs (Nh = 25, 50, 100, 500), which
train independently, pay for sharing one GPU. Each model's converged steps (``paper.yaml``'s,
``converged_epoch.PAPER_H500`` with its own Nh) run in a process of their own, as four
Snakemake jobs on one GPU would: first one process at a time, then the four at once, their timed
steps started together.

    python -m benchmarks.side_by_side --nh 500 [--steps 40] [--go FILE]

is one such process: it prints a JSON line with its timed window (wall clock) and steps."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import binary_mnist
from benchmarks.converged_epoch import PAPER_H500, checkpoint_or_warm, first_batches, run_steps
from tapmachine.train import TrainSettings, graphs

__all__ = ["FIG3_HIDDEN", "bench_tap_side_by_side"]

#: Fig. 3's models: Table 1's binary-MNIST RBMs.
FIG3_HIDDEN = (25, 50, 100, 500)
#: Timed steps per model (quick: 5), after a first pass over the same minibatches that captures
#: their graphs.
STEPS = 40
#: Seconds the whole comparison may take (the GPU check's part allows 130): a process past its
#: share is killed and the result says which phase did not finish.
BUDGET = 115.0


def _child(nh: int, steps: int, device: str, checkpoints, go: Path | None, quick: bool) -> dict:
    """One model's steps: ready (data, model, a first pass capturing the graphs), then, once
    ``go`` exists, the timed pass over the same minibatches from the same start."""
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    x, _ = binary_mnist(6000 if quick else None)
    name = f"bmnist_h{nh}"
    machine, model = checkpoint_or_warm(name, nh, x, device, quick, checkpoints)
    settings = TrainSettings(**PAPER_H500, epochs=1)
    batches = first_batches(x, steps)
    captured = torch.device(device).type == "cuda"
    stepper = graphs.ChunkedSteps(machine, settings, graphs.cuda_record) if captured else None
    t0 = time.time()
    run_steps(machine, batches, settings, device, stepper)
    print(f"{name}: first pass (captures) {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    if go is not None:
        go.with_suffix(f".ready{nh}").touch()
        while not go.exists():
            time.sleep(0.005)
    start = time.time()
    seconds, _, stats = run_steps(machine, batches, settings, device, stepper)
    end = time.time()
    return {
        "nh": nh,
        "model": model,
        "start": start,
        "end": end,
        "steps": len(seconds),
        "mean_row_iterations": stats["iterations"] / stats["steps"],
    }


def _spawn(nh: int, steps: int, device: str, checkpoints, go: Path | None, quick: bool):
    command = [sys.executable, "-m", "benchmarks.side_by_side", "--nh", str(nh)]
    command += ["--steps", str(steps), "--device", device]
    if checkpoints:
        command += ["--checkpoints", str(checkpoints)]
    if go is not None:
        command += ["--go", str(go)]
    if quick:
        command.append("--quick")
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())


def _result(process, deadline: float) -> dict:
    try:
        out, _ = process.communicate(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise TimeoutError("a side-by-side process did not finish within the budget") from None
    if process.returncode != 0:
        raise RuntimeError(f"side-by-side process failed ({process.returncode}): {out[-500:]}")
    return json.loads(out.strip().splitlines()[-1])


def _together(steps: int, device: str, checkpoints, quick: bool, deadline: float) -> list:
    """The four processes started at once, their timed passes released together once all four
    are ready (a file each, then the ``go`` file)."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        processes = [_spawn(nh, steps, device, checkpoints, go, quick) for nh in FIG3_HIDDEN]
        try:
            ready = [go.with_suffix(f".ready{nh}") for nh in FIG3_HIDDEN]
            while not all(p.exists() for p in ready):
                if time.time() > deadline:
                    raise TimeoutError("the four processes were not all ready within the budget")
                if any(p.poll() is not None for p in processes):
                    raise RuntimeError("a side-by-side process ended before it was ready")
                time.sleep(0.01)
            go.touch()
            return [_result(p, deadline) for p in processes]
        finally:
            for p in processes:
                if p.poll() is None:
                    p.kill()


def bench_tap_side_by_side(device, quick: bool, checkpoints: Path | None = None) -> dict:
    """Fig. 3's models' converged steps (``STEPS`` each, quick: 5), one process at a time and
    four at once on ``device``: ``alone_seconds`` (each model's timed window alone, and their
    sum), ``together_seconds`` (from the first start to the last end of the four timed windows
    started together) and ``speedup`` (the sum alone over together: above 1, side by side pays).
    Each model starts from its checkpoint under ``checkpoints`` (else a warmed-up machine,
    ``converged_epoch.checkpoint_or_warm``). Within ``BUDGET`` seconds: past it, ``error``
    says which phase did not finish and the result holds what was measured."""
    steps = 5 if quick else STEPS
    deadline = time.time() + BUDGET
    result = {"name": "tap_side_by_side", "hidden": list(FIG3_HIDDEN), "steps": steps}
    result.update(seconds=None, gflops=None, ratio_to_matmul=None, models={}, alone_seconds={})
    try:
        for nh in FIG3_HIDDEN:
            t0 = time.time()
            r = _result(_spawn(nh, steps, device, checkpoints, None, quick), deadline)
            result["alone_seconds"][str(nh)] = r["end"] - r["start"]
            result["models"][str(nh)] = r["model"]
            print(f"tap_side_by_side: Nh = {nh} alone, {time.time() - t0:.1f} s with its start",
                  file=sys.stderr, flush=True)  # fmt: skip
        together = _together(steps, device, checkpoints, quick, deadline)
    except (TimeoutError, RuntimeError) as exc:
        result["error"] = str(exc)
        return result
    window = max(r["end"] for r in together) - min(r["start"] for r in together)
    total = sum(result["alone_seconds"].values())
    result.update(
        alone_seconds_sum=total,
        together_seconds=window,
        together_seconds_each={str(r["nh"]): r["end"] - r["start"] for r in together},
        speedup=total / window,
        seconds=window,
    )
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nh", type=int, required=True)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--checkpoints", type=Path)
    p.add_argument("--go", type=Path)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    result = _child(args.nh, args.steps, args.device, args.checkpoints, args.go, args.quick)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
