"""A user's own data (``io.data.own``): every format read, labels, both test splits, the sha256
in the provenance, one-line errors; and the training job's check of every value against the
visible units' support, naming the file, row and column."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tapmachine.io import data
from tapmachine.io.data import own
from tapmachine.train import TrainingError, train_from_spec

RNG = np.random.default_rng(1)
X = RNG.integers(0, 2, size=(20, 6)).astype(np.float32)
Y = RNG.integers(0, 3, size=20)
SPEC = {
    "visible": {"prior": "bernoulli"},
    "hidden": [{"prior": "bernoulli", "units": 3}],
    "epochs": 1,
    "batch_size": 4,
    "eval": {"n_samples": 4},
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(path: Path, x=X, y=Y) -> Path:
    """``x`` (and labels ``y`` where the format holds them) in the format of ``path``'s suffix;
    a table has its labels as the second column."""
    if path.suffix == ".npz":
        np.savez(path, rows=x, y=y)
    elif path.suffix == ".npy":
        np.save(path, x)
    else:
        table = pd.DataFrame(x, columns=[f"u{i}" for i in range(x.shape[1])])
        table.insert(1, "y", y)
        table.to_csv(path, index=False) if path.suffix == ".csv" else table.to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".npz", ".npy", ".csv", ".parquet"])
def test_every_format_reads_the_rows_labels_and_sha256(tmp_path, suffix):
    path = write(tmp_path / f"mine{suffix}")
    labels = None if suffix == ".npy" else "y"
    array = "rows" if suffix == ".npz" else None
    ds = data.read_own("mine", path, array=array, labels=labels, test_fraction=0.25, seed=3)
    train, test = own.split_rows(20, 0.25, 3)
    assert len(test) == 5 and list(train) == sorted(set(range(20)) - set(test))
    np.testing.assert_array_equal(ds.x_train, X[train])
    np.testing.assert_array_equal(ds.x_test, X[test])
    expected_y = Y if labels else np.zeros(20)
    np.testing.assert_array_equal(ds.y_train, expected_y[train])
    np.testing.assert_array_equal(ds.y_test, expected_y[test])
    assert ds.provenance["sha256"] == sha256(path)
    assert ds.provenance["file"] == str(path.resolve())
    assert ds.image_shape == (1, 6)
    # stored and read back whole, provenance included
    back = data.load_dataset(data.save_dataset(ds, tmp_path / "mine.npz.out.npz"))
    assert back.provenance == ds.provenance


def test_a_second_file_is_the_test_split_and_images_keep_their_shape(tmp_path):
    images = RNG.integers(0, 2, size=(8, 2, 3))
    np.savez(tmp_path / "a.npz", x=images)
    np.savez(tmp_path / "b.npz", x=images[:3])
    ds = data.read_own("mine", tmp_path / "a.npz", test_path=tmp_path / "b.npz")
    assert ds.image_shape == (2, 3) and ds.x_train.shape == (8, 6) and ds.x_test.shape == (3, 6)
    assert ds.provenance["test"]["sha256"] == sha256(tmp_path / "b.npz")
    assert data.file_cell(ds.provenance, "test", 2, 4) == (str(tmp_path / "b.npz"), 2, 4)


@pytest.mark.parametrize(
    ("make", "kwargs", "message"),
    [
        (lambda p: write(p / "m.npz"), {}, r"holds arrays \['rows', 'y'\]; name the one"),
        (lambda p: write(p / "m.npz"), {"array": "x"}, "has no array 'x'"),
        (lambda p: write(p / "m.npy"), {"labels": "y"}, "a .npy file holds one array"),
        (lambda p: write(p / "m.csv"), {"labels": "z"}, "has no column 'z'"),
        (lambda p: p / "m.txt", {}, "unknown format '.txt'"),
        (lambda p: p / "m.csv", {}, "data file not found"),
        (
            lambda p: (p / "m.parquet").write_bytes(b"not parquet") and p / "m.parquet",
            {},
            "not a readable .parquet",
        ),  # fmt: skip
        (
            lambda p: write(p / "m.npz"),
            {"array": "rows", "test_fraction": 0.01},
            "leaves 0 test and 20 training rows",
        ),  # fmt: skip
    ],
)
def test_a_file_it_cannot_use_is_a_one_line_data_error(tmp_path, make, kwargs, message):
    path = make(tmp_path)
    kwargs = {"test_fraction": 0.25, **kwargs}
    with pytest.raises(data.DataError, match=message) as info:
        data.read_own("mine", path, **kwargs)
    assert "\n" not in str(info.value)


def _train(tmp_path, ds, spec=SPEC):
    data_file = data.save_dataset(ds, tmp_path / "results" / "data.npz")
    outdir = tmp_path / "results" / "model"
    return data_file, outdir, lambda: train_from_spec("m", spec, str(data_file), str(outdir))


@pytest.mark.parametrize(
    ("prior", "bad", "support"),
    [
        ({"prior": "bernoulli"}, 2.0, "{0, 1}"),
        ({"prior": "spin"}, 0.0, "{-1, 1}"),
        ({"prior": "truncated_gaussian", "lower": 0.0, "upper": 0.5}, 0.75, "[0, 0.5]"),
        ({"prior": "truncated_gauss_bernoulli", "lower": -1.0, "upper": 1.0}, np.nan, "[-1, 1]"),
    ],
)
def test_training_refuses_a_value_outside_the_visible_support_naming_file_row_and_column(
    tmp_path, prior, bad, support
):
    """The bad value sits in file row 13, column 4 of a table whose labels are column 1: in the
    dataset it is training row 10 (3 of the first 13 rows are test rows by the seed) and unit 3;
    the error names the file's row and column, and no output is left."""
    x = X.copy()
    if prior["prior"] == "spin":
        x = 2 * x - 1
    elif prior["prior"] != "bernoulli":
        x = x * 0.5
    x[13, 3] = bad
    path = write(tmp_path / "mine.csv", x)
    ds = data.read_own("mine", path, labels="y", test_fraction=0.25, seed=3)
    train, _ = own.split_rows(20, 0.25, 3)
    assert list(train).index(13) == 10
    data_file, outdir, run = _train(tmp_path, ds, {**SPEC, "visible": prior})
    with pytest.raises(TrainingError) as info:
        run()
    message = str(info.value)
    assert message.startswith(f"{path.resolve()}: row 13, column 4 (dataset {data_file}): ")
    assert f"outside {support}" in message and "visible units of model m" in message
    assert "\n" not in message
    assert not outdir.exists()


def test_a_bad_test_row_and_a_paper_dataset_are_named_in_the_dataset_file(tmp_path):
    x_test = X[:4].copy()
    x_test[2, 5] = -1.0
    ds = data.Dataset(X, Y, x_test, Y[:4], (2, 3), {"source": "synthetic"}, "synth")
    data_file, outdir, run = _train(tmp_path, ds)
    with pytest.raises(TrainingError, match=rf"^{data_file}: test row 2, column 5: -1 is outside"):
        run()
    assert not outdir.exists()


def test_data_inside_the_support_trains(tmp_path):
    path = write(tmp_path / "mine.parquet")
    ds = data.read_own("mine", path, labels="y", test_fraction=0.25)
    _, outdir, run = _train(tmp_path, ds)
    run()
    assert (outdir / "model.pt").is_file()
