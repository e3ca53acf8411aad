"""Helpers for the tests that start real services (SLURM, PostgreSQL, mlflow server, Chromium):
when they are missing, the test is skipped on a developer's machine and fails in CI, where
``.ci/run`` installs them and sets TAPMACHINE_REQUIRE_SERVICES=1. Not a test module itself."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest


def require(condition: bool, what: str) -> None:
    if condition:
        return
    if os.environ.get("TAPMACHINE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} (TAPMACHINE_REQUIRE_SERVICES=1: CI must provide it)")
    pytest.skip(what)


def require_root_and(*executables: str) -> None:
    require(os.geteuid() == 0, "needs root")
    for exe in executables:
        require(Path(exe).exists() or shutil.which(exe) is not None, f"{exe} is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bounded(cmd, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; past ``timeout`` send SIGTERM (so its traps clean
    up), then SIGKILL to the group 60 s later. Output is captured as text."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kwargs,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{cmd[0]} ran past {timeout} s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> float:
    """Seconds until ``url`` answers 200; fails past ``timeout`` or if ``proc`` exits."""
    import urllib.request

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - t0
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {timeout} s")
