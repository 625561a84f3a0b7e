"""What a bench measures: a target gives the generator that loads it, which returns one
RequestRecord per request (send time, chunk arrival times and token counts, end, error).

`ServerTarget` streams each request over gRPC (grpc_streams) from the threaded LoadGenerator;
`DirectTarget` has DirectDriver step the engine itself. Both fill the same records, so the
metrics are computed the same way for either, and the Triton overhead is a like-for-like ratio.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.bench.records import RequestRecord
from pipeline.bench.workload import BenchRequest


@dataclass(frozen=True, slots=True)
class Chunk:
    num_tokens: int  # tokens one streamed response carried (0 for an empty final response)


class Generator(Protocol):
    name: str
    engine_stats: dict  # after run(): the engine's peaks (direct only; {} through a server)

    def now(self) -> float:
        """Seconds since the origin shared with the profiler."""

    def run(self, requests: Sequence[BenchRequest], phase: str) -> list[RequestRecord]:
        """Send every request (per the load mode), wait for all; records in request order."""


class Target(Protocol):
    name: str  # "direct" | "server"

    def generator(self, bench, origin_s: float) -> Generator:
        """The load generator for this target with the bench's load settings."""


class StreamingTarget(Protocol):
    name: str

    def stream(self, request: BenchRequest, temperature: float, seed: int) -> Iterator[Chunk]:
        """Send one request and yield its chunks as they arrive; raise on a failed request."""
