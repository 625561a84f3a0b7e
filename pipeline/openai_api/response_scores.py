"""The torch model's top log probabilities in a Triton response, read for the frontend.

`output_top_log_probs` / `output_top_log_prob_ids` [1, 1, n, N]: each new token's N likeliest
tokens; `prompt_log_probs` [1, P] (the first position has none) with `prompt_top_log_probs` /
`prompt_top_log_prob_ids` [1, P, N], in the response that carries the first tokens
(docs/trtllm_reference.md, section 9.3).
"""

from dataclasses import dataclass

import numpy as np

from pipeline.request.outputs import TopLogprobs
from pipeline.request.sampling_params import SamplingParams

TOP_LOG_PROBS = ("output_top_log_probs", "output_top_log_prob_ids")
PROMPT_LOG_PROBS = ("prompt_log_probs", "prompt_top_log_probs", "prompt_top_log_prob_ids")


@dataclass(frozen=True, slots=True)
class ResponseScores:
    top_logprobs: list[TopLogprobs] | None = None  # of the response's new tokens
    prompt_logprobs: list[float | None] | None = None  # each prompt token's; None for the first
    prompt_top_logprobs: list[TopLogprobs] | None = None  # () for the first


def _tops(values: np.ndarray, ids: np.ndarray, num_top: int) -> list[TopLogprobs]:
    # values, ids [n, N] -> each row's first num_top (id, log probability)
    return [
        tuple(zip(row_ids[:num_top].tolist(), row_values[:num_top].tolist(), strict=True))
        for row_values, row_ids in zip(values, ids, strict=True)
    ]


def response_scores(outputs, params: SamplingParams) -> ResponseScores | None:
    """outputs: a tritonclient InferResult; None when the request asked for neither."""
    if not params.logprobs and params.prompt_logprobs is None:
        return None
    top = None
    values, ids = (outputs.as_numpy(name) for name in TOP_LOG_PROBS)
    if params.logprobs and values is not None:
        shape = values.shape[-2:]  # [n, N]; an empty response's n is 0
        top = _tops(values.reshape(shape), ids.reshape(shape), params.logprobs)
    prompt = prompt_top = None
    logprobs = outputs.as_numpy(PROMPT_LOG_PROBS[0])
    if logprobs is not None:
        prompt = [None, *logprobs.reshape(-1)[1:].tolist()]
        values, ids = (outputs.as_numpy(name) for name in PROMPT_LOG_PROBS[1:])
        if params.prompt_logprobs and values is not None:
            shape = values.shape[-2:]  # [P, N]
            tops = _tops(values.reshape(shape), ids.reshape(shape), params.prompt_logprobs)
            prompt_top = [(), *tops[1:]]
    return ResponseScores(top, prompt, prompt_top)
