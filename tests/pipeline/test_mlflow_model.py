"""The MLflow model of a trained machine, as a user gets it from a training run: logged from
code with its params schema, dataset and system metrics, registered under its model's name in a
real SQLite store, then loaded by ``models:/NAME/latest`` where ``tapmachine`` is not installed
and its every output checked against the library; served by ``mlflow models serve``, which
answers rows it cannot score with HTTP 400 and one line. A DBM trained by the UCD stage is
logged and registered the same way, with its own outputs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
import yaml
from tiny_models import SPEC, bars_and_stripes, settings

from tapmachine.core import tap
from tapmachine.core.seeding import seeded_generator
from tapmachine.io.modelfile import ModelFile
from tapmachine.pipeline.tracking import environment, mlflow_model
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


CONFIG_DIGEST = "0123abcd"


@pytest.fixture(scope="module")
def logged(tmp_path_factory, monkeypatch_module):
    """A machine trained 3 epochs, saved as model.pt and logged by a training run of a
    workflow job (its config digest in the environment, as Snakemake sets it)."""
    tmp = tmp_path_factory.mktemp("mlflow_model")
    monkeypatch_module.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch_module.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    monkeypatch_module.setenv(
        environment.VARIABLE, json.dumps({"config_digest": CONFIG_DIGEST, "run_name": "default"})
    )
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
        with _captured_warnings() as warnings:
            uri = run.log_machine(model_file, x.numpy(), tmp / "bas.npz", "bas", {"sha256": "ab"})
    assert uri is not None
    return {
        "tmp": tmp,
        "x": x,
        "machine": ModelFile.load(model_file).machine(),
        "history": history,
        "run_id": run.run_id,
        "model_uri": uri,
        "tracking_uri": tracking.default_tracking_uri(tmp / "store"),
        "warnings": warnings,
    }


@contextlib.contextmanager
def _captured_warnings():
    """The WARNING records MLflow's loggers emit inside the block (as a training job's log
    shows them)."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep(logging.WARNING)
    logger = logging.getLogger("mlflow")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


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
        model_uri="models:/bas/latest",
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
    assert {t.key: t.value for t in ds_input.tags}["sha256"] == "ab"


def test_model_is_logged_from_code_and_registered_under_its_name_with_commit_and_digest(logged):
    """Models-from-code: the MLmodel names served_model.py, no pickle is written and MLflow
    does not warn that loading one may execute arbitrary code. The version of ``bas`` carries
    the run, its git commit (this checkout's HEAD) and the config digest."""
    mlflow.set_tracking_uri(logged["tracking_uri"])
    local = Path(mlflow.artifacts.download_artifacts(logged["model_uri"]))
    flavor = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"]
    assert Path(flavor["model_code_path"]).name == "served_model.py"
    assert not list(local.rglob("*.pkl")) and "python_model" not in flavor
    assert not [w for w in logged["warnings"] if "arbitrary code" in w], logged["warnings"]
    assert mlflow.models.get_model_info(logged["model_uri"]).name == "bas"
    client = mlflow.MlflowClient()
    (version,) = client.search_model_versions("name = 'bas'")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    assert version.tags == {
        "run_id": logged["run_id"],
        "git_commit": head,
        "config_digest": CONFIG_DIGEST,
        "tapmachine.run_name": "default",
    }
    assert version.run_id == logged["run_id"]
    assert f"git commit {head}, config digest {CONFIG_DIGEST}" in version.description
    loaded = mlflow.pyfunc.load_model("models:/bas/latest")
    np.testing.assert_allclose(
        loaded.predict(logged["x"].numpy(), params={"output": "free_energy"}),
        logged["machine"].free_energy_visible(logged["x"]).numpy(),
        rtol=1e-5,
        atol=1e-4,
    )


def test_unknown_output_is_refused(logged):
    with pytest.raises(ValueError, match="not one of hidden"):
        mlflow_model.predict(logged["machine"], logged["x"], {"output": "energy"})


def test_a_row_outside_the_visible_support_is_refused_naming_row_and_column(logged):
    x = logged["x"].numpy().copy()
    x[3, 5] = 2.0
    with pytest.raises(mlflow_model.RefusedInput) as info:
        mlflow_model.predict(logged["machine"], x, {"output": "free_energy"})
    assert str(info.value) == (
        "row 3, column 5: 2 is outside {0, 1}, the values of the model's visible units"
    )
    x[3, 5] = np.nan
    with pytest.raises(mlflow_model.RefusedInput, match="row 3, column 5: nan is outside"):
        mlflow_model.predict(logged["machine"], x, {"output": "sample"})


@pytest.fixture(scope="module")
def served(logged):
    """``mlflow models serve -m models:/bas/latest`` on a free port of 127.0.0.1."""
    from services import free_port, wait_http

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MLFLOW_TRACKING_URI"] = logged["tracking_uri"]
    log = open(logged["tmp"] / "serve.log", "w")  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/bas/latest",
           "--env-manager", "local", "--host", "127.0.0.1", "-p", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            cwd=logged["tmp"], start_new_session=True)  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/ping", 180, proc)
        yield f"http://127.0.0.1:{port}/invocations"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()


def _post(url: str, body: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_served_model_answers_and_refuses_what_it_cannot_score_with_400_and_one_line(
    logged, served
):
    """Over HTTP: a good request is scored as the library scores it; a row of 2.0 given to
    binary visible units and an unknown output are answered 400 with a one-line message and no
    stack trace."""
    x = logged["x"].numpy()
    status, body = _post(served, {"inputs": x[:3].tolist(), "params": {"output": "free_energy"}})
    assert status == 200, body
    expected = logged["machine"].free_energy_visible(logged["x"][:3]).numpy()
    np.testing.assert_allclose(body["predictions"], expected, rtol=1e-5, atol=1e-4)
    bad_row = [[2.0] * x.shape[1]]
    status, body = _post(served, {"inputs": bad_row, "params": {"output": "free_energy"}})
    assert (status, body["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    assert body["message"] == (
        "row 0, column 0: 2 is outside {0, 1}, the values of the model's visible units"
    )
    assert "stack_trace" not in body
    status, body = _post(served, {"inputs": x[:1].tolist(), "params": {"output": "energy"}})
    assert (status, body["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    assert body["message"] == (
        "output 'energy' is not one of hidden, free_energy, tap_log_likelihood, reconstruct, sample"
    )
    assert "stack_trace" not in body
    assert "Traceback" not in (logged["tmp"] / "serve.log").read_text()


@pytest.fixture(scope="module")
def dbm(tmp_path_factory, monkeypatch_module):
    """A DBM trained one epoch by the UCD stage (``ucd train-dbm``) on 8 x 8 binary images,
    its run logged to a real SQLite store."""
    from tapmachine.io import data
    from tapmachine.pipeline.stages import ucd_dbm

    tmp = tmp_path_factory.mktemp("dbm_model")
    monkeypatch_module.delenv("MLFLOW_TRACKING_URI", raising=False)
    rng = np.random.default_rng(0)
    x = (rng.random((60, 64)) < 0.3).astype(np.float32)
    y = np.zeros(60, np.int64)
    ds = data.Dataset(x[:40], y[:40], x[40:], y[40:], (8, 8), {"source": "test"}, "dots")
    data.save_dataset(ds, tmp / "dots.npz")
    manifest = tmp / "store" / "experiments.json"
    tracking.init_store(tmp / "store", manifest)
    spec = {"method": "ucd_lmi", "hidden": [12, 12], "epochs": 1, "batch_size": 20}
    ucd_dbm.train_dbm("ucd_lmi", spec, tmp / "dots.npz", tmp / "model", manifest=manifest)
    mlflow.set_tracking_uri(tracking.default_tracking_uri(tmp / "store"))
    return {"x": x[40:], "machine": ModelFile.load(tmp / "model" / "model.pt").machine()}


def test_dbm_is_registered_and_samples_completes_and_scores(dbm):
    from tapmachine.ucd import dbm as dbm_module

    model = mlflow.pyfunc.load_model("models:/dots_ucd_lmi/latest")
    params = {p.name: p.default for p in model.metadata.signature.params}
    assert params == mlflow_model.DBM_PARAMS
    x = dbm["x"]
    samples = model.predict(x[:2], params={"output": "sample", "n_samples": 5, "seed": 1})
    assert samples.shape == (5, 64) and set(np.unique(samples)) <= {0.0, 1.0}
    again = model.predict(x[:2], params={"output": "sample", "n_samples": 5, "seed": 1})
    np.testing.assert_array_equal(samples, again)
    masked = x[:4].copy()
    masked[:, 32:] = np.nan  # the lower half is missing
    completed = model.predict(masked, params={"output": "complete"})
    assert completed.shape == (4, 64) and set(np.unique(completed)) <= {0.0, 1.0}
    np.testing.assert_array_equal(completed[:, :32], x[:4, :32])  # what was seen is kept
    free = model.predict(x, params={"output": "free_energy"})
    machine = dbm["machine"]
    v = dbm_module.data_for(machine, torch.as_tensor(x))
    np.testing.assert_allclose(free, -tap.data_log_term(machine, v).numpy(), rtol=1e-5)
    with pytest.raises(mlflow.exceptions.MlflowException, match="nan is outside"):
        model.predict(masked, params={"output": "free_energy"})
    with pytest.raises(mlflow.exceptions.MlflowException, match="not one of sample, complete"):
        model.predict(x, params={"output": "hidden"})
