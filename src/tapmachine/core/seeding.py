"""Named random streams: one ``torch.Generator`` per (config seed, labels), the same each run."""

from __future__ import annotations

import hashlib

import torch

__all__ = ["seeded_generator"]


def seeded_generator(seed: int, *labels: str, device="cpu") -> torch.Generator:
    """A generator seeded from (config seed, model, stage, ...): same config, same numbers.

    A sha256 of the labels rather than ``numpy.random.SeedSequence``: SeedSequence takes
    integers, not labels, and would change every random stream (and so every result) of a run.
    """
    digest = hashlib.sha256("/".join([str(seed), *labels]).encode()).digest()
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return g
