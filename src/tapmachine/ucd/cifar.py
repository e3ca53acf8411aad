"""CIFAR-10 from the user's copy of the official archive (second paper, Sec. 5.2, Table 1).

The archive (``cifar-10-python.tar.gz``, md5 ``c58f30108f718f92721af3b95e74349a``) cannot be
downloaded here and there is no default path: the user names it (config
``ucd.dbm.cifar10_archive``). Its md5 is checked before the archive is opened; its batches are
Python pickles, which are only unpickled after that check. Images are kept as (n, 3072) uint8 in
the archive's channel-major order (R plane, G plane, B plane), shown as a 32 x 96 strip.
``binarise`` gives the {0, 1} form the DBMs here are trained on (each channel value thresholded
at 1/2; the paper's 8-bit expansion of CIFAR is the ``bits8`` transform of the data stage).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np

from tapmachine.core.errors import TapmachineError

__all__ = ["CIFAR10_MD5", "CifarError", "md5_of", "load_cifar10", "binarise"]

CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
_TRAIN = [f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)]
_TEST = ["cifar-10-batches-py/test_batch"]


class CifarError(TapmachineError):
    """The CIFAR-10 archive is missing, not the official one, or malformed."""


def md5_of(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _batches(tar: tarfile.TarFile, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in names:
        try:
            member = tar.extractfile(name)
        except KeyError:
            raise CifarError(f"the archive has no {name}") from None
        blob = pickle.load(io.BytesIO(member.read()), encoding="bytes")
        xs.append(np.asarray(blob[b"data"], dtype=np.uint8))
        ys.append(np.asarray(blob[b"labels"], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def load_cifar10(archive, expected_md5: str = CIFAR10_MD5):
    """(x_train, y_train, x_test, y_test) from the official archive, md5-verified first."""
    path = Path(archive)
    if not path.is_file():
        raise CifarError(f"ucd.dbm.cifar10_archive: {path} is not a file")
    digest = md5_of(path)
    if digest != expected_md5:
        raise CifarError(
            f"ucd.dbm.cifar10_archive: {path} has md5 {digest}, not the official "
            f"cifar-10-python.tar.gz ({expected_md5}); not opened"
        )
    with tarfile.open(path, "r:gz") as tar:
        x_train, y_train = _batches(tar, _TRAIN)
        x_test, y_test = _batches(tar, _TEST)
    # the md5 pins the official 50,000 + 10,000 images; a test archive may hold fewer
    if x_train.shape[1:] != (3072,) or x_test.shape[1:] != (3072,) or len(y_train) != len(x_train):
        raise CifarError(f"unexpected shapes {x_train.shape}, {x_test.shape}")
    return x_train, y_train, x_test, y_test


def binarise(x: np.ndarray) -> np.ndarray:
    """uint8 channel values -> {0, 1} (threshold at 128, i.e. value / 255 >= 1/2)."""
    return (np.asarray(x) >= 128).astype(np.uint8)
