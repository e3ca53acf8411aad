"""Every likelihood estimate of one parameter set: TAP, AIS, pseudo-likelihood and exact."""

from __future__ import annotations

import math
import time

import torch
from torch import Tensor

from tapmachine.core import estimators, tap
from tapmachine.core.machine import BoltzmannMachine
from tapmachine.core.priors import Bernoulli, Spin
from tapmachine.tap_paper.likelihood.settings import SPLITS, ScoreSettings, ais_schedule
from tapmachine.tap_paper.likelihood.tap_partition import TAP_INFO_KEYS, tap_log_partition

__all__ = ["score_machine"]


def _enumerable(machine: BoltzmannMachine) -> bool:
    if machine.n_layers != 2:
        return False
    return any(
        isinstance(p, Bernoulli | Spin) and n <= estimators.MAX_ENUMERATED_UNITS
        for p, n in zip(machine.priors, machine.sizes, strict=True)
    )


@torch.no_grad()
def score_machine(
    machine: BoltzmannMachine,
    images: dict[str, Tensor],
    tap_init: Tensor,
    base_data: Tensor,
    settings: ScoreSettings,
    seed_labels: tuple = (0, "score"),
    tap_info: dict | None = None,
) -> dict:
    """Every likelihood estimate for one parameter set; a flat dict of numbers (nats per image).

    ``images``: split name -> rows to score; ``tap_init``: rows TAP starts from; ``base_data``:
    rows the AIS base-rate model is fitted to (the training data). Random streams (AIS runs, PL
    sites) come from ``seeded_generator(*seed_labels, stage)``: giving every epoch of a
    model the same labels makes their AIS and PL noise common (differences between epochs are
    then less noisy than the values).

    ``tap_info``: TAP's ln Z and solution counts already computed from ``tap_init`` at these
    settings (``recorded_tap_partition``: training's per-epoch evaluation); TAP is then not solved
    again. The TAP log-likelihood of an image needs only ln Z (eq. 39: data term - ln Z), so
    both ways give the same numbers; ``log_z_tap_source`` says which was used.
    """
    from tapmachine.core.seeding import seeded_generator

    if machine.n_layers != 2:
        raise ValueError("likelihood scoring needs an RBM (one hidden layer)")
    dtype, device = machine.dtype, machine.device
    n_units = sum(machine.sizes)
    out: dict = {}

    t0 = time.perf_counter()
    if tap_info is None:
        _, info = tap_log_partition(machine, tap_init.to(device, dtype), settings)
        info["log_z_tap_source"] = "solved"
    else:
        info = {k: tap_info[k] for k in TAP_INFO_KEYS}
        info["log_z_tap_source"] = str(tap_info.get("log_z_tap_source", "training"))
    out.update(info)
    out["tap_seconds"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    betas = ais_schedule(settings.schedule, settings.n_betas)
    ais = estimators.ais_log_partition(
        machine,
        data=base_data,
        n_runs=settings.ais_runs,
        betas=betas,
        generator=seeded_generator(*seed_labels, "ais"),
    )
    out.update(
        log_z_ais=ais.log_z,
        log_z_ais_stderr=ais.stderr,
        log_z_ais_lower=ais.lower,
        log_z_ais_upper=ais.upper,
        log_z_base=ais.log_z_base,
        ais_n_betas=ais.n_betas,
    )
    out["ais_seconds"] = time.perf_counter() - t0

    log_z_exact = None
    if _enumerable(machine):
        log_z_exact = float(estimators.exact_log_partition(machine))
    out["log_z_exact"] = log_z_exact if log_z_exact is not None else math.nan

    t0 = time.perf_counter()
    pl_gen = seeded_generator(*seed_labels, "pl")
    for split in SPLITS:
        x = images.get(split)
        if x is None or x.shape[0] == 0:
            continue
        x = x.to(device, dtype)
        neg_f = -machine.free_energy_visible(x).double()
        # eq. 39 with TAP's ln Z: what tap.log_likelihood gives with the unique solutions (which
        # adds their mean free energy), in float64 so a recorded ln Z reproduces it exactly.
        tap_ll = tap.data_log_term(machine, x).double() - out["log_z_tap"]
        m, se = estimators.mean_and_stderr(tap_ll)
        out[f"tap_ll_{split}"] = m
        out[f"tap_ll_{split}_stderr"] = se
        out[f"tap_ll_per_unit_{split}"] = m / n_units
        m, se = estimators.mean_and_stderr(neg_f)
        out[f"ais_ll_{split}"] = m - ais.log_z
        out[f"ais_ll_{split}_lower"] = m - ais.upper
        out[f"ais_ll_{split}_upper"] = m - ais.lower
        out[f"ais_ll_{split}_stderr"] = se  # over images, not AIS (that is the band)
        out[f"exact_ll_{split}"] = m - log_z_exact if log_z_exact is not None else math.nan
        if isinstance(machine.visible, Bernoulli | Spin):
            pl = estimators.pseudo_log_likelihood(machine, x, settings.pl_sites, pl_gen)
            out[f"pl_{split}"], out[f"pl_{split}_stderr"] = estimators.mean_and_stderr(pl)
        else:
            out[f"pl_{split}"] = out[f"pl_{split}_stderr"] = math.nan
        out[f"n_{split}_images"] = int(x.shape[0])
    out["pl_seconds"] = time.perf_counter() - t0
    return out
