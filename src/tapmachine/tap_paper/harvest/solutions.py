"""The TAP solutions of one machine from many starts: solved, polished, merged, summarised."""

from __future__ import annotations

import math
import sys
import time

import numpy as np
import torch

from tapmachine.core import tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.io.partial import KeptChunks
from tapmachine.io.runlog import kept_chunk_message
from tapmachine.tap_paper.harvest.settings import HarvestError, HarvestSettings

__all__ = [
    "NEAR_COPY_DISTANCE",
    "harvest",
    "merge",
    "nearest_separation",
    "polish",
    "separation_stats",
    "summarise",
]


def polish(machine: BoltzmannMachine, state: tap.TAPState, settings: HarvestSettings):
    """The converged rows of ``state`` iterated on to ``settings.polish_tol`` (see
    ``HarvestSettings``); returns (state, polished mask, polishing iterations per row)."""
    K = state.n_rows
    polished = state.converged.clone()
    extra = torch.zeros(K, dtype=torch.long, device=state.converged.device)
    if settings.polish_tol is None or settings.polish_tol >= settings.tol:
        return state, polished, extra
    rows = torch.nonzero(state.converged, as_tuple=True)[0]
    for start in range(0, rows.numel(), settings.chunk_size):
        idx = rows[start : start + settings.chunk_size]
        sub = state.select(idx)
        again = tap.solve_from(
            machine,
            sub,
            damping=settings.damping,
            tol=settings.polish_tol,
            max_iter=settings.max_iter,
            solver=settings.polish_solver,
        )
        done = idx[again.converged]
        for part in ("a", "c", "A", "B"):
            for merged, new in zip(getattr(state, part), getattr(again, part), strict=True):
                merged[done] = new[again.converged]
        polished[idx] = again.converged
        extra[idx] = again.iterations
    return state, polished, extra


def _chunk_arrays(state: tap.TAPState, polished, polish_iterations, seconds, cpu_seconds) -> dict:
    """A solved and polished chunk as arrays to keep (``io.partial.KeptChunks``), with the wall
    and CPU seconds it took."""
    arrays = {
        f"{part}_{layer}": t.detach().cpu().numpy()
        for part in ("a", "c", "A", "B")
        for layer, t in enumerate(getattr(state, part))
    }
    arrays.update(
        iterations=state.iterations.cpu().numpy(),
        converged=state.converged.cpu().numpy(),
        polished=polished.cpu().numpy(),
        polish_iterations=polish_iterations.cpu().numpy(),
        seconds=np.float64(seconds),
        cpu_seconds=np.float64(cpu_seconds),
    )
    return arrays


def _chunk_from_arrays(arrays: dict, machine: BoltzmannMachine):
    """(state, polished, polish iterations) of a kept chunk (``_chunk_arrays``), on the machine's
    device."""

    def tensor(name):
        return torch.as_tensor(arrays[name], device=machine.device)

    layers = range(machine.n_layers)
    state = tap.TAPState(
        *([tensor(f"{part}_{layer}") for layer in layers] for part in ("a", "c", "A", "B")),
        iterations=tensor("iterations"),
        converged=tensor("converged"),
    )
    return state, tensor("polished"), tensor("polish_iterations")


def merge(state: tap.TAPState, free_energy: torch.Tensor, settings: HarvestSettings):
    """(representatives, inverse, counts) of the converged rows by ``settings.merge_rule``."""
    if settings.merge_rule == "free_energy":
        return tap.unique_free_energy(free_energy, state.converged, settings.dedup_tol)
    return tap.unique(state, settings.dedup_tol)


#: Max-abs distance (magnetisations) below which a unique solution counts as a near copy of
#: another: ten times the default ``dedup_tol``. Distinct TAP fixed points differ by O(1) in some
#: unit (on the paper run's bmnist_h100 at epoch 40, harvested at tol 1e-12: 95% of unique
#: solutions lie 0.57 or more from their nearest other); copies of one fixed point that the
#: stopping tolerance left short of it, and deduplication kept apart, lie just above
#: ``dedup_tol`` (the same model at the paper's tol 1e-8: median 0.021, 2,287 "unique"
#: solutions against 623 at 1e-12).
NEAR_COPY_DISTANCE = 0.1


def nearest_separation(X: torch.Tensor, chunk: int = 500) -> torch.Tensor:
    """Max-abs distance from each row of ``X`` to its nearest other row (inf for a lone row),
    in blocks of ``chunk`` rows (memory chunk x len(X))."""
    G = X.shape[0]
    out = torch.full((G,), math.inf, dtype=X.dtype, device=X.device)
    for start in range(0, G, chunk):
        D = torch.cdist(X[start : start + chunk], X, p=float("inf"))
        rows = torch.arange(D.shape[0], device=X.device)
        D[rows, rows + start] = math.inf
        out[start : start + chunk] = D.min(dim=1).values
    return out


def separation_stats(arrays: dict) -> dict:
    """``min_separation``, ``median_nearest_separation`` and ``near_copy_fraction`` (share of
    unique solutions within ``NEAR_COPY_DISTANCE`` of another) of a harvest's unique solutions;
    NaN with fewer than two, or for files written before ``nearest_separation`` was stored. A
    minimum barely above ``dedup_tol`` and a large near-copy share say that the count of unique
    solutions includes copies of one fixed point split by the stopping tolerance."""
    near = np.asarray(arrays.get("nearest_separation", []), dtype=np.float64)
    if near.size < 2:
        return {
            "min_separation": math.nan,
            "median_nearest_separation": math.nan,
            "near_copy_fraction": math.nan,
        }
    return {
        "min_separation": float(near.min()),
        "median_nearest_separation": float(np.median(near)),
        "near_copy_fraction": float((near < NEAR_COPY_DISTANCE).mean()),
    }


def harvest(
    machine: BoltzmannMachine,
    x_init: torch.Tensor,
    settings: HarvestSettings,
    progress: bool = False,
    kept: KeptChunks | None = None,
) -> dict[str, np.ndarray]:
    """TAP solutions from every row of ``x_init`` (eqs. 37-38), deduplicated; arrays by key.

    Runs in the machine's dtype and device, ``settings.chunk_size`` starts at a time: each chunk
    solved (both passes) and polished. With ``kept`` (``io.partial.KeptChunks``, under a
    signature of the machine, starts and settings) each finished chunk is kept, and a chunk kept
    by an earlier start is used again (said on stderr with the seconds it took then,
    ``runlog.kept_chunk_message``), so that a stopped harvest resumes at its first unfinished
    chunk. Returns the array keys of the module docstring that do not depend on provenance
    (a_visible ... unique_free_energy, layer_sizes and the settings) plus
    ``nearest_separation`` (``nearest_separation`` of the unique solutions' magnetisations, all
    layers).
    """
    from tqdm import tqdm

    x_init = torch.as_tensor(x_init, dtype=machine.dtype, device=machine.device)
    K = x_init.shape[0]
    if K == 0:
        raise HarvestError("harvest needs at least one initialisation")
    chunks = []
    starts = range(0, K, settings.chunk_size)
    for index, start in enumerate(tqdm(starts, desc="TAP", file=sys.stderr, disable=not progress)):
        block = None if kept is None else kept.get(index)
        if block is not None:
            chunks.append(_chunk_from_arrays(block, machine))
            print(
                kept_chunk_message(
                    index + 1, len(starts), float(block["seconds"]), float(block["cpu_seconds"])
                ),
                file=sys.stderr,
                flush=True,
            )
            continue
        clocks = (time.perf_counter(), time.process_time()) if kept is not None else None
        rows = x_init[start : start + settings.chunk_size]
        state = tap.solve_with_retry(machine, rows, settings.solver_settings)
        chunk = polish(machine, state, settings)
        chunks.append(chunk)
        if kept is not None:
            times = (time.perf_counter() - clocks[0], time.process_time() - clocks[1])
            kept.keep(index, _chunk_arrays(*chunk, *times))
    state = tap.TAPState.concat([c[0] for c in chunks])
    polished = torch.cat([c[1] for c in chunks])
    polish_iterations = torch.cat([c[2] for c in chunks])
    with torch.no_grad():
        F = tap.free_energy(machine, state)
        terms = tap.free_energy_terms(machine, state)
    reps, inverse, counts = merge(state, F, settings)
    converged = state.converged.cpu().numpy()

    def arr(t, dtype=np.float64):
        out = t.detach().cpu().numpy().astype(dtype)
        out[~converged] = np.nan
        return out

    hidden_a = torch.cat(state.a[1:], dim=1)
    hidden_c = torch.cat(state.c[1:], dim=1)
    F_np = arr(F)
    reps_np = reps.cpu().numpy().astype(np.int64)
    return {
        # Per-row moments in float32: far finer than the convergence accuracy (about 1e-4),
        # and half the disk of float64.
        "a_visible": arr(state.a[0], np.float32),
        "c_visible": arr(state.c[0], np.float32),
        "a_hidden": arr(hidden_a, np.float32),
        "c_hidden": arr(hidden_c, np.float32),
        "free_energy": F_np,
        "converged": converged.astype(bool),
        "iterations": state.iterations.cpu().numpy().astype(np.int64),
        "polished": polished.cpu().numpy().astype(bool),
        "polish_iterations": polish_iterations.cpu().numpy().astype(np.int64),
        "inverse": inverse.cpu().numpy().astype(np.int64),
        "representatives": reps_np,
        "multiplicity": counts.cpu().numpy().astype(np.int64),
        "unique_free_energy": F_np[reps_np],
        **{f"unique_{name}": arr(terms[name])[reps_np] for name in tap.FREE_ENERGY_TERMS},
        "layer_sizes": np.asarray(machine.sizes, dtype=np.int64),
        "energy_normaliser": np.float64(tap.energy_normaliser(machine)),
        "dedup_tol": np.float64(settings.dedup_tol),
        "merge_rule": np.asarray(settings.merge_rule),
        "solver": np.asarray(settings.solver),
        "polish_solver": np.asarray(settings.polish_solver),
        "polish_tol": np.float64(math.nan if settings.polish_tol is None else settings.polish_tol),
        "tol": np.float64(settings.tol),
        "max_iter": np.int64(settings.max_iter),
        "damping": np.float64(settings.damping),
        "retry_damping": np.float64(
            math.nan if settings.retry_damping is None else settings.retry_damping
        ),
        "nearest_separation": nearest_separation(state.magnetisations()[reps].double())
        .cpu()
        .numpy(),
    }


def summarise(arrays: dict) -> dict:
    """Per-epoch numbers of a harvest: counts, Helmholtz estimate, spread, iterations."""
    K = int(arrays["converged"].shape[0])
    n_conv = int(arrays["converged"].sum())
    Fu = np.asarray(arrays["unique_free_energy"], dtype=np.float64)
    G = int(Fu.shape[0])
    iters = np.asarray(arrays["iterations"])
    conv_iters = iters[arrays["converged"]]
    return {
        "n_init": K,
        "n_converged": n_conv,
        "n_not_converged": K - n_conv,
        "n_unique": G,
        "unique_fraction": G / K,
        # Helmholtz free energy estimate: uniform average over the unique solutions (Fig. 5).
        "helmholtz": float(Fu.mean()) if G else math.nan,
        "free_energy_std": float(Fu.std()) if G else math.nan,
        "free_energy_min": float(Fu.min()) if G else math.nan,
        "free_energy_max": float(Fu.max()) if G else math.nan,
        "mean_iterations": float(iters.mean()),
        "mean_iterations_converged": float(conv_iters.mean()) if n_conv else math.nan,
        "max_iterations": int(iters.max()),
        "largest_multiplicity": int(arrays["multiplicity"].max()) if G else 0,
        # rows converged at tol that polishing did not bring to polish_tol (kept as they were)
        "n_unpolished": int((arrays["converged"] & ~arrays["polished"]).sum())
        if "polished" in arrays
        else 0,
        **separation_stats(arrays),
    }
