"""What the engine hands back: per-step stream deltas and whole-request outputs."""

from dataclasses import dataclass

from pipeline.engine.sequence import Sequence


@dataclass(frozen=True, slots=True)
class StreamDelta:
    request_id: str
    token_ids: list[int]  # generated this step (empty when the step ended on eos or a cancel)
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "cancelled" | "error" once finished
    error: str | None = None  # why the request failed (finish_reason "error")
    logprobs: list[float] | None = None  # of token_ids, when the request asked (params.logprobs)


@dataclass(frozen=True, slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens only; eos excluded, stop tokens included
    text: str
    finish_reason: str | None
    arrival_time_s: float  # time.perf_counter() clock
    first_token_time_s: float | None
    finish_time_s: float | None
    logprobs: list[float] | None = None  # of token_ids, when the request asked (params.logprobs)

    @classmethod
    def from_sequence(cls, seq: Sequence, text: str) -> "RequestOutput":
        return cls(
            request_id=seq.request_id,
            prompt_token_ids=seq.prompt_token_ids,
            token_ids=seq.completion_token_ids,
            text=text,
            finish_reason=seq.finish_reason,
            arrival_time_s=seq.arrival_time_s,
            first_token_time_s=seq.first_token_time_s,
            finish_time_s=seq.finish_time_s,
            logprobs=None if seq.logprobs is None else list(seq.logprobs),
        )
