"""Face images (Fig. 10): the MIT CBCL archive, or the scikit-image LFW substitute."""

from __future__ import annotations

import io
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from tapmachine.io.data.formats import check_digest, digest, parse_pgm
from tapmachine.io.data.record import DataError, Dataset

__all__ = ["LFW_SUBSET_SHA256", "SUBSTITUTE_NOTE", "fetch_faces"]

#: sha256 of ``skimage/data/lfw_subset.npy`` (the faces substitute).
LFW_SUBSET_SHA256 = "9560ec2f5edfac01973f63a8a99d00053fecd11e21877e18038fbe500f8e872c"

SUBSTITUTE_NOTE = "skimage lfw_subset (not CBCL)"


def _cbcl_key(name: str) -> tuple[str, int] | None:
    """(split, label) of a CBCL member path ``.../{train,test}/{face,non-face}/x.pgm``."""
    parts = PurePosixPath(name).parts
    if len(parts) < 3 or not name.endswith(".pgm"):
        return None
    split, kind = parts[-3], parts[-2]
    if split not in ("train", "test") or kind not in ("face", "non-face"):
        return None
    return split, 1 if kind == "face" else 0


def _walk_cbcl(tf: tarfile.TarFile, where: str, groups: dict) -> None:
    """Collect PGMs of ``tf`` into ``groups``, descending into nested tarballs."""
    for member in tf.getmembers():
        if not member.isfile():
            continue
        label = f"{where}!{member.name}"
        if member.name.endswith((".tar.gz", ".tgz", ".tar")):
            inner = tf.extractfile(member).read()
            try:
                nested = tarfile.open(fileobj=io.BytesIO(inner), mode="r:*")
            except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
                raise DataError(f"{label}: not a readable tar archive ({exc})") from None
            with nested:
                _walk_cbcl(nested, label, groups)
            continue
        key = _cbcl_key(member.name)
        if key is not None:
            groups[key].append((member.name, parse_pgm(tf.extractfile(member).read(), label)))


def _cbcl_faces(archive: Path) -> Dataset:
    """Parse the MIT CBCL face database #1 archive (``faces.tar.gz``, nested tarballs)."""
    data = archive.read_bytes()
    groups = {("train", 1): [], ("train", 0): [], ("test", 1): [], ("test", 0): []}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
            _walk_cbcl(tf, str(archive), groups)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise DataError(f"{archive}: not a readable tar archive ({exc})") from None
    for split in ("train", "test"):
        if not groups[(split, 1)]:
            raise DataError(f"{archive}: contains no {split}/face/*.pgm images")
    shapes = {img.shape for g in groups.values() for _, img in g}
    if len(shapes) != 1:
        raise DataError(f"{archive}: images differ in size: {sorted(shapes)}")
    (shape,) = shapes
    xs, ys = {}, {}
    for split in ("train", "test"):
        items = sorted(groups[(split, 1)]) + sorted(groups[(split, 0)])
        xs[split] = np.stack([img.reshape(-1) for _, img in items]).astype(np.float32)
        ys[split] = np.array(
            [1] * len(groups[(split, 1)]) + [0] * len(groups[(split, 0)]), np.uint8
        )
    counts = {f"{s}/{'face' if lab else 'non-face'}": len(g) for (s, lab), g in groups.items()}
    from tapmachine import __version__

    prov = {
        "dataset": "faces",
        "source": "local",
        "path": str(archive.resolve()),
        "archive_sha256": digest(data, "sha256"),
        "checksums_verified": [],
        "note": "MIT CBCL face database #1; no checksum is published, sha256 recorded",
        "counts": counts,
        "split": "CBCL train/test; faces first then non-faces, each sorted by file name",
        "labels": {"1": "face", "0": "non-face"},
        "values": "pixel / maxval, float32 in [0, 1]",
        "tapmachine_version": __version__,
    }
    return Dataset(xs["train"], ys["train"], xs["test"], ys["test"], shape, prov, "faces")


def _lfw_substitute(size: int = 19) -> Dataset:
    """The 100 LFW faces (and 100 non-faces) bundled with scikit-image, resized to 19x19."""
    import skimage
    from skimage.transform import resize

    path = Path(skimage.__file__).parent / "data" / "lfw_subset.npy"
    if not path.is_file():
        raise DataError(f"faces substitute not found: {path} (reinstall scikit-image)")
    data = path.read_bytes()
    check = check_digest(data, "sha256", LFW_SUBSET_SHA256, str(path))
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable .npy ({exc})") from None
    if arr.shape[0] != 200 or arr.ndim != 3:
        raise DataError(f"{path}: expected 200 images, got shape {arr.shape}")
    small = np.stack([resize(img, (size, size), anti_aliasing=True, mode="reflect") for img in arr])
    small = np.clip(small, 0.0, 1.0).reshape(200, -1).astype(np.float32)
    train_idx = np.r_[0:80, 100:180]
    test_idx = np.r_[80:100, 180:200]
    label = (np.arange(200) < 100).astype(np.uint8)
    from tapmachine import __version__

    prov = {
        "dataset": "faces",
        "source": "substitute",
        "substitute": SUBSTITUTE_NOTE,
        "package": "scikit-image",
        "version": skimage.__version__,
        "path": str(path),
        "checksums_verified": [check],
        "split": "train = faces rows 0-79 + non-faces rows 100-179; "
        "test = faces rows 80-99 + non-faces rows 180-199 (faces first)",
        "labels": {"1": "face (LFW, rows 0-99)", "0": "non-face (rows 100-199), kept"},
        "values": f"float64 25x25 resized to {size}x{size} (skimage.transform.resize, "
        "anti_aliasing, reflect), clipped to [0, 1], float32",
        "tapmachine_version": __version__,
    }
    return Dataset(
        small[train_idx], label[train_idx], small[test_idx], label[test_idx], (size, size), prov,
        "faces",
    )  # fmt: skip


def fetch_faces(cbcl_archive: str | os.PathLike | None = None) -> Dataset:
    """Faces in [0, 1] (float32), labels 1 face / 0 non-face.

    With ``cbcl_archive`` the MIT CBCL ``faces.tar.gz`` (must exist); without, the scikit-image
    LFW substitute, which its provenance names as such.
    """
    if cbcl_archive is None:
        return _lfw_substitute()
    archive = Path(cbcl_archive)
    if not archive.is_file():
        raise DataError(f"CBCL faces archive not found: {archive}")
    return _cbcl_faces(archive)
