"""Alg. 1's sweep Jacobian and the stability of its fixed points (``tap.stability``)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import random_machine

from tapmachine.core import tap
from tapmachine.core.priors import Bernoulli, Spin, TruncatedGaussian
from tapmachine.core.tap.stability import flatten_state, sweep_jacobian, sweep_map

DT = torch.float64


def _random_state(machine, g, rows=3):
    """A state with every mean and variance given, away from any fixed point."""
    a = [torch.rand(rows, n, dtype=DT, generator=g) for n in machine.sizes]
    if isinstance(machine.priors[0], Spin):
        a = [2.0 * t - 1.0 for t in a]
    c = [0.05 + 0.2 * torch.rand(rows, n, dtype=DT, generator=g) for n in machine.sizes]
    return a, c


CASES = [
    (Bernoulli, (8, 4), 0.8, 0),
    (Spin, (6, 5), 0.3, 2),
    (TruncatedGaussian, (7, 3), 0.4, 3),
    (Bernoulli, (6, 5, 4), 0.6, 4),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-{len(c[1])}")
@pytest.mark.parametrize("damping", [0.5, 0.95])
def test_sweep_map_is_one_sweep_of_the_solver(case, damping):
    """``sweep_map`` from a given state equals ``tap.solve``'s first iteration from it (every
    quantity given, so damped) for every prior and a 3-layer machine."""
    machine, g = random_machine(*case)
    a, c = _random_state(machine, g)
    one = tap.solve(
        machine,
        a[0],
        c_visible=c[0],
        a_hidden=a[1:],
        c_hidden=c[1:],
        damping=damping,
        tol=0.0,
        max_iter=1,
    )
    phi = sweep_map(machine, damping)
    z = flatten_state(tap.TAPState(a, c, a, a, torch.ones(3), torch.ones(3, dtype=torch.bool)))
    mapped = torch.stack([phi(row) for row in z])
    assert torch.allclose(mapped, flatten_state(one), atol=1e-13, rtol=0)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-{len(c[1])}")
def test_jacobian_matches_central_differences(case):
    """Each column of the Jacobian against (Phi(z + h e_k) - Phi(z - h e_k)) / 2h."""
    machine, g = random_machine(*case)
    a, c = _random_state(machine, g, rows=2)
    state = tap.TAPState(a, c, a, a, torch.ones(2), torch.ones(2, dtype=torch.bool))
    J = sweep_jacobian(machine, state, 0.5, chunk=1)
    phi = sweep_map(machine, 0.5)
    h = 1e-6
    for row, z in enumerate(flatten_state(state)):
        eye = torch.eye(z.numel(), dtype=DT)
        numeric = torch.stack([(phi(z + h * e) - phi(z - h * e)) / (2 * h) for e in eye], 1)
        assert torch.allclose(J[row], numeric, atol=1e-8, rtol=0)


def test_fixed_points_alg1_reaches_are_stable():
    """On a small RBM where Alg. 1 converges, its fixed points have spectral radius < 1, and
    the rate at which its iterates approach them is that radius."""
    machine, g = random_machine(Bernoulli, (10, 6), 0.8, 5)
    x = (torch.rand(20, 10, generator=g, dtype=DT) < 0.5).to(DT)
    state = tap.solve(machine, x, damping=0.5, tol=1e-28, max_iter=5000)
    assert state.converged.all()
    radius, leading = tap.sweep_stability(machine, state, 0.5)
    assert bool((radius < 1).all())
    # Alg. 1's error decays as radius^t: compare with the iterates from a perturbed start.
    row = int(radius.argmax())
    one = state.select(torch.tensor([row]))
    z_star = flatten_state(one)[0]
    phi = sweep_map(machine, 0.5)
    direction = torch.linalg.eig(sweep_jacobian(machine, one, 0.5)[0])
    v = direction.eigenvectors[:, direction.eigenvalues.abs().argmax()].real
    z = z_star + 1e-5 * v / v.norm()
    errors = []
    for _ in range(45):
        z = phi(z)
        errors.append(float((z - z_star).norm()))
    rate = (errors[44] / errors[4]) ** (1 / 40)
    assert rate == pytest.approx(float(radius[row]), rel=2e-2)
    assert float(leading[row].abs()) == pytest.approx(float(radius[row]))


def test_fixed_points_of_a_cycling_rbm_are_unstable_at_half_damping(cycling_rbm):
    """Where Alg. 1 at damping 0.5 converges from no start, the fixed points the 0.95 damping
    reaches are unstable at 0.5 (spectral radius above 1, by an eigenvalue of negative real
    part: an oscillating instability) and stable at 0.95."""
    machine, x = cycling_rbm
    state = tap.solve(machine, x, damping=0.95, tol=1e-28, max_iter=20000)
    assert state.converged.all()
    points, _, _ = tap.unique(state, 1e-6)
    fixed = state.select(points)
    radius_half, leading_half = tap.sweep_stability(machine, fixed, 0.5)
    radius_heavy, _ = tap.sweep_stability(machine, fixed, 0.95)
    assert bool((radius_half > 1).all())
    assert bool((leading_half.real < 0).all())
    assert bool((radius_heavy < 1).all())


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-{len(c[1])}")
@pytest.mark.parametrize("damping", [0.5, 0.95])
def test_krylov_radius_is_the_dense_one_on_the_whole_space(case, damping):
    """With as many Jacobian-vector products as variables, the Arnoldi estimate's leading Ritz
    value is the dense Jacobian's leading eigenvalue (any state, every prior, 3 layers)."""
    machine, g = random_machine(*case)
    a, c = _random_state(machine, g)
    state = tap.TAPState(a, c, a, a, torch.ones(3), torch.ones(3, dtype=torch.bool))
    radius, leading = tap.sweep_stability(machine, state, damping)
    D = 2 * sum(machine.sizes)
    estimate, estimate_leading = tap.sweep_radius_krylov(machine, state, damping, krylov_dim=D)
    torch.testing.assert_close(estimate, radius, rtol=1e-10, atol=0)
    torch.testing.assert_close(estimate_leading.real, leading.real, rtol=1e-10, atol=1e-12)


def test_krylov_radius_from_few_products_at_fixed_points(cycling_rbm):
    """At the fixed points of a 60 x 30 RBM (D = 180) 30 products give the radius to 1e-6, at
    both dampings; on the cycling RBM 12 of its 22 give the same verdict as the dense
    Jacobian (unstable at 0.5 by a flip, stable at 0.95)."""
    machine, g = random_machine(Bernoulli, (60, 30), 0.8, 3)
    x = (torch.rand(10, 60, generator=g, dtype=DT) < 0.5).to(DT)
    state = tap.solve_with_retry(
        machine, x, tap.SolverSettings(damping=0.5, tol=1e-24, max_iter=5000)
    )
    assert state.converged.all()
    for damping in (0.5, 0.95):
        radius, _ = tap.sweep_stability(machine, state, damping)
        estimate, _ = tap.sweep_radius_krylov(
            machine, state, damping, krylov_dim=30, generator=torch.Generator().manual_seed(1)
        )
        torch.testing.assert_close(estimate, radius, rtol=1e-6, atol=0)

    machine, x = cycling_rbm
    state = tap.solve(machine, x, damping=0.95, tol=1e-28, max_iter=20000)
    fixed = state.select(tap.unique(state, 1e-6)[0])
    g = torch.Generator().manual_seed(2)
    half, leading = tap.sweep_radius_krylov(machine, fixed, 0.5, krylov_dim=12, generator=g)
    heavy, _ = tap.sweep_radius_krylov(machine, fixed, 0.95, krylov_dim=12, generator=g)
    assert bool((half > 1).all()) and bool((leading.real < -1).all())
    assert bool((heavy < 1).all())
    torch.testing.assert_close(half, tap.sweep_stability(machine, fixed, 0.5)[0], rtol=1e-6, atol=0)
