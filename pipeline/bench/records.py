"""What one benchmark request looked like from the client's side: when it was sent, when each
streamed chunk arrived, how many tokens it carried, and how it ended."""

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    num_input_tokens: int
    scheduled_s: float  # when the load generator meant to send it (Poisson arrival or slot free)
    start_s: float = 0.0  # when it was actually sent
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_num_tokens: list[int] = field(default_factory=list)
    end_s: float = 0.0
    error: str | None = None

    def add_chunk(self, time_s: float, num_tokens: int) -> None:
        self.chunk_times_s.append(time_s)
        self.chunk_num_tokens.append(num_tokens)

    @property
    def is_ok(self) -> bool:
        return self.error is None

    @property
    def num_output_tokens(self) -> int:
        return sum(self.chunk_num_tokens)

    @property
    def first_token_s(self) -> float | None:
        """Arrival of the first chunk that carried a token (empty final responses do not count)."""
        for time_s, num_tokens in zip(self.chunk_times_s, self.chunk_num_tokens, strict=True):
            if num_tokens > 0:
                return time_s
        return None

    @property
    def last_token_s(self) -> float | None:
        for time_s, num_tokens in zip(
            reversed(self.chunk_times_s), reversed(self.chunk_num_tokens), strict=True
        ):
            if num_tokens > 0:
                return time_s
        return None

    @property
    def ttft_s(self) -> float | None:
        first = self.first_token_s
        return None if first is None else first - self.start_s

    @property
    def itl_s(self) -> float | None:
        """Mean gap per token after the first (TPOT, as trtllm-bench and GenAI-Perf define ITL);
        robust to chunks that carry several tokens."""
        first, last = self.first_token_s, self.last_token_s
        if first is None or last is None or self.num_output_tokens < 2:
            return None
        return (last - first) / (self.num_output_tokens - 1)

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def queue_delay_s(self) -> float:
        """Time the request waited in the client for a free slot after its planned arrival."""
        return self.start_s - self.scheduled_s

    def to_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "num_input_tokens": self.num_input_tokens,
            "num_output_tokens": self.num_output_tokens,
            "scheduled_s": self.scheduled_s,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "ttft_s": self.ttft_s,
            "itl_s": self.itl_s,
            "e2e_s": self.e2e_s,
            "error": self.error,
        }
