"""Tiny RBMs with exact answers, shared by the training, solver, resume and tracking tests:
4 x 4 bars and stripes, a 16 x 6 binary RBM, its settings and its exact mean log-likelihood, and
random layered machines of any prior."""

import torch

from tapmachine.core.estimators import exact_log_partition
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import TruncatedGaussian
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


def random_machine(prior_cls, sizes, scale, seed):
    """(machine, generator): a float64 layered machine with couplings scale * N(0, 1) and fields
    N(0, 1) (truncated Gaussians: variances uniform in [1, 2]), drawn from ``seed``; the
    generator, advanced past the draws, is returned for the test's own."""
    g = torch.Generator().manual_seed(seed)
    dt = torch.float64
    weights = tuple(
        scale * torch.randn(n0, n1, dtype=dt, generator=g)
        for n0, n1 in zip(sizes[:-1], sizes[1:], strict=True)
    )
    if prior_cls is TruncatedGaussian:
        priors = tuple(
            TruncatedGaussian(
                torch.randn(n, dtype=dt, generator=g), 1.0 + torch.rand(n, dtype=dt, generator=g)
            )
            for n in sizes
        )
    else:
        priors = tuple(prior_cls(torch.randn(n, dtype=dt, generator=g)) for n in sizes)
    return BoltzmannMachine(priors, weights), g
