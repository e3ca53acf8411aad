"""The dataset record: train/test arrays, labels, image shape and provenance."""

from __future__ import annotations

import dataclasses

import numpy as np

from tapmachine.core.errors import TapmachineError


class DataError(TapmachineError):
    """A dataset could not be fetched, verified, parsed or stored; the message is one line."""


class Unavailable(Exception):
    """A source could not be reached at all; the caller moves on to the next source."""


# --------------------------------------------------------------------------------------------
# The Dataset record
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Dataset:
    """Train/test arrays with labels, the image shape and where the data came from.

    ``x_*`` have shape ``(n, H * W)``; ``y_*`` shape ``(n,)``. ``provenance`` is JSON-serialisable.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    image_shape: tuple[int, int]
    provenance: dict
    name: str

    def __post_init__(self) -> None:
        self.image_shape = tuple(int(s) for s in self.image_shape)
        if len(self.image_shape) != 2:
            raise DataError(
                f"dataset {self.name!r}: image_shape must be (H, W), got {self.image_shape}"
            )
        width = self.image_shape[0] * self.image_shape[1]
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.ndim != 2 or x.shape[1] != width:
                raise DataError(
                    f"dataset {self.name!r}: x_{split} has shape {x.shape}, "
                    f"expected (n, {width}) for images {self.image_shape}"
                )
            if y.shape != (x.shape[0],):
                raise DataError(
                    f"dataset {self.name!r}: y_{split} has shape {y.shape}, "
                    f"expected ({x.shape[0]},)"
                )
