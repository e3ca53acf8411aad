"""Which per-epoch checkpoints a training run keeps (a model's ``checkpoint_every``).

Training writes ``checkpoints/epoch_{e}.pt`` after every epoch, each with the history so far; the
latest is what a stopped job resumes from. A model trained for many short epochs (the faces
substitute's 15,000) would keep thousands, their size growing with the epoch. With
``checkpoint_every`` N the loop removes the checkpoint it wrote before once the next is written,
unless ``kept`` says otherwise: what stays is every N-th epoch, the model's last epoch and the
latest. An epoch it does not keep is written at most once a minute
(``train.checkpointing.UNKEPT_CHECKPOINT_SECONDS``), its state held in memory in between. The
jobs that read checkpoints (harvests, Fig. 3's exact curve, Fig. 12's scores, the deep curves)
find only those; the config check names an epoch one of them would ask for in vain
(``unkept``). Torch-free: the workflow's config check imports it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["kept", "unkept"]


def kept(epoch: int, every: int, last: int) -> bool:
    """Whether training keeps epoch ``epoch``'s checkpoint once a later one is written: a
    multiple of ``every``, or the model's ``last`` epoch."""
    return epoch % every == 0 or epoch == last


def unkept(epochs: Iterable[int], every: int, last: int) -> list[int]:
    """The epochs of ``epochs`` (at most ``last``) whose checkpoints training does not keep."""
    return sorted(e for e in epochs if e <= last and not kept(e, every, last))
