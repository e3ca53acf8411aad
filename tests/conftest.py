"""Shared test settings."""

import pytest
import torch

# Tiny models gain nothing from intra-op threads, and on a loaded 2-core machine OpenMP barriers
# turn each microsecond matmul into milliseconds.
torch.set_num_threads(1)


def pytest_collection_modifyitems(items):
    """A test that runs the real Snakemake engine is slow too."""
    for item in items:
        if item.get_closest_marker("workflow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _figures_read_at_print_size(monkeypatch):
    """Every figure a test draws (each ``FigureResult`` made, from whatever tiny outputs the test
    built) is checked when the test ends (``figures.legibility.problems``): no two pieces of text
    overlap, none is cut off at the edge, no title runs past two lines, no text or width beyond
    print size, no legend covers data (lines between their vertices too, error bars, scatter
    points, bands, bars) and no two axes overlap (colour bars included; twins and insets
    excepted). The figure tests together draw every figure of both papers."""
    from tapmachine.figures import common, legibility

    made = []
    init = common.FigureResult.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self.figure)

    monkeypatch.setattr(common.FigureResult, "__init__", record)
    yield
    found = [f"{fig.get_suptitle()[:60]!r}: {p}" for fig in made for p in legibility.problems(fig)]
    assert not found, "\n".join(found)


@pytest.fixture(autouse=True)
def _no_inherited_tracking_uri(monkeypatch):
    """Each test starts without MLFLOW_TRACKING_URI, and whatever it sets is undone afterwards.

    ``mlflow.set_tracking_uri`` also writes the variable into ``os.environ`` (so that subprocesses
    see it); without this, a test that tracks in-process would point every later test's Snakemake
    subprocess at its own temporary store.
    """
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def cycling_rbm():
    """An 8 x 3 binary RBM (strong random couplings) and 50 random binary rows from which the TAP
    iteration at damping 0.5 converges from none within 2,000 iterations, and at 0.95 from all
    (found by a search over seeds; the tests check both)."""
    from tapmachine.core.machine import BoltzmannMachine
    from tapmachine.core.priors import Bernoulli

    g = torch.Generator().manual_seed(18)
    dt = torch.float64
    W = 3.0 * torch.randn(8, 3, dtype=dt, generator=g)
    visible = Bernoulli(torch.randn(8, dtype=dt, generator=g))
    hidden = Bernoulli(torch.randn(3, dtype=dt, generator=g))
    x = (torch.rand(50, 8, generator=g, dtype=dt) < 0.5).to(dt)
    return BoltzmannMachine((visible, hidden), (W,)), x
