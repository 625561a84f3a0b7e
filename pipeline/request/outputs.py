"""What the engine hands back: per-step stream deltas and whole-request outputs."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamDelta:
    request_id: str
    token_ids: list[int]  # generated this step (empty when the step ended on eos or a cancel)
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "cancelled" | "error" once finished
    error: str | None = None  # why the request failed (finish_reason "error")
    logprobs: list[float] | None = None  # of token_ids, when the request asked (params.logprobs)
    num_cached_tokens: int = 0  # on the final delta: prompt tokens the prefix cache held


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
    num_cached_tokens: int = 0  # prompt tokens the prefix cache held (not computed)
