"""What the couplings sample: a machine, which layers move, which are given, which are summed out.

A state is a list with one entry per layer of the machine (``BoltzmannMachine``; layer 0
visible), each of shape (chains, N_l): the *free* layers are sampled, the *clamped* ones are
given (the data v of the posterior, eq. 7) and the *summed* ones are ``None`` (marginalised
analytically, eqs. 20-26). Only binary units ({0, 1} ``Bernoulli`` or {-1, +1} ``Spin``) are
supported: local search and the uniform proposal need a finite state space (Sec. 3.4).

The statistic f whose expectation the estimator targets is the gradient of the log unnormalised
probability, f = -grad_theta E (eqs. 18-19), in the structure of ``tap.tap_gradients``:
``{"weights": [dW_l], "priors": [{name: grad} per layer]}``. Its expectation under the joint
distribution is grad ln Z (the second term of eq. 6, sign flipped); under the posterior, the first.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Prior, Spin

__all__ = ["Target", "binary_mode", "binary_mode_", "uniform_layer", "states_equal", "take"]


def _check_binary(prior: Prior, layer: int) -> None:
    if not isinstance(prior, Bernoulli | Spin):
        raise ValueError(
            f"layer {layer} has {type(prior).__name__} units; local search and the uniform "
            "proposal of UCD-LMI need binary units (Bernoulli or Spin, Sec. 3.4)"
        )


def binary_mode(prior: Prior, field: Tensor) -> Tensor:
    """argmin_x of -x (U + field) over the unit's values: eqs. (15)-(17), sgn form of Sec. 4.1.

    Both binary priors have ln P(x) = U x + const, so the conditional minimum of the energy is
    1[U + field >= 0] for {0, 1} units and sgn(U + field) (with sgn(0) = +1) for spins.
    """
    on = (field + prior.U) >= 0
    if isinstance(prior, Spin):
        return on.to(field.dtype) * 2.0 - 1.0
    return on.to(field.dtype)


def binary_mode_(prior: Prior, field: Tensor) -> Tensor:
    """``binary_mode`` written over ``field`` (returned): the same values, no new tensor.

    Four in-place passes (add U, threshold to 1.0 / 0.0, and for spins 2 x - 1) in place of the
    five new tensors of ``binary_mode``; the inner loop of local search (``search.block_update``).
    """
    field.add_(prior.U).ge_(0)
    return field.mul_(2.0).sub_(1.0) if isinstance(prior, Spin) else field


def uniform_layer(prior: Prior, n: int, generator, dtype, device) -> Tensor:
    """(n, N) units drawn uniformly from {0, 1} or {-1, +1} (the proposal Unf of Algs. 3-4)."""
    bits = torch.rand(n, prior.size, generator=generator, dtype=dtype, device=device) < 0.5
    bits = bits.to(dtype)
    return bits * 2.0 - 1.0 if isinstance(prior, Spin) else bits


def take(xs: list, rows: Tensor) -> list:
    """The rows ``rows`` of every present layer of a state."""
    return [None if x is None else x.index_select(0, rows) for x in xs]


def states_equal(xs: list, ys: list, layers) -> Tensor:
    """Per chain: do the two states agree on every layer in ``layers``? (bool, (chains,))."""
    eq = None
    for l in layers:
        e = (xs[l] == ys[l]).all(-1)
        eq = e if eq is None else eq & e
    return eq


@dataclasses.dataclass(frozen=True, eq=False)
class Target:
    """The distribution a coupling samples: P(free | clamped), optionally with layers summed out.

    ``free``: layers that move; ``summed``: layers marginalised analytically (never in the state;
    no two summed layers may be neighbours); every other layer is clamped (taken from the state).
    """

    machine: BoltzmannMachine
    free: tuple[int, ...]
    summed: tuple[int, ...] = ()

    def __post_init__(self):
        L = self.machine.n_layers
        for l in (*self.free, *self.summed):
            if not 0 <= l < L:
                raise ValueError(f"layer {l} is not a layer of a {L}-layer machine")
        if set(self.free) & set(self.summed):
            raise ValueError("a layer cannot be both free and summed out")
        for l in self.summed:
            if l + 1 in self.summed:
                raise ValueError(f"summed layers {l} and {l + 1} are neighbours")
        for l in self.free:
            _check_binary(self.machine.priors[l], l)

    # -- constructors for the cases of the paper ------------------------------------------------
    @classmethod
    def joint(cls, machine: BoltzmannMachine) -> Target:
        """P(v, h) (eq. 8): every layer free."""
        return cls(machine, tuple(range(machine.n_layers)))

    @classmethod
    def posterior(cls, machine: BoltzmannMachine) -> Target:
        """P(h | v) (eq. 7): the visible layer clamped, every hidden layer free."""
        return cls(machine, tuple(range(1, machine.n_layers)))

    @classmethod
    def marginal(cls, machine: BoltzmannMachine, parity: int, clamp_visible: bool) -> Target:
        """The layers of one parity with the other parity summed out (eqs. 20-21, 24-25).

        parity 0: P(v, h2, ...) with the odd layers summed (E_even, eq. 22); parity 1: P(h1, ...)
        with the even layers summed (E_odd, eq. 23). With ``clamp_visible`` the visible layer is
        given instead (the posterior forms of eqs. 24-26) and is neither free nor summed.
        """
        layers = range(machine.n_layers)
        free = tuple(l for l in layers if l % 2 == parity and not (clamp_visible and l == 0))
        summed = tuple(l for l in layers if l % 2 != parity and not (clamp_visible and l == 0))
        return cls(machine, free, summed)

    @property
    def clamped(self) -> tuple[int, ...]:
        return tuple(
            l for l in range(self.machine.n_layers) if l not in self.free and l not in self.summed
        )

    # -- energy and statistics ------------------------------------------------------------------
    def _fields(self, xs: list) -> dict[int, Tensor]:
        return {l: self.machine.input_to(l, xs) for l in self.summed}

    def energy(self, xs: list) -> Tensor:
        """-ln of the unnormalised probability of the present layers, per chain (chains,).

        With nothing summed it is the machine's energy (eq. 2 with the bias terms of the priors).
        Summing out layer s multiplies by sum_{x_s} P_s(x_s) exp(x_s B_s) = Z_s(B_s, 0), so
        E = -sum_{present} ln P_l(x_l) - sum_{present pairs} x_l W_l x_{l+1} - sum_s ln Z_s(B_s, 0):
        for spins with zero biases, -sum ln cosh(B_s) up to a constant, eqs. (22), (23), (26).
        """
        m = self.machine
        e = 0.0
        for l, W in enumerate(m.weights):
            if xs[l] is not None and xs[l + 1] is not None:
                e = e - ((xs[l] @ W) * xs[l + 1]).sum(-1)
        for l, prior in enumerate(m.priors):
            if xs[l] is not None:
                e = e - prior.log_prob(xs[l]).sum(-1)
        for l, B in self._fields(xs).items():
            e = e - m.priors[l].log_partition(B, torch.zeros_like(B)).sum(-1)
        return e

    def statistics(self, xs: list, weight: Tensor | None = None, per_chain: bool = False) -> dict:
        """f = -grad_theta E of ``energy`` (eqs. 18-19, 27), summed over chains with ``weight``.

        A summed layer s enters through its conditional mean E[x_s | neighbours] in the coupling
        terms and through d ln Z_s(B_s, 0)/d theta_s for its prior (Rao-Blackwellisation). With
        ``per_chain`` every tensor keeps a leading chain dimension instead of the weighted sum.
        """
        m = self.machine
        n = next(x.shape[0] for x in xs if x is not None)
        w = torch.ones(n, dtype=m.dtype, device=m.device) if weight is None else weight
        fields = self._fields(xs)
        zero = {l: torch.zeros_like(B) for l, B in fields.items()}
        units = list(xs)
        for l, B in fields.items():
            units[l] = m.priors[l].mean(B)
        weights = []
        for l in range(len(m.weights)):
            a, b = units[l], units[l + 1]
            if per_chain:
                weights.append(torch.einsum("b,bi,bj->bij", w, a, b))
            else:
                weights.append((a * w[:, None]).T @ b)
        priors = []
        for l, prior in enumerate(m.priors):
            if l in fields:
                grads = prior.grad_log_partition(fields[l], zero[l])
            else:
                grads = prior.grad_log_prob(xs[l])
            if per_chain:
                priors.append({k: g * w[:, None] for k, g in grads.items()})
            else:
                priors.append({k: w @ g for k, g in grads.items()})
        return {"weights": weights, "priors": priors}

    # -- moves ------------------------------------------------------------------------------------
    def uniform(self, xs: list, generator) -> list:
        """A copy of ``xs``, every free layer drawn uniformly (Algs. 3-4 proposal, Alg. 1 start)."""
        out = list(xs)
        n = next(x.shape[0] for x in xs if x is not None)
        m = self.machine
        for l in self.free:
            out[l] = uniform_layer(m.priors[l], n, generator, m.dtype, m.device)
        return out

    def blank(self, n: int, clamped: dict[int, Tensor] | None = None) -> list:
        """``n`` chains: clamped layers from ``clamped``, free layers zero, summed layers None."""
        clamped = clamped or {}
        m = self.machine
        xs = []
        for l in range(m.n_layers):
            if l in self.summed:
                xs.append(None)
            elif l in self.free:
                xs.append(torch.zeros(n, m.sizes[l], dtype=m.dtype, device=m.device))
            else:
                if l not in clamped:
                    raise ValueError(f"layer {l} is clamped: give its values")
                x = torch.as_tensor(clamped[l], dtype=m.dtype, device=m.device)
                if tuple(x.shape) != (n, m.sizes[l]):
                    raise ValueError(
                        f"clamped layer {l} has shape {tuple(x.shape)}, expected {(n, m.sizes[l])}"
                    )
                xs.append(x)
        return xs

    def equal(self, xs: list, ys: list) -> Tensor:
        """Per chain: equal on every free layer (the meeting test of Algs. 3-4)."""
        if not self.free:
            n = next(x.shape[0] for x in xs if x is not None)
            return torch.ones(n, dtype=torch.bool, device=self.machine.device)
        return states_equal(xs, ys, self.free)
