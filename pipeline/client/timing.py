"""Streamed requests with their timings: time to first chunk, total latency, token count."""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pipeline.client.grpc_client import GrpcClient
from pipeline.client.request import GenerateRequest


@dataclass(frozen=True, slots=True)
class StreamTiming:
    text: str
    num_tokens: int  # the responses' sequence_length: a response can carry several tokens
    ttft_s: float
    latency_s: float


def timed_stream(client: GrpcClient, request: GenerateRequest, on_delta=None) -> StreamTiming:
    """Stream one request; on_delta(text) is called as each chunk arrives."""
    start = time.perf_counter()
    first, parts, num_tokens = None, [], 0
    for response in client.responses(request.arrays(stream=True), count_tokens=True):
        if response.text is None:
            continue
        first = time.perf_counter() if first is None else first
        parts.append(response.text)
        num_tokens += response.num_tokens
        if on_delta is not None:
            on_delta(response.text)
    end = time.perf_counter()
    return StreamTiming("".join(parts), num_tokens, (first or end) - start, end - start)


def stream_concurrently(
    client: GrpcClient, requests: list[GenerateRequest], concurrency: int
) -> tuple[list[StreamTiming], float]:
    """All requests with at most `concurrency` in flight; (timings in order, wall seconds)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        timings = list(pool.map(lambda r: timed_stream(client, r), requests))
    return timings, time.perf_counter() - start
