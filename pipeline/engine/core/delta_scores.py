"""The scores a step's delta carries beside its tokens, for the requests that asked: the new
tokens' top log probabilities and logits, and on the first delta the prompt's scores."""

import numpy as np

from pipeline.engine.scheduling.sequence import Sequence

_NONE: dict = {}


def delta_scores(seq: Sequence, num_new: int) -> dict:
    """StreamDelta's top_logprobs / prompt / generation_logits of seq's newest num_new tokens."""
    params = seq.params
    if not (params.logprobs or params.return_generation_logits or seq.prompt_scores):
        return _NONE
    scores = {}
    if seq.top_logprobs is not None:
        scores["top_logprobs"] = seq.top_logprobs[len(seq.top_logprobs) - num_new :]
    if seq.generation_logits is not None:
        rows = seq.generation_logits[len(seq.generation_logits) - num_new :]
        scores["generation_logits"] = np.stack(rows) if rows else np.zeros((0, 0), np.float32)
    builder = seq.prompt_scores
    if builder is not None and builder.is_complete:
        seq.reported_prompt_scores = scores["prompt"] = builder.take()
    return scores
