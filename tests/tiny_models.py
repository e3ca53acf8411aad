"""Tiny RBMs with exact answers, shared by the training, solver, resume and tracking tests:
4 x 4 bars and stripes, a 16 x 6 binary RBM, its settings and its exact mean log-likelihood."""

import torch

from tapmachine.core.estimators import exact_log_partition
from tapmachine.train import TrainSettings


def bars_and_stripes(n=4):
    """All 2^(n+1) - 2 bars-and-stripes images of n x n pixels, float64."""
    rows = []
    for code in range(2**n):
        bits = torch.tensor([(code >> i) & 1 for i in range(n)], dtype=torch.float64)
        rows.append(bits[:, None].expand(n, n).reshape(-1))
        rows.append(bits[None, :].expand(n, n).reshape(-1))
    return torch.unique(torch.stack(rows), dim=0)


SPEC = {"visible": {"prior": "bernoulli"}, "hidden": [{"prior": "bernoulli", "units": 6}]}


def settings(**kw):
    base = dict(
        epochs=4,
        batch_size=10,
        learning_rate=0.05,
        momentum=0.5,
        l2=0.0,
        weight_init_std=0.01,
        eval_samples=30,
        max_iter=300,
    )
    base.update(kw)
    return TrainSettings(**base)


def exact_mean_log_likelihood(machine, x):
    return float((-machine.free_energy_visible(x) - exact_log_partition(machine)).mean())


def converged_training(label: str, **extra):
    """Alg. 2 with Alg. 1 run to convergence (``train_iterations: converge``) for 40 epochs on
    bars and stripes (each image 4 times) from seed ``(0, label)``; ``extra`` settings on top.
    Returns the exact mean log-likelihood before and after, and the training history."""
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.train import build_machine, train

    x = bars_and_stripes().repeat(4, 1)
    g = seeded_generator(0, label)
    machine = build_machine(SPEC, x, 0.01, g)
    before = exact_mean_log_likelihood(machine, x)
    s = settings(
        epochs=40,
        learning_rate=0.3,
        train_iterations="converge",
        train_tol=1e-10,
        train_max_iter=200,
        **extra,
    )
    machine, history = train(machine, x, s, g, progress=False)
    return before, exact_mean_log_likelihood(machine, x), history
