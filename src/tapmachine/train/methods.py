"""The registry of gradient methods: each estimates Alg. 2's ascent direction of the mean
log-likelihood on a mini-batch, with whatever state it carries between steps, and says how its
machine is built and its rows prepared.

Registered here: ``tap`` (TAP machines, first paper, Alg. 2; ``train.tap_gradient``), ``cd`` and
``pcd`` (CD-k, Hinton 2002; PCD-k, Tieleman 2008; ``core.contrastive``). Other packages register
their own: the second paper's DBM methods (``ucd_lmi``, ``dbm_pcd``, ``centered_pcd``) register
when ``tapmachine.ucd`` is imported (``ucd.training``). A new method is one
``register(GradientMethod(...))``; the loop (``train.loop``) and the job (``train.job``) know
only this interface.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tapmachine.core import contrastive
from tapmachine.core.seeding import seeded_generator
from tapmachine.train.build import build_from_spec
from tapmachine.train.settings import METHODS, TrainingError, TrainSettings
from tapmachine.train.tap_gradient import check_train_noise, tap_step_gradients

__all__ = [
    "GradientMethod",
    "METHODS",
    "register",
    "method",
    "gradients",
    "rbm_start",
    "visible_support",
]


def _stateless(machine, x_train, settings, generator):
    return None


def _nothing(state) -> dict:
    return {}


def _unversioned() -> str:
    return ""


def _no_defaults() -> dict:
    return {}


def _no_check(settings) -> None:
    return None


def rbm_start(name: str, spec: dict, dataset, rows, settings, seed: int, device):
    """The start of an RBM's or deep TAP machine's job (Alg. 2): the stream (seed, name,
    "train"), the rows on ``device`` and the machine built there from them."""
    generator = seeded_generator(seed, name, "train")
    x = rows.to(device)
    machine = method(settings.method).build(spec, x, settings, generator)
    check_train_noise(machine, settings.train_noise)
    return machine, x, generator


def visible_support(machine) -> tuple[Callable, str, str]:
    """What a job's dataset values must lie in: its machine's visible units' support
    (``Prior.in_support``, ``Prior.support``) and their name."""
    visible = machine.visible
    return visible.in_support, visible.support, f"the {type(visible).__name__} visible units"


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

    How a job of this method starts: ``defaults()`` the settings its config entries take where
    they are silent (beside ``TrainSettings``' own), ``check(settings)`` raises
    ``TrainingError`` on settings it cannot train with, ``build(spec, x, settings, generator)``
    the initial machine of a config entry from its rows, and ``start(name, spec, dataset, rows,
    settings, seed, device)`` the job's ``(machine, x, generator)``: the machine, the training
    rows in its units and device and the training stream; ``data_support(machine)`` what every
    value of the job's dataset must lie in, ``(in_support, support, units)`` (default: the
    visible units' support), which the job checks before training.
    """

    name: str
    gradients: Callable
    init_state: Callable = _stateless
    save_state: Callable | None = None
    load_state: Callable | None = None
    step_metrics: Callable = _nothing
    version: Callable = _unversioned
    defaults: Callable = _no_defaults
    check: Callable = _no_check
    build: Callable = build_from_spec
    start: Callable = rbm_start
    data_support: Callable = visible_support


def register(entry: GradientMethod) -> GradientMethod:
    """Add ``entry`` to ``METHODS`` under its name (a name taken once)."""
    if entry.name in METHODS:
        raise ValueError(f"gradient method {entry.name!r} is already registered")
    METHODS[entry.name] = entry
    return entry


def method(name: str) -> GradientMethod:
    """The registered method ``name``."""
    if name not in METHODS:
        raise TrainingError(
            f"method must be one of {sorted(METHODS)}, not {name!r} (the DBM methods register "
            "when tapmachine.ucd is imported)"
        )
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


def gradients(machine, x, settings: TrainSettings, state, generator, stats=None) -> dict:
    """The ascent direction of ``settings.method`` on the batch ``x`` (``GradientMethod``)."""
    return method(settings.method).gradients(machine, x, settings, state, generator, stats)
