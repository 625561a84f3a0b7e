"""The load generator against an in-memory target that streams a fixed number of tokens."""

import threading
import time

import pytest

from pipeline.bench.client_processes import auto_client_processes, shares
from pipeline.bench.load_generator import LoadGenerator
from pipeline.bench.target import Chunk
from pipeline.bench.workload import BenchRequest
from pipeline.errors import ConfigError


class CountingTarget:
    name = "counting"

    def __init__(self):
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()

    def stream(self, request, temperature, seed):
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if request.request_id.endswith("bad"):
                raise RuntimeError("server said no")
            for _ in range(request.max_tokens):
                time.sleep(0.002)
                yield Chunk(1)
            yield Chunk(0)  # empty final response
        finally:
            with self.lock:
                self.in_flight -= 1


def requests(n, suffix=""):
    return [
        BenchRequest(f"r{i}{suffix if i == 1 else ''}", "p", (1, 2, 3), 4, True) for i in range(n)
    ]


@pytest.mark.parametrize("mode", ["concurrency", "rate"])
def test_all_requests_complete_within_the_concurrency_cap(mode):
    target = CountingTarget()
    gen = LoadGenerator(
        target,
        mode,
        concurrency=3,
        request_rate=500.0,
        temperature=0.0,
        seed=0,
        origin_s=time.perf_counter(),
    )
    records = gen.run(requests(12), "measure")
    assert [r.request_id for r in records] == [f"r{i}" for i in range(12)]
    assert target.max_in_flight <= 3
    assert all(r.is_ok and r.num_output_tokens == 4 for r in records)
    assert all(r.start_s >= r.scheduled_s and r.end_s >= r.last_token_s for r in records)


def test_a_failed_request_is_recorded_not_raised():
    gen = LoadGenerator(CountingTarget(), "concurrency", 2, 1.0, 0.0, 0, time.perf_counter())
    records = gen.run(requests(3, suffix="bad"), "measure")
    assert records[1].error == "RuntimeError: server said no"
    assert records[0].is_ok and records[2].is_ok


def test_bad_mode_and_concurrency_are_config_errors():
    with pytest.raises(ConfigError, match="bench.mode"):
        LoadGenerator(CountingTarget(), "burst", 1, 1.0, 0.0, 0, 0.0)
    with pytest.raises(ConfigError, match="bench.concurrency"):
        LoadGenerator(CountingTarget(), "rate", 0, 1.0, 0.0, 0, 0.0)


@pytest.mark.parametrize(
    "concurrency, cores, expected",
    [(2, 2, 1), (64, 2, 1), (64, 16, 8), (64, 64, 8), (256, 16, 8), (15, 16, 1), (16, 16, 2)],
)
def test_client_processes_one_per_8_streams_on_half_the_cores(concurrency, cores, expected):
    assert auto_client_processes(concurrency, cores) == expected


def test_shares_split_evenly_and_add_up():
    assert shares(64, 8) == [8] * 8
    assert shares(10, 4) == [3, 3, 2, 2]
    assert sum(shares(7, 3)) == 7
