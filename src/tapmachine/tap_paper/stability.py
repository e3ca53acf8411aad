"""Which of a checkpoint's data-started TAP solutions Alg. 1 can converge to.

The harvest and the evaluation solve from data starts by Alg. 1 at damping 0.5 and continue the
rows it leaves unconverged at ``retry_damping`` (0.95; README, departures). Damping moves no
fixed point, only its stability (``tap.stability``), so a fixed point the second pass reaches
may be one that Alg. 1 converges to from no start. Per unique fixed point of a checkpoint this
records the spectral radius of Alg. 1's sweep Jacobian at both dampings, whether a start reached
it in the first pass, and the validity of the expansion there (``tap.onsager_spectral_radius``).
"""

from __future__ import annotations

import os
import sys

import torch

from tapmachine.core import tap
from tapmachine.io.files import write_csv
from tapmachine.io.modelfile import Checkpoint, checkpoint_path

__all__ = ["fixed_point_stability", "stability_curve"]


def fixed_point_stability(
    machine,
    x: torch.Tensor,
    damping: float = tap.SolverSettings.damping,
    retry_damping: float = 0.95,
    tol: float = 1e-8,
    max_iter: int = 1000,
    merge_tol: float = 0.01,
    polish_tol: float = 1e-22,
    polish_max_iter: int = 20000,
    krylov_dim: int | None = None,
) -> list[dict]:
    """One record per unique fixed point (``tap.unique`` at ``merge_tol``) of the starts ``x``.

    The starts are solved as the evaluation solves them (``tap.solve_with_retry``). Each unique
    point is represented by a member that converged in the first pass where there is one, and
    continued by the damping that reached it to ``polish_tol``, so that the Jacobian is taken at
    the fixed point itself rather than where the tolerance stopped the row (rows stopped at
    1e-8 lie up to about 0.01 from it); ``residual`` is the largest |f_a - a| there, and the
    stability numbers mean something only where it is small (``polished``: below 1e-6).
    With ``krylov_dim`` the radii are Arnoldi estimates from that many Jacobian-vector products
    (``tap.sweep_radius_krylov``, for large machines) instead of the dense Jacobian's.
    """
    x = torch.as_tensor(x, dtype=machine.dtype, device=machine.device)
    solver = tap.SolverSettings(
        damping=damping, tol=tol, max_iter=max_iter, retry_damping=retry_damping
    )
    state = tap.solve_with_retry(machine, x, solver)
    first = state.converged & (state.iterations <= max_iter)
    points, assignment, _ = tap.unique(state, merge_tol)
    members = assignment[None, :] == torch.arange(points.numel())[:, None]  # (U, K)
    first_members = members & first[None, :]
    pick = torch.where(
        first_members.any(1), first_members.double().argmax(1), points
    )  # a first-pass member if any
    reached_first = first_members.any(1)
    polished = state.select(pick)
    for flag, d in ((reached_first, damping), (~reached_first, retry_damping)):
        rows = torch.nonzero(flag, as_tuple=True)[0]
        if rows.numel() == 0:
            continue
        more = tap.solve_from(
            machine, polished.select(rows), damping=d, tol=polish_tol, max_iter=polish_max_iter
        )
        for part in ("a", "c", "A", "B"):
            for full, new in zip(getattr(polished, part), getattr(more, part), strict=True):
                full[rows] = new
    swept = tap.solve_from(machine, polished, damping=0.0, tol=0.0, max_iter=1)
    residual = torch.cat(
        [(new - old).abs() for new, old in zip(swept.a, polished.a, strict=True)], 1
    ).amax(1)
    if krylov_dim is None:
        radius, leading = tap.sweep_stability(machine, polished, damping)
        radius_retry, _ = tap.sweep_stability(machine, polished, retry_damping)
    else:
        g = torch.Generator(device=machine.device).manual_seed(0)
        radius, leading = tap.sweep_radius_krylov(machine, polished, damping, krylov_dim, g)
        radius_retry, _ = tap.sweep_radius_krylov(machine, polished, retry_damping, krylov_dim, g)
    validity = tap.onsager_spectral_radius(machine, polished)
    row_sum = tap.onsager_strength(machine, polished)
    return [
        {
            "solution": u,
            "starts": int(members[u].sum()),
            "starts_first_pass": int(first_members[u].sum()),
            "first_pass": bool(reached_first[u]),
            "residual": float(residual[u]),
            "polished": bool(residual[u] < 1e-6),
            "radius": float(radius[u]),
            "leading_real": float(leading[u].real),
            "leading_imag": float(leading[u].imag),
            "radius_retry": float(radius_retry[u]),
            "validity_rho": float(validity[u]),
            "validity_row_sum": float(row_sum[u]),
        }
        for u in range(points.numel())
    ]


def stability_curve(
    model_dir: str | os.PathLike,
    data_path: str | os.PathLike,
    epochs: list[int],
    out_csv: str | os.PathLike,
    rows: int = 300,
    **kw,
) -> list[dict]:
    """``fixed_point_stability`` of the first ``rows`` training images at each checkpoint epoch
    of ``model_dir`` (float64; damping, second pass, tolerance, iteration cap and merge
    tolerance those of the checkpoint's evaluation unless given in ``kw``), one CSV row per
    unique fixed point, and a line per epoch on stderr."""
    from tapmachine.io.data import load_dataset

    ds = load_dataset(data_path)
    x = torch.as_tensor(ds.x_train[:rows], dtype=torch.float64)
    out = []
    for epoch in epochs:
        ckpt = Checkpoint.load(checkpoint_path(model_dir, epoch))
        machine = ckpt.machine(dtype=torch.float64)
        own = ckpt.settings
        settings = {
            "damping": own["damping"],
            "retry_damping": own["retry_damping"] or 0.95,
            "tol": own["tol"],
            "max_iter": own["max_iter"],
            "merge_tol": own["dedup_tol"],
        } | kw
        records = [{"epoch": epoch, **r} for r in fixed_point_stability(machine, x, **settings)]
        out += records
        ok = [r for r in records if r["polished"]]
        first = [r for r in ok if r["first_pass"]]
        retry = [r for r in ok if not r["first_pass"]]
        print(
            f"epoch {epoch}: {len(records)} fixed points ({len(records) - len(ok)} not polished); "
            f"reached by Alg. 1: {len(first)}, {sum(r['radius'] < 1 for r in first)} stable; "
            f"second pass only: {len(retry)}, {sum(r['radius'] >= 1 for r in retry)} unstable "
            f"under Alg. 1 ({sum(r['radius'] >= 1 and r['leading_real'] < -1 for r in retry)} "
            "by an eigenvalue below -1)",
            file=sys.stderr,
            flush=True,
        )
    write_csv(out, out_csv)
    return out
