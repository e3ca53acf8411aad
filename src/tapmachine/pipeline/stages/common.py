"""What every stage shares: argument groups, the user-error class, threads."""

from __future__ import annotations

import argparse
import json

from tapmachine.core.errors import TapmachineError


class UsageError(TapmachineError):
    """An error in the user's input, reported as one line."""


def parse_json(text: str, flag: str):
    """``text`` parsed as JSON; a UsageError naming ``flag`` if it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{flag} is not JSON: {err}") from err


def optional_float(text: str) -> float | None:
    """An argparse type: ``none`` or ``null`` (any case) as None, else ``text`` as a float."""
    return None if text.lower() in ("none", "null") else float(text)


def positive_int(text: str) -> int:
    """An argparse type: ``text`` as an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


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
