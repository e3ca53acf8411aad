"""The MLflow model of a trained machine, as a user gets it from a training run: logged with its
params schema, dataset and system metrics, then loaded where ``tapmachine`` is not installed and
its every output checked against the library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from tiny_models import SPEC, bars_and_stripes, settings

from tapmachine.core import tap
from tapmachine.core.seeding import seeded_generator
from tapmachine.io.modelfile import ModelFile
from tapmachine.pipeline.tracking import mlflow_model
from tapmachine.pipeline.tracking import store as tracking
from tapmachine.train import build_machine, train

pytestmark = pytest.mark.slow  # a fresh environment loads the logged model

#: Loads the model with only the interpreter's own library and site-packages on sys.path (no
#: .pth files, so no editable install of tapmachine, and no checkout), then writes every output.
_FRESH = """
import json, sys
sys.path[:] = [p for p in {stdlib} if p] + [{site!r}]
import importlib.util
assert importlib.util.find_spec("tapmachine") is None, "tapmachine importable before loading"
import numpy as np, mlflow.pyfunc
mlflow.set_tracking_uri({uri!r})
model = mlflow.pyfunc.load_model({model_uri!r})
import tapmachine
x = np.load({x!r})
out = {{"tapmachine": tapmachine.__file__}}
for params in {queries!r}:
    out[params["output"]] = model.predict(x, params=params).tolist()
print("RESULT " + json.dumps(out))
"""

QUERIES = [
    {"output": "hidden"},
    {"output": "free_energy"},
    {"output": "tap_log_likelihood"},
    {"output": "reconstruct"},
    {"output": "sample", "n_samples": 7, "seed": 3, "gibbs_steps": 20},
]


@pytest.fixture(scope="module")
def logged(tmp_path_factory, monkeypatch_module):
    """A machine trained 3 epochs, saved as model.pt and logged by a training run."""
    tmp = tmp_path_factory.mktemp("mlflow_model")
    monkeypatch_module.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch_module.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    x = bars_and_stripes().repeat(3, 1).float()
    g = seeded_generator(4, "mlflow")
    machine = build_machine(SPEC, x, 0.01, g)
    machine, history = train(machine, x, settings(epochs=3), g, progress=False)
    model_file = tmp / "model.pt"
    ModelFile.from_machine(machine, "bas", spec=SPEC, history=history).save(model_file)
    manifest = tmp / "store" / "experiments.json"
    tracking.init_store(tmp / "store", manifest)
    with tracking.start_run(manifest, "train", "bas", system_metrics=True) as run:
        time.sleep(2.5)  # two samples of the system metrics
        uri = run.log_machine(model_file, x.numpy(), tmp / "bas.npz", "bas")
    assert uri is not None
    return {
        "tmp": tmp,
        "x": x,
        "machine": ModelFile.load(model_file).machine(),
        "history": history,
        "run_id": run.run_id,
        "model_uri": uri,
        "tracking_uri": tracking.default_tracking_uri(tmp / "store"),
    }


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _fresh_predictions(logged) -> dict:
    np.save(logged["tmp"] / "x.npy", logged["x"].numpy())
    stdlib = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    stdlib += [str(Path(sysconfig.get_paths()["stdlib"]) / "lib-dynload")]
    script = _FRESH.format(
        stdlib=stdlib,
        site=sysconfig.get_paths()["purelib"],
        uri=logged["tracking_uri"],
        model_uri=logged["model_uri"],
        x=str(logged["tmp"] / "x.npy"),
        queries=QUERIES,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=logged["tmp"],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def test_fresh_environment_serves_every_output_as_the_library_computes_it(logged):
    out = _fresh_predictions(logged)
    # the package came with the model (code_paths), not from this checkout or an install
    assert "/code/tapmachine/" in out["tapmachine"], out["tapmachine"]
    machine, x = logged["machine"], logged["x"]
    state = tap.clamped_state(machine, x)
    np.testing.assert_allclose(out["hidden"], state.a[-1].numpy(), rtol=1e-6)
    # an RBM's free energy is exact: F(x) = -ln sum_h P*(x, h)
    np.testing.assert_allclose(
        out["free_energy"], machine.free_energy_visible(x).numpy(), rtol=1e-5, atol=1e-4
    )
    # over training's evaluation rows, the mean per-row TAP log-likelihood is the recorded tap_ll
    last = logged["history"][-1]
    n_eval = settings().eval_samples
    assert np.mean(out["tap_log_likelihood"][:n_eval]) == pytest.approx(last["tap_ll"], abs=1e-5)
    expected = (tap.data_log_term(machine, x) - last["log_z_tap"]) / sum(machine.sizes)
    np.testing.assert_allclose(out["tap_log_likelihood"], expected.numpy(), rtol=1e-5)
    recon = machine.visible.mean(state.a[1] @ machine.W.T)
    np.testing.assert_allclose(out["reconstruct"], recon.numpy(), rtol=1e-6)
    g = torch.Generator().manual_seed(3)
    samples = mlflow_model.gibbs_samples(machine, x, 7, 20, g)
    np.testing.assert_array_equal(np.asarray(out["sample"]), samples.numpy())
    assert set(np.unique(out["sample"])) <= {0.0, 1.0}


def test_model_is_logged_with_params_schema_pinned_requirements_dataset_and_system_metrics(
    logged,
):
    from importlib.metadata import version

    mlflow.set_tracking_uri(logged["tracking_uri"])
    info = mlflow.models.get_model_info(logged["model_uri"])
    params = {p.name: p.default for p in info.signature.params}
    assert params == mlflow_model.PARAMS
    local = Path(mlflow.artifacts.download_artifacts(logged["model_uri"]))
    reqs = (local / "requirements.txt").read_text().split()
    assert f"torch=={version('torch').split('+')[0]}" in reqs
    assert f"numpy=={version('numpy')}" in reqs and f"mlflow=={version('mlflow')}" in reqs
    assert not any(r.startswith("tapmachine") for r in reqs)
    run = mlflow.MlflowClient().get_run(logged["run_id"])
    (ds_input,) = run.inputs.dataset_inputs
    expected = mlflow.data.from_numpy(logged["x"].numpy(), source="x", name="bas")
    assert ds_input.dataset.digest == expected.digest
    assert json.loads(ds_input.dataset.profile)["features_shape"] == list(logged["x"].shape)
    assert any(k.startswith("system/cpu_utilization") for k in run.data.metrics), run.data.metrics
    assert any(k.startswith("system/system_memory") for k in run.data.metrics)


def test_unknown_output_is_refused(logged):
    with pytest.raises(ValueError, match="not one of hidden"):
        mlflow_model.predict(logged["machine"], logged["x"], {"output": "energy"})
