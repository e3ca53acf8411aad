"""Shared tracking: the tiny DAG (--cores 2) against an `mlflow server` backed by PostgreSQL
(Debian's postgresql on 127.0.0.1, started here) and against the embedded SQLite store; runs,
metric points and artifacts are counted per experiment. On the server the DAG runs once and the
server is killed mid-run: no result file is lost, and `tapmachine track` restores the missing runs
once the server is back, to the same counts."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from services import free_port, require, require_root_and, run_bounded, wait_http
from tiny_ops import prepare, targets

from tapmachine.pipeline.tracking.store import STAGE_RUNS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.workflow
EPOCHS = 3
# What the tiny DAG must leave in the store: FINISHED stage runs per experiment.
EXPECTED_RUNS = {"data": 1, "train": 1, "harvest": 1, "likelihood": 0, "figures": 1}


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL cluster on 127.0.0.1 (trust auth), stopped by its PID afterwards."""
    require_root_and("runuser")
    pg = _pg_bin()
    require(pg is not None, "PostgreSQL is not installed (apt-get install postgresql)")
    base = Path(tempfile.mkdtemp(prefix="tapmachine-pg."))
    base.chmod(0o755)
    shutil.chown(base, "postgres", "postgres")
    data, port = base / "data", free_port()

    def as_postgres(*cmd, timeout=120):
        return run_bounded(["runuser", "-u", "postgres", "--", *map(str, cmd)], timeout=timeout)

    try:
        r = as_postgres(pg / "initdb", "-A", "trust", "-U", "postgres", "-D", data)
        assert r.returncode == 0, r.stdout
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {base}"
        r = as_postgres(
            pg / "pg_ctl", "-D", data, "-o", opts, "-l", base / "pg.log", "-w", "-t", "60", "start"
        )
        assert r.returncode == 0, r.stdout + (base / "pg.log").read_text()

        def new_database(name: str) -> str:
            """A fresh database (one per test: runs of one test never count in another)."""
            r = as_postgres(pg / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "postgres", name)
            assert r.returncode == 0, r.stdout
            return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}"

        yield new_database
    finally:
        pid_file = data / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            _stop(pid, group=False)
        shutil.rmtree(base, ignore_errors=True)


def _stop(pid: int, group: bool = True, sig=signal.SIGTERM, grace: float = 20) -> None:
    kill = os.killpg if group else os.kill
    try:
        kill(pid, sig)
    except ProcessLookupError:
        return
    t0 = time.monotonic()
    while time.monotonic() - t0 < grace:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Server:
    """`mlflow server` on 127.0.0.1 in its own process group; with ``auth`` (the README's recipe)
    the basic-auth app, its users in ``auth["database_uri"]`` and the admin's credentials from
    the environment."""

    def __init__(self, backend: str, artifacts: Path, port: int, log: Path, auth=None):
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend]
        cmd += ["--artifacts-destination", str(artifacts), "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--workers", "1"]
        env = dict(os.environ)
        if auth is not None:
            ini = Path(log).with_suffix(".auth.ini")
            ini.write_text(
                "[mlflow]\ndefault_permission = READ\n"
                f"database_uri = {auth['database_uri']}\n"
                "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            )
            cmd += ["--app-name", "basic-auth"]
            env.update(
                MLFLOW_AUTH_CONFIG_PATH=str(ini),
                MLFLOW_AUTH_ADMIN_USERNAME=auth["user"],
                MLFLOW_AUTH_ADMIN_PASSWORD=auth["password"],
                MLFLOW_FLASK_SERVER_SECRET_KEY=auth["secret"],
            )
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        self.startup_s = wait_http(self.url + "/health", timeout=120, proc=self.proc)

    def stop(self, sig=signal.SIGTERM) -> None:
        _stop(self.proc.pid, sig=sig)
        self.proc.wait(timeout=30)
        self.log.close()


def _snakemake(workdir: Path, uri: str | None, wait: bool = True, credentials=None):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env.pop("MLFLOW_TRACKING_URI", None)
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    if credentials:  # the jobs authenticate as the README says: through the environment
        env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"] = credentials
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(workdir), "--configfile", str(workdir / "config.yaml")]
    cmd += ["--cores", "2", *targets("ops", EPOCHS)]
    if wait:
        return run_bounded(cmd, timeout=400, env=env)
    log = open(workdir / "snakemake.log", "w")  # noqa: SIM115 - the caller waits for the process
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _count(uri: str) -> dict:
    """FINISHED stage runs, metric points and artifacts per experiment, through the client."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    out = {}
    for exp in client.search_experiments():
        if exp.name == "Default":
            continue
        runs = [
            r
            for r in client.search_runs([exp.experiment_id], STAGE_RUNS)
            if r.info.status == "FINISHED"
        ]
        points = sum(
            len(client.get_metric_history(r.info.run_id, key))
            for r in runs
            for key in r.data.metrics
        )
        artifacts = sum(len(client.list_artifacts(r.info.run_id)) for r in runs)
        out[exp.name] = {"runs": len(runs), "points": points, "artifacts": artifacts}
    return out


def _metrics(workdir: Path) -> pd.DataFrame:
    return pd.read_csv(workdir / "results" / "ops" / "models" / "tiny" / "metrics.csv")


def _check_counts(counts: dict, workdir: Path, expected: dict = EXPECTED_RUNS) -> None:
    print({k: v for k, v in counts.items() if v["runs"]})
    assert {k: v["runs"] for k, v in counts.items() if k in expected} == expected
    metrics = _metrics(workdir)
    assert len(metrics) == EPOCHS
    # every epoch's numbers (one point per column per epoch) at least (harvests: runs of their own)
    assert counts["train"]["points"] >= EPOCHS * (len(metrics.columns) - 1)
    assert counts["figures"]["artifacts"] == 3  # fig3.png, .pdf, .csv
    assert counts["harvest"]["artifacts"] == 2  # epoch_3.npz, .csv


def _outputs_complete(workdir: Path) -> None:
    for target in targets("ops", EPOCHS):
        assert (workdir / target).stat().st_size > 0, target
    assert (workdir / "results" / "ops" / "models" / "tiny" / "model.pt").exists()


@pytest.fixture(scope="module")
def sqlite_run(tmp_path_factory):
    """The tiny DAG on the embedded SQLite store (shared by the count and the UI tests)."""
    work = prepare(tmp_path_factory.mktemp("sqlite"), "ops", EPOCHS)
    result = _snakemake(work, None)
    assert result.returncode == 0, result.stdout[-4000:]
    return work, result.stdout


def test_embedded_sqlite_store_counts(sqlite_run):
    work, stdout = sqlite_run
    assert "tapmachine summary: success" in stdout
    print(stdout[stdout.index("tapmachine summary") :])
    _outputs_complete(work)
    _check_counts(_count(f"sqlite:///{work}/results/mlflow/mlflow.db"), work)


def _chromium(url: str, out_dir: Path, shot: Path, shown, attempts: int = 6) -> str:
    """The text of ``url`` rendered by headless Chromium, once ``shown(text)`` holds (a page
    whose data is still loading is tried again, up to ``attempts`` times); then a screenshot."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    base = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"]
    base += [f"--user-data-dir={out_dir / 'chromium-profile'}", "--virtual-time-budget=10000"]
    for _ in range(attempts):
        dom = run_bounded([*base, "--dump-dom", url], timeout=120)
        assert dom.returncode == 0, dom.stdout[-2000:]
        text = dom.stdout + "\n" + re.sub(r"<[^>]+>", " ", dom.stdout)
        if shown(text):
            break
    else:
        pytest.fail(f"{url} never showed what was expected:\n{text[-3000:]}")
    r = run_bounded([*base, f"--screenshot={shot}", url], timeout=120)
    assert r.returncode == 0 and shot.stat().st_size > 10000, r.stdout[-2000:]
    return text


def test_mlflow_ui_in_headless_chromium(sqlite_run):
    """`mlflow ui` on the store of the tiny run, seen by a browser: the runs table (on its
    machine-learning view), the model run's metric charts and the figure artifact."""
    import mlflow

    require(bool(shutil.which("chromium") or shutil.which("chromium-browser")), "no chromium")
    work, _ = sqlite_run
    uri = f"sqlite:///{work}/results/mlflow/mlflow.db"
    client = mlflow.MlflowClient(uri)
    exps = {e.name: e.experiment_id for e in client.search_experiments()}
    (train,) = client.search_runs([exps["train"]], STAGE_RUNS)
    (fig,) = client.search_runs([exps["figures"]], STAGE_RUNS)
    shots = work / "results" / "ops" / "screenshots"
    shots.mkdir(parents=True)
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    with open(work / "ui.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        from tapmachine.pipeline.tracking.store import ui_link

        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/health", timeout=180, proc=proc)
        # the system metrics (CPU, memory of the training job) have a section of their own
        n_metrics = len([k for k in train.data.metrics if not k.startswith("system/")])

        def table_shown(text):  # the invocation's parent run, its nested training run counted
            return (
                "Run Name" in text
                and "snakemake ops" in text
                and re.search(r"\b2\s+matching runs", text)
            )

        def charts_shown(text):
            counted = re.search(rf"Model metrics\s*\(\s*{n_metrics}\s*\)", text)
            return bool(counted) and text.count("js-plotly-plot") >= 3

        def figure_shown(text):
            return '<img alt="fig3.png" src="blob:' in text

        _chromium(ui_link(base, exps["train"]), work, shots / "runs_table.png", table_shown)
        run_url = f"{base}/#/experiments/{exps['train']}/runs/{train.info.run_id}"
        _chromium(run_url + "/model-metrics", work, shots / "model_metrics.png", charts_shown)
        fig_url = f"{base}/#/experiments/{exps['figures']}/runs/{fig.info.run_id}"
        _chromium(fig_url + "/artifacts/fig3.png", work, shots / "fig3_artifact.png", figure_shown)
        print(f"screenshots in {shots}: {sorted(p.name for p in shots.glob('*.png'))}")
        keep = ROOT / "results" / "screenshots"
        keep.mkdir(parents=True, exist_ok=True)
        for png in shots.glob("*.png"):
            shutil.copy(png, keep / png.name)
        if os.environ.get("TAPMACHINE_UPDATE_SCREENSHOT") == "1":  # the README's picture
            shutil.copy(shots / "model_metrics.png", ROOT / "docs" / "mlflow_ui.png")
    finally:
        _stop(proc.pid)


def test_server_killed_mid_run_loses_no_result_and_replay_restores(tmp_path, postgres):
    """One DAG run against `mlflow server` on PostgreSQL. Data and training are logged live;
    the server is then killed (once training's job has finished, before harvest and Fig. 3
    start): the DAG still finishes, tracking in the jobs that met the dead server was disabled
    after one short try, and `tapmachine track` fills exactly the gaps, so the store ends with
    the full counts (runs, metric points, artifacts) of a run that never lost its server."""
    pytest.importorskip("psycopg")
    port = free_port()
    work = tmp_path / "work"
    prepare(work, "ops", EPOCHS)
    backend = postgres("killed")
    server = Server(backend, tmp_path / "artifacts", port, tmp_path / "server.log")
    killed_at = None
    try:
        proc = _snakemake(work, server.url, wait=False)
        # Snakemake writes a job's benchmark when the job has ended (its MLflow run closed)
        trained = work / "benchmarks" / "ops" / "train" / "tiny.tsv"
        t0 = time.monotonic()
        while not trained.exists() and time.monotonic() - t0 < 300 and proc.poll() is None:
            time.sleep(0.05)
        assert trained.exists(), (work / "snakemake.log").read_text()[-3000:]
        server.stop(sig=signal.SIGKILL)  # mid-run: harvest and Fig. 3 have not started
        killed_at = time.monotonic() - t0
        try:
            rc = proc.wait(timeout=400)
        except subprocess.TimeoutExpired:
            _stop(proc.pid)
            pytest.fail("snakemake did not finish within 400 s of the server's death")
        assert rc == 0, (work / "snakemake.log").read_text()[-4000:]
    finally:
        if server.proc.poll() is None:
            server.stop()
    print(f"server killed {killed_at:.1f} s into the run; the DAG finished without it")
    _outputs_complete(work)
    logs = "".join(p.read_text() for p in (work / "logs").rglob("*.log"))
    assert "tracking disabled for the rest of this job" in logs
    assert "Traceback" not in logs

    server = Server(backend, tmp_path / "artifacts", port, tmp_path / "server2.log")
    try:
        before = _count(server.url)
        live = {k: v["runs"] for k, v in before.items() if k in EXPECTED_RUNS}
        # logged live: binary_mnist and training (with every epoch); harvest and Fig. 3 missed
        assert live == {**EXPECTED_RUNS, "harvest": 0, "figures": 0}, before
        assert before["train"]["points"] >= EPOCHS * (len(_metrics(work).columns) - 1), before
        env = {**os.environ, "MLFLOW_TRACKING_URI": server.url}
        track = [sys.executable, "-m", "tapmachine.pipeline.cli", "track", "--results"]
        track += [str(work / "results" / "ops"), "--data", str(work / "results" / "data")]
        track += ["--store", str(work / "results" / "mlflow")]
        first = run_bounded(track, timeout=300, env=env, cwd=work)
        assert first.returncode == 0, first.stdout
        print(first.stdout.strip().splitlines()[-1])
        second = run_bounded(track, timeout=300, env=env, cwd=work)
        assert second.returncode == 0, second.stdout
        print(second.stdout.strip().splitlines()[-1])
        assert "0 runs replayed" in second.stdout
        after = _count(server.url)
        # data: binary_mnist; the synthetic "mnist" (made by the test, never by a job) has no run
        # record, so it is not replayed
        _check_counts(after, work)
        assert after["train"] == before["train"], (before, after)  # nothing replayed twice
    finally:
        server.stop()


def test_authenticated_server_refuses_anonymous_requests_and_takes_the_dags_runs(
    tmp_path, postgres, monkeypatch
):
    """The README's shared-server recipe: `mlflow server --app-name basic-auth` on PostgreSQL
    (users in a second database), the admin's credentials from the environment. A request
    without credentials, or with a wrong password, is refused (401); the tiny DAG, its jobs
    authenticating through MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, logs every run."""
    import importlib.util
    import urllib.error
    import urllib.request

    pytest.importorskip("psycopg")
    require(
        importlib.util.find_spec("flask_wtf") is not None,
        "Flask-WTF is not installed (pip install -e '.[server]'): no basic-auth app",
    )
    port = free_port()
    work = tmp_path / "work"
    prepare(work, "ops", EPOCHS)
    user, password = "admin", "a-long-test-password-1"
    auth = {
        "database_uri": postgres("auth_users"),
        "user": user,
        "password": password,
        "secret": "test-secret-key",
    }
    server = Server(postgres("auth_runs"), tmp_path / "artifacts", port, tmp_path / "s.log", auth)
    try:
        search = f"{server.url}/api/2.0/mlflow/experiments/search?max_results=5"

        def status(credentials=None) -> int:
            request = urllib.request.Request(search)
            if credentials:
                import base64

                token = base64.b64encode(":".join(credentials).encode()).decode()
                request.add_header("Authorization", f"Basic {token}")
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    return resp.status
            except urllib.error.HTTPError as err:
                return err.code

        assert status() == 401
        assert status((user, "wrong")) == 401
        assert status((user, password)) == 200
        result = _snakemake(work, server.url, credentials=(user, password))
        assert result.returncode == 0, result.stdout[-4000:]
        _outputs_complete(work)
        logs = "".join(p.read_text() for p in (work / "logs").rglob("*.log"))
        assert "tracking disabled" not in logs, logs[-3000:]
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        _check_counts(_count(server.url), work)
    finally:
        server.stop()
