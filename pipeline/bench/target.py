"""What the load generator drives: something that streams one request's output in chunks.

Two implementations: `DirectTarget` (the engine in this process) and `ServerTarget` (the Triton
ensemble over gRPC streaming). Both report token counts per chunk, so metrics are computed the
same way for either, and the Triton overhead is a like-for-like ratio.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from pipeline.bench.workload import BenchRequest


@dataclass(frozen=True, slots=True)
class Chunk:
    num_tokens: int
    text: str = ""
    token_ids: tuple[int, ...] = ()


class Target(Protocol):
    name: str  # "direct" | "server"

    def stream(self, request: BenchRequest, temperature: float, seed: int) -> Iterator[Chunk]:
        """Send one request and yield its chunks as they arrive; raise on a failed request."""
