"""Shared test settings."""

import pytest
import torch

# Tiny models gain nothing from intra-op threads, and on a loaded 2-core machine OpenMP barriers
# turn each microsecond matmul into milliseconds.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_inherited_tracking_uri(monkeypatch):
    """Each test starts without MLFLOW_TRACKING_URI, and whatever it sets is undone afterwards.

    ``mlflow.set_tracking_uri`` also writes the variable into ``os.environ`` (so that subprocesses
    see it); without this, a test that tracks in-process would point every later test's Snakemake
    subprocess at its own temporary store.
    """
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
