"""adaTAP (Alg. 3) on a device against the CPU: one machine and one batch, float64.

Prints, as one JSON line, the largest absolute difference of the prior-node means a_1 and
variances c_1 after 1, 3 and 10 iterations at K = 20 on a 784 x 500 binary RBM (Fig. 10's
size), and the per-row iteration counts to tol 1e-8 on both. The Cholesky and LU paths of
``adatap._symmetric_inverse`` differ by device library (cuSOLVER or LAPACK), so the two agree
to rounding, not bit for bit.

    python benchmarks/adatap_device.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import binary_mnist  # noqa: E402
from tapmachine.core import adatap  # noqa: E402
from tapmachine.core.machine import RBM  # noqa: E402
from tapmachine.core.priors import Bernoulli  # noqa: E402


def _max_abs_diff(cpu_layers, device_layers) -> float:
    return max(
        (p - q.cpu()).abs().max().item() for p, q in zip(cpu_layers, device_layers, strict=True)
    )


def compare(device: str, k: int = 20) -> dict:
    """Max |a_device - a_cpu| and |c_device - c_cpu| after 1, 3 and 10 iterations, and the
    iteration counts to tol 1e-8 (at most 60) on both devices."""
    g = torch.Generator().manual_seed(0)
    nv, nh = 784, 500
    W = 0.05 * torch.randn(nv, nh, generator=g, dtype=torch.float64)
    bv = 0.1 * torch.randn(nv, generator=g, dtype=torch.float64)
    bh = 0.1 * torch.randn(nh, generator=g, dtype=torch.float64)
    cpu = RBM(W, Bernoulli(bv), Bernoulli(bh))
    other = cpu.to(device)
    x, source = binary_mnist(k)
    x = x.to(torch.float64)
    result = {"device": device, "batch": k, "data": source}
    for iters in (1, 3, 10):
        a = adatap.solve(cpu, x, tol=0.0, max_iter=iters)
        b = adatap.solve(other, x.to(device), tol=0.0, max_iter=iters)
        result[f"max_abs_diff_a_{iters}"] = _max_abs_diff(a.a, b.a)
        result[f"max_abs_diff_c_{iters}"] = _max_abs_diff(a.c, b.c)
    a = adatap.solve(cpu, x, tol=1e-8, max_iter=60)
    b = adatap.solve(other, x.to(device), tol=1e-8, max_iter=60)
    result["iterations_cpu_mean"] = a.iterations.double().mean().item()
    result["iterations_device_mean"] = b.iterations.double().mean().item()
    result["rows_same_iterations"] = (a.iterations == b.iterations.cpu()).double().mean().item()
    result["max_abs_diff_a_converged"] = _max_abs_diff(a.a, b.a)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    torch.set_num_threads(4)
    print(json.dumps(compare(args.device)))


if __name__ == "__main__":
    main()
