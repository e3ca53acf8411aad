"""The course of Fig. 5's Helmholtz estimate over training (first paper, Sec. VII.3).

The paper: "the early phase of training shows a marked increase of the TAP free energy, which
then gradually declines as training continues". ``trend_claims`` tests it as worded; the
estimate is split into the parts of eq. (36) (``tap.free_energy_terms``: ``helmholtz_part_*``
rows) to say which part moves it, and judged again as the binary RBM's usual free energy
(``helmholtz_estimate_energy``: F minus ``tap.energy_normaliser``), since eq. (112)'s normalised
priors shift F by a constant per epoch that moves with the biases.
"""

from __future__ import annotations

import math

import numpy as np

from tapmachine.figures.common import claim

__all__ = ["EARLY_SHARE", "PARTS", "trend_claims", "part_claims", "energy_claims", "energy_trend"]

#: "Early phase of training": the Helmholtz estimate's peak must fall within this share of the
#: last harvested epoch. The paper ties it to where Fig. 3's curve levels off (about epoch 20 of
#: 100), so a quarter of training.
EARLY_SHARE = 0.25

#: The parts of -F (``tap.FREE_ENERGY_TERMS``, eq. 36) as Fig. 5's rows name them.
PARTS = {
    "site_visible": "visible site terms (entropy and biases)",
    "site_hidden": "hidden site terms (entropy and biases)",
    "mean_field": "mean-field coupling a_v W a_h",
    "onsager": "Onsager term W^2 c_v c_h / 2",
}


#: How the rows of the binary RBM's usual free energy name it.
_ENERGY = " (usual RBM energy: F minus the units' ln Z_B)"


def energy_claims(model: str, epoch: int, helm: float, normaliser, out: list) -> list[dict]:
    """An epoch's ``helmholtz_estimate_energy`` row (its value appended to ``out``): the
    Helmholtz estimate as the binary RBM's usual free energy, -ln sum e^{-E}, which eq. (36)'s
    normalised priors (eq. 112) shift by the units' sum of ln Z_B (``tap.energy_normaliser``);
    none for a solutions file without it or a machine with other units."""
    value = helm - normaliser if normaliser is not None else math.nan
    out.append(value)
    if not np.isfinite(value):
        return []
    return [
        claim(
            "helmholtz_estimate_energy",
            value,
            model,
            f"mean F of unique solutions minus sum ln Z_B = {normaliser:.4g} (eq. 111): -ln Z of "
            "the energy -U.v - V.h - v W h, the convention the paper's text may plot",
            epoch,
        )
    ]


def energy_trend(model: str, epochs: list[int], helm_energy: list[float]) -> list[dict]:
    """``trend_claims`` on the usual RBM free energy, where every epoch has it."""
    if not helm_energy or not np.isfinite(helm_energy).all():
        return []
    return trend_claims(model, epochs, helm_energy, None, "_energy", _ENERGY)


def part_claims(model: str, epoch: int, solutions: dict, parts: dict | None) -> list[dict]:
    """An epoch's ``helmholtz_part_*`` rows (appended to ``parts``), or none for a solutions
    file without the parts of F."""
    if parts is None:
        return []
    rows = []
    for name, what in PARTS.items():
        values = np.asarray(solutions[f"unique_{name}"], dtype=np.float64)
        share = -float(values.mean()) if values.size else math.nan
        parts[name].append(share)
        rows.append(
            claim(
                f"helmholtz_part_{name}",
                share,
                model,
                f"minus the mean over unique solutions of eq. (36)'s {what}; the four parts add "
                "up to helmholtz_estimate",
                epoch,
            )
        )
    return rows


def trend_claims(
    model: str,
    epochs: list[int],
    helm: list[float],
    parts: dict[str, list[float]] | None = None,
    suffix: str = "",
    convention: str = "",
) -> list[dict]:
    """The rows that test the paper's course of the Helmholtz estimate (module docstring).

    ``helm``: the estimate per epoch; ``parts``: per part of eq. (36) (``PARTS``), its share of
    the estimate per epoch (minus the mean term), or None. Where the lowest estimate is not the
    last, its rise from there to the last epoch, part by part, is a context row
    (``helmholtz_late_change``): which part drives a late rise. ``suffix`` and ``convention``
    name rows and text for another convention of F (``_energy``: the binary RBM's usual free
    energy, ``tap.energy_normaliser``).
    """
    from scipy.stats import spearmanr

    ok = [i for i, h in enumerate(helm) if np.isfinite(h)]
    if len(ok) < 3:
        return []
    E = [epochs[i] for i in ok]
    H = [helm[i] for i in ok]
    p = int(np.argmax(H))
    after = (
        float(spearmanr(E[p:], H[p:]).statistic)
        if len(E) - p > 2 and len(set(H[p:])) > 1
        else math.nan
    )
    early = E[p] <= EARLY_SHARE * E[-1]
    held = p > 0 and H[p] > H[0] and early and bool(after < 0)
    rows = [
        claim(
            f"helmholtz_peak_epoch{suffix}",
            E[p],
            model,
            f"epoch of the highest Helmholtz estimate{convention} ({H[p]:.4g}; first {H[0]:.4g} "
            f"at epoch {E[0]}, last {H[-1]:.4g} at epoch {E[-1]}); paper: early",
        ),
        claim(
            f"helmholtz_rises_then_declines{suffix}",
            after,
            model,
            f"Spearman of the Helmholtz estimate{convention} with epoch from its peak on; paper: a "
            "marked increase early in training, then a gradual decline: held when the peak lies "
            f"above the first epoch, within the first {EARLY_SHARE:.0%} of training, and the "
            "estimate falls after it (< 0)",
            held=held,
        ),
    ]
    q = int(np.argmin(H))
    if q < len(E) - 1 and parts:
        j, k = ok[q], ok[-1]
        moves = ", ".join(
            f"{name} {parts[name][k] - parts[name][j]:+.4g}" for name in PARTS if name in parts
        )
        rows.append(
            claim(
                "helmholtz_late_change",
                H[-1] - H[q],
                model,
                f"rise of the Helmholtz estimate from its lowest (epoch {E[q]}) to epoch {E[-1]}, "
                f"by part of eq. (36): {moves}",
            )
        )
    return rows
