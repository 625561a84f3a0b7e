"""What the engine hands back: per-step stream deltas and whole-request outputs."""

from dataclasses import dataclass

import numpy as np

# one position's likeliest tokens: (token id, log probability), likeliest first
TopLogprobs = tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class PromptScores:
    """What the prefill computed of a prompt's positions, for the requests that asked."""

    # each prompt token's log probability given the tokens before it; None for the first
    logprobs: list[float | None] | None = None  # params.prompt_logprobs set
    top_logprobs: list[TopLogprobs] | None = None  # its N likeliest alternatives (first: ())
    context_logits: np.ndarray | None = None  # [prompt_len, V] float32 (return_context_logits)


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """One request's times (time.perf_counter(): CLOCK_MONOTONIC, the clock TensorRT-LLM's
    steady_clock timestamps read on Linux) and KV-cache blocks, for return_perf_metrics."""

    arrival_time_s: float  # the request reached the engine
    first_scheduled_time_s: float  # first admitted to the running batch
    first_token_time_s: float  # its first token on the host
    last_token_time_s: float  # its last token on the host
    num_total_blocks: int  # KV-cache blocks its tokens took
    num_reused_blocks: int = 0  # of them, found in the cache (no prefix cache: 0)


@dataclass(frozen=True, slots=True)
class BeamOutput:
    """One of a beam-search request's beams (params.beam_width > 1), as TensorRT-LLM returns
    each beam: its generated tokens (an end token is not kept), their log probabilities, the
    cumulative log probability (an end token's included) and the length-penalized score that
    ranks it."""

    token_ids: list[int]
    cum_logprob: float
    logprobs: list[float]
    finish_reason: str
    score: float


@dataclass(frozen=True, slots=True)
class StreamDelta:
    request_id: str
    token_ids: list[int]  # generated this step (empty when the step ended on eos or a cancel)
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "cancelled" | "error" once finished
    error: str | None = None  # why the request failed (finish_reason "error")
    logprobs: list[float] | None = None  # of token_ids, when the request asked (params.logprobs)
    num_cached_tokens: int = 0  # on the final delta: prompt tokens the prefix cache held
    top_logprobs: list[TopLogprobs] | None = None  # of token_ids (params.logprobs > 0)
    prompt: PromptScores | None = None  # on the request's first delta (params.scores_prompt)
    generation_logits: np.ndarray | None = None  # [len(token_ids), V] float32
    metrics: RequestMetrics | None = None  # on the final delta (params.return_perf_metrics)
    beams: tuple[BeamOutput, ...] | None = None  # on the final delta: every beam, best first


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
    top_logprobs: list[TopLogprobs] | None = None  # of token_ids (params.logprobs > 0)
    prompt: PromptScores | None = None  # params.prompt_logprobs / return_context_logits
    generation_logits: np.ndarray | None = None  # [len(token_ids), V] float32
    beams: tuple[BeamOutput, ...] | None = None  # params.beam_width > 1: every beam, best first
