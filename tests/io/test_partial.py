"""Rows a long job keeps until its output is written (``io.partial``)."""

import math

import numpy as np

from tapmachine.io.partial import KeptRows, file_digest, partial_path, settings_digest


def test_kept_rows_come_back_exactly_and_only_under_their_signature(tmp_path):
    out = tmp_path / "job" / "scores.csv"
    row = {
        "epoch": 3,
        "value": 0.1 + 0.2,  # not a short decimal: must come back to the last bit
        "tiny": 5e-324,
        "missing": math.nan,
        "note": "",
        "count": np.int64(7),
        "share": np.float32(0.25),
    }
    kept = KeptRows(out, settings_digest({"n": 1}))
    assert kept.get("epoch_3") is None
    kept.keep("epoch_3", row)
    again = KeptRows(out, settings_digest({"n": 1})).get("epoch_3")
    assert again["value"] == 0.1 + 0.2 and again["tiny"] == 5e-324 and math.isnan(again["missing"])
    assert again["note"] == "" and again["count"] == 7 and again["share"] == 0.25
    assert KeptRows(out, settings_digest({"n": 2})).get("epoch_3") is None
    # keys of mappings in another order give the same signature
    assert settings_digest({"a": 1, "b": [1, 2]}) == settings_digest({"b": [1, 2], "a": 1})
    kept.discard()
    assert not partial_path(out).exists()


def test_a_damaged_file_of_kept_rows_is_ignored(tmp_path, capsys):
    out = tmp_path / "scores.csv"
    partial_path(out).write_text('{"signature": "s", "key": "a", "row": {"x": 1}}\n{"signa')
    assert KeptRows(out, "s").rows == {}
    assert "not a file of kept rows" in capsys.readouterr().err


def test_file_digest_follows_the_bytes(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    first = file_digest(path)
    path.write_bytes(b"abd")
    assert file_digest(path) != first
    path.write_bytes(b"abc")
    assert file_digest(path) == first
