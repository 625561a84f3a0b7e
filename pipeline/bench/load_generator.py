"""Drives a Target with a list of requests at fixed concurrency or at a Poisson request rate.

Times are seconds since `origin_s` (a `time.perf_counter()` value shared with the profiler, so
bench phases and samples line up). A failed request is recorded with its error; the run goes on.
"""

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from pipeline.bench.arrivals import arrival_offsets
from pipeline.bench.records import RequestRecord
from pipeline.bench.target import StreamingTarget
from pipeline.bench.workload import BenchRequest
from pipeline.errors import ConfigError

log = logging.getLogger(__name__)
MODES = ("concurrency", "rate")


def check_load_shape(mode: str, concurrency: int) -> None:
    """The bench knobs both drivers (server and direct) need valid."""
    if mode not in MODES:
        raise ConfigError(f"bench: bench.mode={mode!r} is unknown; use one of {MODES}")
    if concurrency < 1:
        raise ConfigError(
            f"bench: bench.concurrency={concurrency} must be >= 1 (in "
            f"mode=rate it caps the requests in flight)"
        )


class LoadGenerator:
    def __init__(
        self,
        target: StreamingTarget,
        mode: str,
        concurrency: int,
        request_rate: float,
        temperature: float,
        seed: int,
        origin_s: float,
    ) -> None:
        check_load_shape(mode, concurrency)
        self.name = target.name
        self.target = target
        self.mode = mode
        self.concurrency = concurrency
        self.request_rate = request_rate
        self.temperature = temperature
        self.seed = seed
        self.origin_s = origin_s
        self.engine_stats: dict = {}  # a server's engine is not visible from here

    def now(self) -> float:
        return time.perf_counter() - self.origin_s

    def run(self, requests: Sequence[BenchRequest], phase: str) -> list[RequestRecord]:
        """Send every request, wait for all of them, return their records in request order."""
        offsets = arrival_offsets(self.mode, len(requests), self.request_rate, self.seed)
        return self.run_at(requests, offsets, self.now(), phase)

    def run_at(
        self,
        requests: Sequence[BenchRequest],
        offsets: Sequence[float],
        start: float,
        phase: str,
        show_progress: bool | None = None,
    ) -> list[RequestRecord]:
        """run(), each request sent at start + its offset (or once a slot is free); None shows
        progress where the output is a terminal."""
        if not requests:
            return []
        records: list[RequestRecord] = []
        lock = threading.Lock()
        with (
            tqdm(
                total=len(requests),
                desc=f"{self.target.name}:{phase}",
                unit="req",
                leave=False,
                disable=None if show_progress is None else not show_progress,
            ) as bar,
            ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"bench-{phase}") as pool,
        ):
            futures = []
            for request, offset in zip(requests, offsets, strict=True):
                delay = start + offset - self.now()
                if delay > 0:
                    time.sleep(delay)
                record = RequestRecord(
                    request.request_id, len(request.prompt_token_ids), scheduled_s=start + offset
                )
                records.append(record)
                futures.append(pool.submit(self._send, request, record, bar, lock))
            for future in futures:
                future.result()
        log.debug(
            "%s/%s: %d requests in %.2f s",
            self.target.name,
            phase,
            len(records),
            self.now() - start,
        )
        return records

    def _send(
        self, request: BenchRequest, record: RequestRecord, bar: tqdm, lock: threading.Lock
    ) -> None:
        record.start_s = self.now()
        try:
            for chunk in self.target.stream(request, self.temperature, self.seed):
                record.add_chunk(self.now(), chunk.num_tokens)
        except Exception as exc:  # a failed request is a measurement (errors), not a crash
            record.error = f"{type(exc).__name__}: {exc}"[:300]
            log.debug("request %s failed: %s", request.request_id, record.error)
        record.end_s = self.now()
        with lock:
            bar.update(1)
