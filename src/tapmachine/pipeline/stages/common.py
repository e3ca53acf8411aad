"""What every stage shares: argument groups, the user-error class, a lazily opened MLflow run
and the params files that let ``tapmachine track`` replay a run's params."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from tapmachine.pipeline import tracking


class UsageError(Exception):
    """An error in the user's input, reported as one line."""


def parse_json(text: str, flag: str):
    """``text`` parsed as JSON; a UsageError naming ``flag`` if it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{flag} is not JSON: {err}") from err


def positive_int(text: str) -> int:
    """An argparse type: ``text`` as an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def params_file(output) -> Path:
    """Where a stage keeps its MLflow run's params beside an output: ``<stem>.params.json``."""
    return Path(output).with_suffix(".params.json")


def write_params(output, params: dict) -> Path:
    """Write ``params`` as the run logs them (``tracking.flat_params``: a flat dict of strings,
    which is its own flattening) to ``params_file(output)`` as JSON, atomically, so that
    ``tapmachine track`` replays the very same params from the files alone."""
    from tapmachine.io.files import atomic_write

    text = json.dumps(tracking.flat_params(params), indent=1, sort_keys=True)
    path = params_file(output)
    atomic_write(path, lambda fh: fh.write(text), text=True)
    return path


def read_params(output) -> dict | None:
    """The params kept beside ``output`` by ``write_params``; None if there is no such file."""
    path = params_file(output)
    return json.loads(path.read_text()) if path.exists() else None


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))


def add_numeric_args(s) -> None:
    """--device, --dtype, --seed (the config's, defaults from the schema) and --threads."""
    from tapmachine.pipeline.configuration import schema_default

    s.add_argument("--device", default=schema_default("device"))
    s.add_argument("--dtype", default=schema_default("dtype"), choices=["float32", "float64"])
    s.add_argument("--seed", type=int, default=schema_default("seed"))
    s.add_argument("--threads", type=int, default=1)


def job_kwargs(args) -> dict:
    """The device, dtype and tracking manifest of a numeric command's arguments."""
    return {"device": args.device, "dtype": args.dtype, "manifest": args.tracking}


class LazyRun:
    """An MLflow run opened when the library calls ``on_start(params, tags, ...)``.

    Use inside ``with contextlib.ExitStack() as stack``: the run is entered on that stack, so it
    ends with the stack, FAILED if an exception leaves it. ``run`` is a no-op run until then.
    ``name`` is the run's name, or a function of the params that gives it. ``params``: the
    params the run was opened with (None before), for ``write_params`` beside the outputs.
    ``system_metrics``: the run records CPU and memory use (``tracking.start_run``).
    """

    def __init__(
        self, stack: contextlib.ExitStack, manifest, experiment: str, name, system_metrics=False
    ):
        self.stack, self.manifest, self.experiment, self.name = stack, manifest, experiment, name
        self.system_metrics = system_metrics
        self.run = tracking.attach_run(None, None)
        self.params: dict | None = None

    def on_start(self, params: dict, tags: dict, *_) -> str | None:
        self.params = params
        self.run = self.stack.enter_context(
            tracking.start_run(
                self.manifest,
                self.experiment,
                self.name(params) if callable(self.name) else self.name,
                params,
                tags,
                system_metrics=self.system_metrics,
            )
        )
        return self.run.run_id
