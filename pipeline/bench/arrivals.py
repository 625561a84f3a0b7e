"""Planned send times for each load mode, in seconds from the start of a phase."""

import random

from pipeline.errors import ConfigError


def poisson_arrival_times(num_requests: int, rate_per_s: float, seed: int) -> list[float]:
    """Arrivals of a Poisson process: exponential gaps with mean 1/rate; the first one at t=0 so
    a phase never opens with idle time."""
    if rate_per_s <= 0:
        raise ConfigError(
            f"bench: bench.request_rate={rate_per_s} must be > 0 req/s in "
            f"bench.mode=rate (or use bench.mode=concurrency)"
        )
    rng = random.Random(seed)
    times, now = [], 0.0
    for n in range(num_requests):
        if n:
            now += rng.expovariate(rate_per_s)
        times.append(now)
    return times


def arrival_offsets(mode: str, num_requests: int, request_rate: float, seed: int) -> list[float]:
    """Seconds after the start each request is due: Poisson arrivals (rate), all at once
    (concurrency: the slots pace them)."""
    if mode == "rate":
        return poisson_arrival_times(num_requests, request_rate, seed)
    return [0.0] * num_requests
