"""The state of TAP inference: K solutions (or iterates) of a layered machine, batched."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["TAPState"]


@dataclasses.dataclass
class TAPState:
    """K TAP solutions (or iterates) of a layered machine.

    Attributes
    ----------
    a, c : list of Tensor, one (K, N_l) tensor per layer
        Means and variances of the units (layer 0 is visible).
    A, B : list of Tensor, one (K, N_l) tensor per layer
        Quadratic and linear fields of the last update of each layer (eqs. 33-34). For a clamped
        visible layer they are zeros and play no role.
    iterations : Tensor of shape (K,), int64
        Number of iterations each row performed (the iteration at which it converged, or
        ``max_iter``).
    converged : Tensor of shape (K,), bool
        Whether the row met the convergence criterion of ``solve``.
    clamped : bool
        True if the visible layer was held fixed at data (a_0 = x, c_0 = 0, App. E); the
        visible layer then contributes no term to the free energy.
    """

    a: list[Tensor]
    c: list[Tensor]
    A: list[Tensor]
    B: list[Tensor]
    iterations: Tensor
    converged: Tensor
    clamped: bool = False

    @property
    def n_rows(self) -> int:
        return self.a[0].shape[0]

    def magnetisations(self) -> Tensor:
        """All layers' means side by side, shape (K, sum_l N_l)."""
        return torch.cat(self.a, dim=1)

    def select(self, index) -> TAPState:
        """The rows ``index`` (a boolean mask or integer indices) as a new state."""

        def take(ts):
            return [t[index] for t in ts]

        return TAPState(
            a=take(self.a),
            c=take(self.c),
            A=take(self.A),
            B=take(self.B),
            iterations=self.iterations[index],
            converged=self.converged[index],
            clamped=self.clamped,
        )

    @classmethod
    def concat(cls, states: Sequence[TAPState]) -> TAPState:
        """The rows of ``states`` (solved separately, e.g. in blocks) stacked in order."""

        def cat(attr):
            return [torch.cat(ts) for ts in zip(*(getattr(s, attr) for s in states), strict=True)]

        if len({s.clamped for s in states}) != 1:
            raise ValueError("cannot concatenate clamped and free TAP states")
        return cls(
            a=cat("a"),
            c=cat("c"),
            A=cat("A"),
            B=cat("B"),
            iterations=torch.cat([s.iterations for s in states]),
            converged=torch.cat([s.converged for s in states]),
            clamped=states[0].clamped,
        )

    def detach(self) -> TAPState:
        """A copy whose tensors carry no autograd history."""

        def det(ts):
            return [t.detach() for t in ts]

        return dataclasses.replace(self, a=det(self.a), c=det(self.c), A=det(self.A), B=det(self.B))
