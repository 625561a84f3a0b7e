"""Streamed requests with their timings: time to first chunk, total latency, chunk count."""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pipeline.client.request import GenerateRequest


@dataclass(frozen=True, slots=True)
class StreamTiming:
    text: str
    num_chunks: int  # non-empty text responses: one per generated token for the torch engine
    ttft_s: float
    latency_s: float


def timed_stream(client, request: GenerateRequest, on_delta=None) -> StreamTiming:
    """Stream one request; on_delta(text) is called as each chunk arrives."""
    start = time.perf_counter()
    first, parts = None, []
    for delta in client.stream(request):
        first = time.perf_counter() if first is None else first
        parts.append(delta)
        if on_delta is not None:
            on_delta(delta)
    end = time.perf_counter()
    return StreamTiming(
        "".join(parts), sum(1 for p in parts if p), (first or end) - start, end - start
    )


def stream_concurrently(
    client, requests: list[GenerateRequest], concurrency: int
) -> tuple[list[StreamTiming], float]:
    """All requests with at most `concurrency` in flight; (timings in order, wall seconds)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        timings = list(pool.map(lambda r: timed_stream(client, r), requests))
    return timings, time.perf_counter() - start
