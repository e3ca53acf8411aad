"""What a job asks of a cluster: a harvest's memory from its dataset and machine, and the time of
a job that starts over."""

import numpy as np
import pytest

from tapmachine.pipeline.job_resources import job_memory_mb, memory_mb, runtime_minutes


def test_a_harvest_is_sized_by_its_starts_and_every_layers_units(tmp_path):
    data = tmp_path / "faces.npz"
    np.savez_compressed(data, x_train=np.zeros((80, 361), np.float32))
    # n_init beyond the images, or None, starts from every image; the visible units come from
    # the data, the hidden ones from every hidden layer
    assert job_memory_mb(data, None, [256]) == memory_mb(80, 361 + 256)
    assert job_memory_mb(data, 10_000, [256]) == memory_mb(80, 361 + 256)
    assert job_memory_mb(data, 20, [100, 50]) == memory_mb(20, 361 + 150)
    assert memory_mb(20, 511) < memory_mb(80, 617)


def test_the_ask_covers_the_measured_paper_size_harvests():
    # peak resident sets measured on real MNIST's 784 x 500 RBM (float64): the ask covers each
    # with room, and grows at least as fast as they do
    measured_mb = {2000: 1548, 6000: 2052, 10000: 2502}
    for starts, peak in measured_mb.items():
        assert memory_mb(starts, 784 + 500) >= 1.2 * peak
    slope = (measured_mb[10000] - measured_mb[2000]) / 8000
    assert (memory_mb(10000, 1284) - memory_mb(2000, 1284)) / 8000 >= slope


def test_bad_sizes_and_attempts_are_refused():
    with pytest.raises(ValueError, match="starts and units >= 1"):
        memory_mb(0, 784)
    with pytest.raises(ValueError, match="attempt counts from 1"):
        runtime_minutes(60, 0)


def test_a_rerun_job_gets_twice_the_time_of_the_last_attempt():
    assert [runtime_minutes(60, attempt) for attempt in (1, 2, 3)] == [60, 120, 240]
