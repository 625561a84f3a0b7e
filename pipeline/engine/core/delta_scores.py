"""What a step's delta carries beside its tokens, for the requests that asked: the new tokens'
top log probabilities and logits, on the first delta the prompt's scores, and on the final one
the request's times and KV-cache blocks."""

import numpy as np

from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.outputs import RequestMetrics, StreamDelta

_NONE: dict = {}


def delta_scores(seq: Sequence, num_new: int, block_size: int) -> dict:
    """StreamDelta's top_logprobs / prompt / generation_logits / metrics of seq's newest num_new
    tokens."""
    params = seq.params
    # a beam-search request's final delta carries its beams
    beams = _NONE if seq.beam_outputs is None else {"beams": seq.beam_outputs}
    if not (
        params.logprobs
        or params.return_generation_logits
        or params.return_perf_metrics
        or seq.prompt_scores
    ):
        return beams
    scores = dict(beams)
    if seq.top_logprobs is not None:
        scores["top_logprobs"] = seq.top_logprobs[len(seq.top_logprobs) - num_new :]
    if seq.generation_logits is not None:
        rows = seq.generation_logits[len(seq.generation_logits) - num_new :]
        scores["generation_logits"] = np.stack(rows) if rows else np.zeros((0, 0), np.float32)
    builder = seq.prompt_scores
    if builder is not None and builder.is_complete:
        seq.reported_prompt_scores = scores["prompt"] = builder.take()
    if params.return_perf_metrics and seq.is_finished:
        scores["metrics"] = RequestMetrics(
            seq.arrival_time_s,
            seq.admitted_time_s,
            seq.first_token_time_s,
            seq.finish_time_s,
            # the K/V of every token but the last, which is never fed back
            num_total_blocks=-(-min(seq.num_tokens - 1, seq.max_kv_tokens) // block_size),
            num_reused_blocks=seq.num_cached_tokens // block_size,
        )
    return scores


def delta_row(d: StreamDelta) -> tuple:
    """The delta as the plain tuple StreamDelta(*row) rebuilds; its scores only when the request
    asked for some."""
    row = (d.request_id, d.token_ids, d.finished, d.finish_reason, d.error, d.logprobs)
    row += (d.num_cached_tokens,)
    if d.beams is not None:
        return (*row, d.top_logprobs, d.prompt, d.generation_logits, d.metrics, d.beams)
    if d.top_logprobs is None and d.prompt is None and d.generation_logits is None:
        return row if d.metrics is None else (*row, None, None, None, d.metrics)
    return (*row, d.top_logprobs, d.prompt, d.generation_logits, d.metrics)
