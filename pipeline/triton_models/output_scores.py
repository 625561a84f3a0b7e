"""A served request's scores beside its tokens: what the engine's deltas brought and the next
response has not carried yet, and their output tensors.

Upstream's names and shapes (NVIDIA/TensorRT-LLM 1.2,
triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/1/model.py, `convert_response`):
`context_logits` [1, prompt tokens, V] and `generation_logits` [1, beam, tokens, V], float32;
the perf metrics [1, 1] each. The torch model's own, after them: `output_top_log_probs` /
`output_top_log_prob_ids` [1, 1, tokens, N] and `prompt_log_probs` [1, prompt tokens] (the
first position has none: 0), `prompt_top_log_probs` / `prompt_top_log_prob_ids`
[1, prompt tokens, N]. A stream sends each token's scores in the response that carries the
token, and the prompt's in the first response after the prefill; a whole answer carries all.
"""

from dataclasses import dataclass, field

import numpy as np

from pipeline.request import StreamDelta
from pipeline.request.outputs import PromptScores, RequestMetrics, TopLogprobs


@dataclass(frozen=True, slots=True)
class OutputScores:
    top_logprobs: list[TopLogprobs] | None = None
    prompt: PromptScores | None = None
    generation_logits: np.ndarray | None = None  # [tokens, V]
    metrics: RequestMetrics | None = None


@dataclass(slots=True)
class ScoresSoFar:
    """One request's scores not sent yet (streaming) or so far (a whole answer)."""

    top_logprobs: list[TopLogprobs] | None = None
    prompt: PromptScores | None = None
    generation_logits: list[np.ndarray] = field(default_factory=list)
    metrics: RequestMetrics | None = None

    def take(self, delta: StreamDelta) -> None:
        if delta.top_logprobs is not None:
            self.top_logprobs = (self.top_logprobs or []) + delta.top_logprobs
        if delta.prompt is not None:
            self.prompt = delta.prompt
        if delta.generation_logits is not None and len(delta.generation_logits):
            self.generation_logits.append(delta.generation_logits)
        if delta.metrics is not None:
            self.metrics = delta.metrics

    def chunk(self, is_streaming: bool) -> OutputScores:
        logits = np.concatenate(self.generation_logits) if self.generation_logits else None
        out = OutputScores(self.top_logprobs, self.prompt, logits, self.metrics)
        if is_streaming:  # each score goes out once, with its tokens
            self.top_logprobs = [] if self.top_logprobs is not None else None
            self.prompt, self.generation_logits = None, []
        return out


def _column(name: str, value, dtype, tensor) -> object:
    return tensor(name, np.array([[value]], dtype))


def logits_tensors(scores: OutputScores | None, outputs: frozenset, tensor) -> list:
    """context_logits and generation_logits, where asked and present (tensor: pb_utils.Tensor)."""
    if scores is None:
        return []
    found = []
    prompt = scores.prompt
    if prompt is not None and prompt.context_logits is not None and "context_logits" in outputs:
        found.append(tensor("context_logits", prompt.context_logits[None]))
    logits = scores.generation_logits
    if logits is not None and "generation_logits" in outputs:
        found.append(tensor("generation_logits", logits[None, None]))
    return found


def perf_tensors(scores: OutputScores | None, outputs: frozenset, tensor) -> list:
    """Upstream's perf-metric outputs, on the final response. kv_cache_reused_blocks: the
    prompt blocks the prefix cache held; the torch engine counts draft tokens per engine, not
    per request (acceptance_rate and the draft counts 0; the engine's are in /metrics)."""
    if scores is None or scores.metrics is None:
        return []
    m = scores.metrics
    values = {
        "kv_cache_alloc_new_blocks": (m.num_total_blocks - m.num_reused_blocks, np.int32),
        "kv_cache_reused_blocks": (m.num_reused_blocks, np.int32),
        "kv_cache_alloc_total_blocks": (m.num_total_blocks, np.int32),
        "arrival_time_ns": (round(m.arrival_time_s * 1e9), np.int64),
        "first_scheduled_time_ns": (round(m.first_scheduled_time_s * 1e9), np.int64),
        "first_token_time_ns": (round(m.first_token_time_s * 1e9), np.int64),
        "last_token_time_ns": (round(m.last_token_time_s * 1e9), np.int64),
        "acceptance_rate": (0.0, np.float32),
        "total_accepted_draft_tokens": (0, np.int32),
        "total_draft_tokens": (0, np.int32),
    }
    return [
        _column(name, value, dtype, tensor)
        for name, (value, dtype) in values.items()
        if name in outputs
    ]


def _top_arrays(entries: list[TopLogprobs]) -> tuple[np.ndarray, np.ndarray]:
    width = max((len(e) for e in entries), default=0)
    values = np.zeros((len(entries), width), np.float32)
    ids = np.zeros((len(entries), width), np.int32)
    for i, entry in enumerate(entries):
        for j, (token, value) in enumerate(entry):
            ids[i, j], values[i, j] = token, value
    return values, ids


def top_tensors(scores: OutputScores | None, outputs: frozenset, tensor) -> list:
    """The torch model's top log probabilities of output and prompt tokens, where asked."""
    if scores is None:
        return []
    found = []
    if scores.top_logprobs is not None:
        values, ids = _top_arrays(scores.top_logprobs)
        if "output_top_log_probs" in outputs:
            found.append(tensor("output_top_log_probs", values[None, None]))
        if "output_top_log_prob_ids" in outputs:
            found.append(tensor("output_top_log_prob_ids", ids[None, None]))
    prompt = scores.prompt
    if prompt is not None and prompt.logprobs is not None:
        if "prompt_log_probs" in outputs:
            logprobs = np.array([lp or 0.0 for lp in prompt.logprobs], np.float32)
            found.append(tensor("prompt_log_probs", logprobs[None]))
        if prompt.top_logprobs is not None:
            values, ids = _top_arrays(prompt.top_logprobs)
            if "prompt_top_log_probs" in outputs:
                found.append(tensor("prompt_top_log_probs", values[None]))
            if "prompt_top_log_prob_ids" in outputs:
                found.append(tensor("prompt_top_log_prob_ids", ids[None]))
    return found
