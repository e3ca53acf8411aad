"""The GPU path of the DBM stages: `device: cuda` without CUDA stops the workflow before any job
(one line); DBM training, sampling and completion run on the device (CPU always, CUDA where
there is one; skipped with a line without)."""

import json

import numpy as np
import pytest
import torch
import yaml

from tapmachine.pipeline.configuration import ConfigError, check_device

NO_CUDA = "no CUDA device here: the DBM stages on CUDA are not checked (run on a GPU node)"


def test_check_device_names_the_key_and_the_torch_build(monkeypatch):
    check_device("cpu")  # nothing to check
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError) as info:
        check_device("cuda:1")
    message = str(info.value)
    assert message.startswith("config error at device: 'cuda:1'") and "\n" not in message
    assert torch.__version__ in message and "set device: cpu" in message


@pytest.mark.workflow
def test_cuda_config_without_cuda_fails_before_any_job(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is present: the no-CUDA failure cannot be shown here")
    from tiny_workflow import TINY, snakemake

    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["device"] = "cuda"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--cores", "1")
    assert result.returncode != 0
    assert "config error at device: 'cuda'" in result.stderr
    assert "sees no CUDA device here; set device: cpu" in result.stderr
    assert not (tmp_path / "results").exists()


def _binary_dataset(path, n=300, side=8, seed=0):
    from tapmachine.io import data

    rng = np.random.default_rng(seed)
    x = (rng.random((n, side * side)) < 0.3).astype(np.float32)
    y = rng.integers(0, 10, n)
    ds = data.Dataset(
        x_train=x[:200],
        y_train=y[:200],
        x_test=x[200:],
        y_test=y[200:],
        image_shape=(side, side),
        provenance={"source": "test"},
        name="binary_test",
    )
    data.save_dataset(ds, path)
    return ds


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
        ),
    ],
)
def test_dbm_training_sampling_and_completion_on_the_device(tmp_path, device):
    from tapmachine.figures import ucd_dbm
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.pipeline.stages import ucd_dbm as stage

    _binary_dataset(tmp_path / "binary_test.npz")
    for method, ucd in (("ucd_lmi", {}), ("centered_pcd", {"centering": False})):
        spec = {"method": method, "hidden": [16, 16], "epochs": 2, "batch_size": 50, "ucd": ucd}
        out = tmp_path / method
        machine = stage.train_dbm(
            method, json.loads(json.dumps(spec)), tmp_path / "binary_test.npz", out, device=device
        )
        assert machine.device.type == device
        model = ModelFile.load(out / "model.pt")
        assert all(torch.isfinite(w).all() for w in model.machine_state["weights"])
        assert len((out / "steps.csv").read_text().splitlines()) == 1 + 8  # header + 8 steps
    paths = [tmp_path / "ucd_lmi" / "model.pt"]
    data = [tmp_path / "binary_test.npz"]
    samples = ucd_dbm.samples(paths, data, seed=1, n=16, device=device).table
    assert (samples.loc[samples["kind"] == "drawn", "nearest_train_hamming"] >= 0).all()
    completion = ucd_dbm.completion(paths, data, seed=1, n=4, device=device).table
    assert np.isfinite(completion.loc[completion["kind"] == "drawn", "pixel_error"]).all()
