"""The registry of gradient methods: each estimates Alg. 2's ascent direction of the mean
log-likelihood on a mini-batch, with whatever state it carries between steps.

Registered here: ``tap`` (TAP machines, first paper, Alg. 2; ``train.tap_gradient``), ``cd`` and
``pcd`` (CD-k, Hinton 2002; PCD-k, Tieleman 2008; ``core.contrastive``) and the DBM methods
``ucd_lmi``, ``dbm_pcd`` and ``centered_pcd`` (second paper; ``ucd.dbm``). A new method is one
``register(GradientMethod(...))``; the loop (``train.loop``) knows only this interface.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tapmachine.core import contrastive
from tapmachine.train.settings import TrainingError, TrainSettings
from tapmachine.train.tap_gradient import tap_step_gradients
from tapmachine.ucd import dbm

__all__ = ["GradientMethod", "METHODS", "register", "method", "gradients"]


def _stateless(machine, x_train, settings, generator):
    return None


def _nothing(state) -> dict:
    return {}


def _unversioned() -> str:
    return ""


@dataclasses.dataclass(frozen=True)
class GradientMethod:
    """One gradient method.

    ``gradients(machine, x, settings, state, generator, stats)`` returns ``{"weights": [...],
    "priors": [{name: tensor}]}`` (ascent directions) and may advance ``state`` in place and
    add to ``stats``; ``init_state(machine, x_train, settings, generator)`` the state before the
    first step (None: none); ``save_state(state)`` it as a dict of plain CPU tensors for a
    checkpoint and ``load_state(blob, device)`` back; ``step_metrics(state)`` what the loop
    hands its ``on_step`` callback after a step; ``version()`` a string that enters the resume
    fingerprint of this method's runs only (a change of its arithmetic alone).
    """

    name: str
    gradients: Callable
    init_state: Callable = _stateless
    save_state: Callable | None = None
    load_state: Callable | None = None
    step_metrics: Callable = _nothing
    version: Callable = _unversioned


#: Every registered method by name (``TrainSettings.method``).
METHODS: dict[str, GradientMethod] = {}


def register(entry: GradientMethod) -> GradientMethod:
    """Add ``entry`` to ``METHODS`` under its name (a name taken once)."""
    if entry.name in METHODS:
        raise ValueError(f"gradient method {entry.name!r} is already registered")
    METHODS[entry.name] = entry
    return entry


def method(name: str) -> GradientMethod:
    """The registered method ``name``."""
    if name not in METHODS:
        raise TrainingError(f"method must be one of {sorted(METHODS)}, not {name!r}")
    return METHODS[name]


def _tap(machine, x, settings: TrainSettings, state, generator, stats=None) -> dict:
    return tap_step_gradients(machine, x, settings, generator, stats)


def _cd(machine, x, settings: TrainSettings, state, generator, stats=None) -> dict:
    return contrastive.cd_gradients(machine, x, settings.sampling_steps, generator)


def _pcd(machine, x, settings: TrainSettings, chains, generator, stats=None) -> dict:
    return contrastive.pcd_gradients(machine, x, chains, settings.sampling_steps, generator)


def _pcd_chains(machine, x_train, settings: TrainSettings, generator):
    """One persistent chain per batch row, started at data rows."""
    return contrastive.PersistentChains.from_data(
        x_train, n_chains=settings.batch_size, generator=generator
    )


def _dbm(machine, x, settings: TrainSettings, state, generator, stats=None) -> dict:
    options = dbm.DBMOptions.from_dict(settings.ucd)
    return dbm.gradients(
        machine, x, settings.method, options, state, settings.sampling_steps, generator
    )


def _dbm_state(machine, x_train, settings: TrainSettings, generator):
    options = dbm.DBMOptions.from_dict(settings.ucd)
    return dbm.init_state(
        machine, x_train, settings.method, options, settings.batch_size, generator
    )


register(GradientMethod("tap", _tap))
register(GradientMethod("cd", _cd))
register(
    GradientMethod(
        "pcd",
        _pcd,
        init_state=_pcd_chains,
        save_state=lambda chains: {"visible": chains.visible.cpu()},
        load_state=lambda blob, device: contrastive.PersistentChains(blob["visible"].to(device)),
    )
)
for _name in dbm.DBM_METHODS:
    register(
        GradientMethod(
            _name,
            _dbm,
            init_state=_dbm_state,
            save_state=lambda state: state.to_dict(),
            load_state=dbm.DBMState.from_dict,
            step_metrics=lambda state: dict(state.metrics),
            version=lambda: f"dbm numerics {dbm.NUMERICS_VERSION}",
        )
    )


def gradients(machine, x, settings: TrainSettings, state, generator, stats=None) -> dict:
    """The ascent direction of ``settings.method`` on the batch ``x`` (``GradientMethod``)."""
    return method(settings.method).gradients(machine, x, settings, state, generator, stats)
