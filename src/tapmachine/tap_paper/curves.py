"""Per-epoch curves of trained machines and the inference timing of Figs. 10-11 (first paper).

- ``pseudo_likelihood_curve``: Besag's pseudo-likelihood of training images at every checkpoint
  (Fig. 10 left), stochastic over ``n_sites`` sites drawn anew for every image, as in App. F;
  every epoch, and every model of one seed, scores the same sites.
- ``tap_likelihood_curve``: the normalised TAP log-likelihood (eq. 39; eq. 121 with clamped TAP
  solutions for deep machines, divided by the number of units) of training and test images at
  every checkpoint (Fig. 11). ln Z is estimated once per epoch from the unique converged TAP
  solutions of ``tap_inits`` training images (with the evaluation's second pass) and shared by
  both curves, so that their gap is a gap in the data terms only.
- ``inference_timing``: the time of one TAP (Alg. 1) and one adaTAP (Alg. 3) iteration against
  the batch size K, measured in one run (Fig. 10 right).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import torch
from torch import Tensor

from tapmachine.core import adatap, estimators, tap
from tapmachine.core.machine import RBM, BoltzmannMachine
from tapmachine.core.priors import Bernoulli
from tapmachine.io.modelfile import Checkpoint, checkpoint_epochs

__all__ = [
    "Curve",
    "inference_timing",
    "pseudo_likelihood_curve",
    "SITES_SEED_LABEL",
    "tap_likelihood_curve",
]


@dataclasses.dataclass
class Curve:
    """A measure of a model at each of its checkpoints: ``rows``, one dict per epoch (epoch,
    mean, standard error, ...), and ``last``, the last epoch's per-row values behind its means
    (name -> Tensor of one value per row), for paired comparisons of models scored on the same
    rows."""

    rows: list[dict]
    last: dict[str, Tensor]


@torch.no_grad()
def pseudo_likelihood_curve(
    machines,
    x: Tensor,
    n_sites: int | None,
    generator: torch.Generator,
    rows_epoch: int | None = None,
) -> Curve:
    """Pseudo-likelihood (nats per image) of the rows of ``x`` for each (epoch, machine), with
    its standard error over the rows (independent site draws per row make them independent).

    Each row's ``n_sites`` sites are drawn once from ``generator`` (``estimators.site_subsets``;
    all sites for None) and scored at every epoch: common random numbers, as Fig. 12's scores
    share theirs between epochs. The curve's steps then carry none of the site draws' noise,
    and neither do the gaps between models whose curves are drawn from generators seeded
    alike (``SITES_SEED_LABEL``); the level of every point keeps its standard error. The
    ``Curve``'s ``last`` holds the last epoch's per-row values (``"pl"``), or those of
    ``rows_epoch`` (one of the machines' epochs)."""
    epochs = [epoch for epoch, _ in machines]
    if rows_epoch is not None and rows_epoch not in epochs:
        raise ValueError(f"rows_epoch {rows_epoch} is not among the epochs {epochs}")
    nv = x.shape[1]
    sites = (
        None
        if n_sites is None or n_sites >= nv
        else estimators.site_subsets(x.shape[0], nv, n_sites, generator)
    )
    curve = Curve([], {})
    for epoch, machine in machines:
        pl = estimators.pseudo_log_likelihood(machine, x.to(machine.dtype), sites=sites)
        mean, se = estimators.mean_and_stderr(pl)
        curve.rows.append({"epoch": epoch, "pl": mean, "pl_stderr": se})
        if rows_epoch is None or epoch == rows_epoch:
            curve.last["pl"] = pl
    return curve


#: The seeding label of the pseudo-likelihood curves' site draws, the same for every model
#: (``seeded_generator(seed, SITES_SEED_LABEL)``): Fig. 10's curves share their sites.
SITES_SEED_LABEL = "pseudo-likelihood-sites"


@torch.no_grad()
def tap_likelihood_curve(
    machines,
    x_train: Tensor,
    x_test: Tensor,
    tap_inits: int,
    solver: tap.SolverSettings,
    dedup_tol: float = 1e-2,
) -> Curve:
    """Normalised TAP log-likelihood of train and test rows for each (epoch, machine).

    ln Z comes from the unique solutions ``solver`` reaches from the first ``tap_inits``
    training rows, with the per-epoch evaluation's second pass (``tap.solve_with_retry``); an
    epoch at which none converges gets NaN, as in training. The clamped solutions of a deep
    machine's data term take ``solver``'s damping, tolerance and cap. The ``Curve``'s ``last``
    holds the last epoch's per-row values (``"tap_ll_train"``, ``"tap_ll_test"``).
    """
    curve = Curve([], {})
    kw = {"damping": solver.damping, "tol": solver.tol, "max_iter": solver.max_iter}
    for epoch, machine in machines:
        xt, xs = x_train.to(machine.dtype), x_test.to(machine.dtype)
        states = tap.solve_with_retry(machine, xt[:tap_inits], solver)
        reps, _, _ = tap.unique(states, dedup_tol)
        kept = states.select(reps)
        row = {"epoch": epoch, "n_unique": int(reps.numel())}
        for part, x in (("train", xt), ("test", xs)):
            if reps.numel() == 0:
                row[f"tap_ll_{part}"] = row[f"tap_ll_{part}_stderr"] = math.nan
                curve.last[f"tap_ll_{part}"] = torch.full((x.shape[0],), math.nan)
                continue
            ll = tap.log_likelihood(machine, x, kept, per_unit=True, **kw)
            row[f"tap_ll_{part}"], row[f"tap_ll_{part}_stderr"] = estimators.mean_and_stderr(ll)
            curve.last[f"tap_ll_{part}"] = ll
        curve.rows.append(row)
    return curve


def _time(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@torch.no_grad()
def inference_timing(
    n_visible: int,
    n_hidden: int,
    batch_sizes,
    generator: torch.Generator,
    repeats: int = 3,
    tap_iterations: int = 20,
    adatap_iterations: int = 2,
    damping: float = tap.SolverSettings.damping,
    dtype=torch.float32,
    weight_std: float = 0.01,
    adatap_method: str = "bipartite",
) -> list[dict]:
    """Seconds per iteration of TAP and adaTAP on one binary RBM, for each batch size.

    The RBM has N(0, weight_std^2) couplings and zero fields; the iteration count is fixed
    (tol = 0), so the values do not matter. Each point runs ``repeats`` times, the fastest is
    kept, and the time of a solve is divided by its number of iterations (setup included,
    which is small beside the iterations). Both solvers see the same machine and inputs.
    ``adatap_method``: "bipartite" (exact Schur complement, as training uses) or "joint" (the
    N x N inverse of Alg. 3 as written, which the paper timed).
    """
    W = weight_std * torch.randn(n_visible, n_hidden, generator=generator, dtype=torch.float64)
    machine = RBM(
        W.to(dtype),
        Bernoulli(torch.zeros(n_visible, dtype=dtype)),
        Bernoulli(torch.zeros(n_hidden, dtype=dtype)),
    )
    rows = []
    for K in batch_sizes:
        x = (torch.rand(K, n_visible, generator=generator) < 0.2).to(dtype)
        t_tap = _time(
            lambda x=x: tap.solve(machine, x, damping=damping, tol=0.0, max_iter=tap_iterations),
            repeats,
        )
        t_ada = _time(
            lambda x=x: adatap.solve(
                machine,
                x,
                damping=damping,
                tol=0.0,
                max_iter=adatap_iterations,
                method=adatap_method,
            ),
            repeats,
        )
        rows.append(
            {
                "batch_size": int(K),
                "tap_seconds": t_tap / tap_iterations,
                "adatap_seconds": t_ada / adatap_iterations,
                "ratio": (t_ada / adatap_iterations) / (t_tap / tap_iterations),
                "n_visible": n_visible,
                "n_hidden": n_hidden,
                "threads": torch.get_num_threads(),
                "adatap_method": adatap_method,
                "dtype": str(dtype).removeprefix("torch."),
            }
        )
    return rows


def load_checkpoint_machines(ckpt_dir, dtype=None) -> list[tuple[int, BoltzmannMachine]]:
    """(epoch, machine) of every checkpoint ``epoch_{e}.pt`` in ``ckpt_dir``, by epoch (read
    through ``modelfile.Checkpoint``)."""
    out = []
    for epoch in checkpoint_epochs(ckpt_dir):
        ckpt = Checkpoint.load(Path(ckpt_dir) / f"epoch_{epoch}.pt")
        out.append((epoch, ckpt.machine(dtype=dtype)))
    return out
