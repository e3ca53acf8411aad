"""Samples (Fig. 2) and completion (Fig. 3) of a trained DBM by local search (Sec. 4.4, 5.2).

Sampling: "we first use the local search algorithm to find a local minimum of the energy
function [...] In practice, we can skip running the MH algorithm and just use the local minimum as
a sample" (Sec. 4.4): local search (Alg. 1) from uniform random states; the visible layer of the
local mode is the sample.

Completion: the observed pixels are clamped, the missing pixels and every hidden layer move, and
the same block-wise local search runs on the clamped model (Sec. 5.2): the visible block update
sets only the missing pixels to their conditional minimum (eqs. 15-17). Each chain draws its
block order (even or odd first) once, as in Alg. 1, and stops after the first step that changes
nothing; the result is a block-wise minimum of the energy over (missing pixels, hidden layers).
As in local search (``ucd.search``), the chains run in two groups by block order and only the
chains still moving are computed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tapmachine.core.machine import BoltzmannMachine
from tapmachine.ucd.search import local_search
from tapmachine.ucd.target import Target, binary_mode_, states_equal, take, uniform_layer

__all__ = ["sample", "reconstruct", "complete", "lower_half_mask"]


@torch.no_grad()
def sample(
    machine: BoltzmannMachine, n: int, generator: torch.Generator, search_cap: int = 10_000
) -> tuple[Tensor, Tensor]:
    """``n`` samples: visible layers of local modes found from uniform states; and their T."""
    target = Target.joint(machine)
    found = local_search(target, target.uniform(target.blank(n), generator), generator, search_cap)
    return found.state[0], found.steps


@torch.no_grad()
def reconstruct(machine: BoltzmannMachine, v: Tensor, generator: torch.Generator) -> Tensor:
    """Reconstructions of the visible rows ``v`` (in the machine's values): the hidden layers of
    each row go to a local mode of P(h | v) (eq. 7) by local search from uniform states (Alg. 5),
    and the visible means given that mode, f_v(W_0 h_1), are returned."""
    target = Target.posterior(machine)
    found = local_search(
        target, target.uniform(target.blank(v.shape[0], {0: v}), generator), generator
    )
    return machine.priors[0].mean(machine.input_to(0, found.state))


def lower_half_mask(height: int, width: int, device=None) -> Tensor:
    """(H * W,) bool: True on the lower half of the image rows (the pixels to fill in, Fig. 3)."""
    rows = torch.arange(height, device=device)[:, None].expand(height, width)
    return (rows >= height // 2).reshape(-1)


def _block(machine: BoltzmannMachine, xs: list, parity: int, v_obs: Tensor, mask: Tensor) -> list:
    """The layers of ``parity`` replaced by their conditional minimum (eqs. 15-17), the observed
    pixels (``mask`` False) kept at ``v_obs``.

    Each new layer is its field's tensor (``input_to``), thresholded in place (``binary_mode_``)
    and, for the visible layer, the observed pixels written back into it: the values of
    ``binary_mode`` and ``torch.where`` without their new tensors, as ``search.block_update``.
    """
    out = list(xs)
    for l in range(parity, machine.n_layers, 2):
        new = binary_mode_(machine.priors[l], machine.input_to(l, xs))
        out[l] = torch.where(mask, new, v_obs, out=new) if l == 0 else new
    return out


def _complete_group(m: BoltzmannMachine, xs: list, v_obs, mask, first: int, max_steps: int):
    """Completion steps for chains that all update parity ``first`` first; only moving rows."""
    n = v_obs.shape[0]
    steps = torch.zeros(n, dtype=torch.long, device=m.device)
    active = torch.arange(n, device=m.device)
    layers = range(m.n_layers)
    out = list(xs)
    sub = list(xs)
    for _ in range(max_steps):
        if active.numel() == 0:
            break
        new = _block(m, _block(m, sub, first, v_obs, mask), 1 - first, v_obs, mask)
        steps[active] += 1
        moved = ~states_equal(new, sub, layers)
        for l in layers:
            out[l].index_copy_(0, active, new[l])
        keep = moved.nonzero().squeeze(-1)
        active = active.index_select(0, keep)
        sub = take(new, keep)
        v_obs, mask = v_obs.index_select(0, keep), mask.index_select(0, keep)
    return out, steps


@torch.no_grad()
def complete(
    machine: BoltzmannMachine,
    v_obs: Tensor,
    mask: Tensor,
    generator: torch.Generator,
    max_steps: int = 10_000,
) -> tuple[list, Tensor]:
    """Fill the ``mask``ed pixels of the rows ``v_obs`` by local search on the clamped model.

    ``v_obs``: (rows, Nv) in the machine's visible units; ``mask``: (Nv,) or (rows, Nv) bool,
    True where the pixel is missing (its value in ``v_obs`` is ignored). Missing pixels and hidden
    layers start uniform. Returns the final state (a list of layers; layer 0 is the completed
    image) and the step count per row.
    """
    m = machine
    v_obs = torch.as_tensor(v_obs, dtype=m.dtype, device=m.device)
    n = v_obs.shape[0]
    mask = torch.as_tensor(mask, dtype=torch.bool, device=m.device).expand(n, m.sizes[0])
    noise = uniform_layer(m.priors[0], n, generator, m.dtype, m.device)
    xs = [torch.where(mask, noise, v_obs)]
    xs += [uniform_layer(p, n, generator, m.dtype, m.device) for p in m.priors[1:]]
    even_first = torch.rand(n, generator=generator, device=m.device) < 0.5
    steps = torch.zeros(n, dtype=torch.long, device=m.device)
    for first, group in ((0, even_first), (1, ~even_first)):  # two groups, not a loop over chains
        rows = group.nonzero().squeeze(-1)
        if rows.numel() == 0:
            continue
        out, s = _complete_group(m, take(xs, rows), v_obs[rows], mask[rows], first, max_steps)
        for l in range(m.n_layers):
            xs[l].index_copy_(0, rows, out[l])
        steps[rows] = s
    return xs, steps
