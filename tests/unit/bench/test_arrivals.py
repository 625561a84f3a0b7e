import statistics

import pytest

from pipeline.bench.arrivals import poisson_arrival_times
from pipeline.errors import ConfigError


def test_poisson_gaps_have_the_requested_mean_and_are_seeded():
    times = poisson_arrival_times(4000, rate_per_s=8.0, seed=3)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert times[0] == 0.0 and all(g >= 0 for g in gaps)
    assert statistics.mean(gaps) == pytest.approx(1 / 8.0, rel=0.06)
    # exponential: the standard deviation equals the mean
    assert statistics.stdev(gaps) == pytest.approx(1 / 8.0, rel=0.1)
    assert times == poisson_arrival_times(4000, 8.0, seed=3)
    assert times != poisson_arrival_times(4000, 8.0, seed=4)


def test_nonpositive_rate_is_a_config_error():
    with pytest.raises(ConfigError, match="bench.request_rate"):
        poisson_arrival_times(3, 0.0, seed=0)
