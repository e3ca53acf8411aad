"""What every benchmark shares: the matmul reference rate, timers, and the data and models."""

from __future__ import annotations

import time

import torch

from benchmarks import ROOT
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli
from tapmachine.train import load_model

__all__ = [
    "binary_mnist",
    "call_seconds",
    "dataset_rows",
    "cpu_seconds",
    "matmul_gflops",
    "sync",
    "trained_or_random",
]


def matmul_gflops(m: int, k: int, n: int, device, repeats: int = 30) -> float:
    """Float32 rate of (m x k) @ (k x n) on this machine, best of a few timed batches."""
    a = torch.rand(m, k, device=device)
    b = torch.rand(k, n, device=device)
    out = torch.empty(m, n, device=device)
    for _ in range(5):
        torch.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(5):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            torch.matmul(a, b, out=out)
        sync(device)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return 2.0 * m * k * n / best / 1e9


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def cpu_seconds(fn, repeats: int) -> float:
    """CPU seconds per call of ``fn`` in this process (one warm-up call, then the mean of
    ``repeats``). With one torch thread this is the wall time on an idle core, whatever else
    runs on the machine; wall-clock timing on a shared machine would project its contention."""
    fn()
    t0 = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - t0) / repeats


def call_seconds(fn, device) -> float:
    """Seconds of one call of ``fn``: CPU time of this process on a CPU (with one torch thread,
    the wall time on an idle core whatever else runs, see ``cpu_seconds``), wall time on a GPU."""
    if torch.device(device).type == "cuda":
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - t0
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def binary_mnist(n: int | None = None) -> tuple[torch.Tensor, str]:
    """Binary-MNIST training images from the data stage, else a stand-in with MNIST's density."""
    path = ROOT / "results" / "data" / "binary_mnist.npz"
    if path.exists():
        from tapmachine.io.data import load_dataset

        x = torch.as_tensor(load_dataset(path).x_train[:n], dtype=torch.float32)
        return x, "binary_mnist"
    g = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((n or 60000, 784), 0.13), generator=g)
    return x, "random binary (run `snakemake data` for real binary-MNIST)"


#: Training rows and columns of the stand-ins ``dataset_rows`` uses for a missing dataset: MNIST's,
#: and the faces substitute's (80 training images of 19 x 19; CBCL has 2,429).
STAND_IN_SHAPES = {"real_faces": (80, 361)}


def dataset_rows(name: str, n: int | None = None) -> tuple[torch.Tensor, str]:
    """The first ``n`` training rows of the data stage's dataset ``name`` (float32), else a
    stand-in of its shape (``binary_mnist``'s for MNIST forms; uniform [0, 1] pixels for the
    real-valued ones), with a description of what was used."""
    path = ROOT / "results" / "data" / f"{name}.npz"
    if path.exists():
        from tapmachine.io.data import load_dataset

        return torch.as_tensor(load_dataset(path).x_train[:n], dtype=torch.float32), name
    if name == "binary_mnist" or name.endswith("binary_mnist"):
        x, source = binary_mnist(n)
        return x, f"{source} for {name}"
    rows, cols = STAND_IN_SHAPES.get(name, (60000, 784))
    g = torch.Generator().manual_seed(0)
    x = torch.rand(min(n or rows, rows), cols, generator=g)
    return x, f"uniform random stand-in for {name} (run `snakemake results/data/{name}.npz`)"


def trained_or_random(name: str, nh: int, device, runs=("default",)):
    """(machine, description): the workflow's trained model ``name`` (float32) from the first of
    ``results/{run}/models/{name}/model.pt`` that exists, else a random 784 x ``nh`` Bernoulli
    RBM, W ~ N(0, 0.05^2) (it converges in few iterations and says little)."""
    for run in runs:
        model_file = ROOT / "results" / run / "models" / name / "model.pt"
        if model_file.exists():
            machine = load_model(model_file, device=device, dtype=torch.float32)
            return machine, str(model_file.relative_to(ROOT))
    nv = 784
    g = torch.Generator().manual_seed(0)
    W = 0.05 * torch.randn(nv, nh, generator=g)
    machine = RBM(W, Bernoulli(torch.zeros(nv)), Bernoulli(torch.zeros(nh))).to(device)
    return machine, f"random RBM (train {name} for a meaningful figure)"
