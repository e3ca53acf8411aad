"""The second paper's DBM methods in training's method registry (``train.methods``): UCD-LMI and
its PCD baselines (``dbm.DBM_METHODS``), registered when ``tapmachine.ucd`` is imported.

Each builds its DBM by its switches (Secs. 4.1, 4.3, App. B; ``dbm.build_dbm``) on the CPU, so
that every device starts from the same machine, trains on binary {0, 1} rows mapped to its units
(``dbm.data_for``), takes the schema's ``dbm_model`` defaults, skips the per-epoch TAP
evaluation (``ucd score`` scores a DBM) and hands the loop's ``on_step`` the estimator's numbers
(tau, T, corrected fraction, start energy gap, norm).
"""

from __future__ import annotations

import torch

from tapmachine.core.seeding import seeded_generator
from tapmachine.io.schema import defaults
from tapmachine.train.methods import METHODS, GradientMethod, register
from tapmachine.train.settings import TrainingError, TrainSettings
from tapmachine.ucd import dbm

__all__ = ["hidden_sizes", "start", "tau_summary"]


def _options(settings: TrainSettings) -> dbm.DBMOptions:
    return dbm.DBMOptions.from_dict(settings.ucd)


def _gradients(machine, x, settings: TrainSettings, state, generator, stats=None) -> dict:
    return dbm.gradients(
        machine, x, settings.method, _options(settings), state, settings.sampling_steps, generator
    )


def _init_state(machine, x_train, settings: TrainSettings, generator):
    return dbm.init_state(
        machine, x_train, settings.method, _options(settings), settings.batch_size, generator
    )


def _check(settings: TrainSettings) -> None:
    try:
        _options(settings)
    except ValueError as exc:
        raise TrainingError(str(exc)) from None


def _defaults() -> dict:
    """The schema's ``dbm_model`` defaults; no per-epoch TAP evaluation."""
    return {**defaults("dbm_model"), "evaluate": False}


def hidden_sizes(spec: dict) -> list[int]:
    """The hidden layer sizes of a config entry: ``hidden`` as ``[{prior, units}, ...]`` or as
    a list of unit counts."""
    hidden = spec.get("hidden")
    sizes = [h["units"] if isinstance(h, dict) else h for h in hidden or []]
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise TrainingError(f"hidden must list positive layer sizes, got {hidden}")
    return sizes


def _build(spec: dict, x, settings: TrainSettings, generator: torch.Generator):
    sizes = [x.shape[1], *hidden_sizes(spec)]
    return dbm.build_dbm(sizes, generator, _options(settings), settings.weight_init_std, x.dtype)


def start(name: str, spec: dict, dataset, rows, settings: TrainSettings, seed: int, device):
    """A DBM job's start: the stream (seed, "ucd_dbm", "{dataset}/{name}", "train") (one entry
    is trained on several datasets), the machine built on the CPU and then moved, with a
    generator on ``device`` seeded from that stream; the rows in its units (the job has checked
    that they are {0, 1}: ``binary_data``)."""
    generator = seeded_generator(seed, "ucd_dbm", f"{dataset.name}/{name}", "train")
    machine = _build(spec, rows, settings, generator)
    if torch.device(device).type != "cpu":
        machine = machine.to(device)
        generator = _device_generator(generator, device)
    return machine, dbm.data_for(machine, rows), generator


def binary_data(machine) -> tuple:
    """A DBM's data are {0, 1} pixels, whatever its units (``dbm.data_for`` maps them)."""
    return (lambda x: (x == 0) | (x == 1)), "{0, 1}", "the pixels (a DBM)"


def _device_generator(generator: torch.Generator, device) -> torch.Generator:
    """A generator on ``device`` seeded from the CPU ``generator`` (torch draws on a device only
    from a generator of that device)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


for _name in dbm.DBM_METHODS:
    if _name not in METHODS:  # a re-import (importlib.reload) registers nothing twice
        register(
            GradientMethod(
                _name,
                _gradients,
                init_state=_init_state,
                save_state=lambda state: state.to_dict(),
                load_state=dbm.DBMState.from_dict,
                step_metrics=lambda state: dict(state.metrics),
                version=lambda: f"dbm numerics {dbm.NUMERICS_VERSION}",
                defaults=_defaults,
                check=_check,
                build=_build,
                start=start,
                data_support=binary_data,
            )
        )


def tau_summary(steps: list[dict]) -> dict:
    """The coupling time tau and the local-search steps T over training (Sec. 5: "from 5 to 30"),
    from the per-step rows ``on_step`` records: range and mean of the per-step means (both
    phases), the largest per-chain value, and the mean corrected fraction; {} without tau."""
    taus = [s["tau_mean"] for s in steps if "tau_mean" in s]
    if not taus:
        return {}
    Ts = [s["T_mean"] for s in steps if "T_mean" in s]
    return {
        "tau_mean_min": min(taus),
        "tau_mean_max": max(taus),
        "tau_mean_mean": sum(taus) / len(taus),
        "tau_max": max(max(s.get("neg_tau_max", 1.0), s.get("pos_tau_max", 1.0)) for s in steps),
        "T_mean_min": min(Ts),
        "T_mean_max": max(Ts),
        "T_mean_mean": sum(Ts) / len(Ts),
        "T_max": max(max(s.get("neg_T_max", 0.0), s.get("pos_T_max", 0.0)) for s in steps),
        "corrected_fraction_mean": sum(s["corrected_fraction"] for s in steps) / len(steps),
    }
