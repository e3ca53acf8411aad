import os

import numpy as np
import pytest

from tapmachine.io.files import atomic_write, write_csv


def test_atomic_write_replaces_whole_file_with_open_permissions(tmp_path):
    path = tmp_path / "sub" / "out.csv"
    atomic_write(path, lambda fh: fh.write("a,b\r\n1,2\n"), text=True)
    assert path.read_bytes() == b"a,b\r\n1,2\n"  # newline="" keeps what the writer wrote
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
    atomic_write(path, lambda fh: fh.write(b"new"), fsync=True)
    assert path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["out.csv"]


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"old")

    def half_then_fail(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, half_then_fail)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_write_csv_takes_every_key_in_first_seen_order(tmp_path):
    path = write_csv([{"a": 1, "b": 2}, {"b": 3, "c": 4}], tmp_path / "t.csv")
    assert path.read_text().splitlines() == ["a,b,c", "1,2,", ",3,4"]
    write_csv([], tmp_path / "empty.csv", fields=["x", "y"])
    assert (tmp_path / "empty.csv").read_bytes() == b"x,y\r\n"


def test_damage_finds_cut_off_archives_and_csvs(tmp_path):
    import numpy as np

    from tapmachine.io.files import damage, damaged, set_aside_damaged

    npz = tmp_path / "a.npz"
    np.savez(npz, x=np.arange(1000))
    csv_path = write_csv([{"a": 1, "b": "x,y"}, {"a": 2, "b": "z"}], tmp_path / "t.csv")
    assert damage(npz) is None and damage(csv_path) is None
    whole = npz.read_bytes()
    npz.write_bytes(whole[: len(whole) // 2])
    csv_path.write_bytes(csv_path.read_bytes()[:-4])
    assert "zip" in damage(npz)
    assert "cut off" in damage(csv_path)
    whole_csv = write_csv([{"a": 1}], tmp_path / "whole.csv")
    gone = tmp_path / "gone.npz"
    listed = [npz, csv_path, whole_csv, gone]
    assert [p.name for p, _ in damaged(listed)] == ["a.npz", "t.csv"]
    untouched = ["a.npz", "t.csv", "whole.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == untouched
    whole_csv.unlink()
    found = set_aside_damaged([npz, csv_path])
    assert [p.name for p, _ in found] == ["a.npz", "t.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz.corrupt", "t.csv.corrupt"]


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_an_npz_arrays_shape_is_read_from_its_header(tmp_path, save):
    from tapmachine.io.files import npz_array_shape

    path = tmp_path / "data.npz"
    save(path, x_train=np.zeros((37, 11), np.float32), y=np.arange(5), s=np.float64(1.0))
    assert npz_array_shape(path, "x_train") == (37, 11)
    assert npz_array_shape(path, "y") == (5,)
    assert npz_array_shape(path, "s") == ()
    with pytest.raises(ValueError, match=r"data\.npz: no array 'x_test'"):
        npz_array_shape(path, "x_test")
    with pytest.raises(FileNotFoundError):  # Snakemake sizes a job whose input is yet to be made
        npz_array_shape(tmp_path / "later.npz", "x_train")
    (tmp_path / "text.npz").write_text("not an archive")
    with pytest.raises(ValueError, match=r"text\.npz: cannot read the header of 'x_train'"):
        npz_array_shape(tmp_path / "text.npz", "x_train")
