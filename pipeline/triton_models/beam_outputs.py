"""A beam-search request's final response, as the tensorrtllm backend shapes it: every beam of the
request in one response, best first, output_ids [1, beams, tokens] (each beam padded to the
longest; sequence_length [1, beams] says how many are its own), cum_log_probs [1, beams],
output_log_probs [1, beams, generated tokens] and text_output flat [beams]. With streaming,
TensorRT-LLM returns each beam's whole generation (GenericLlmRequest's
mReturnAllGeneratedTokens = isStreaming && beamWidth > 1,
cpp/include/tensorrt_llm/batch_manager/llmRequest.h, release 1.2): the engine settles the beams
only at the end, so a stream gets them in its final response."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pipeline.request.outputs import BeamOutput


@dataclass(frozen=True, slots=True)
class BeamArrays:
    token_ids: np.ndarray  # [beams, tokens] int32, padded with pad_id
    lengths: np.ndarray  # [beams] int32
    cum_logprobs: np.ndarray  # [beams] float32
    logprobs: np.ndarray  # [beams, generated tokens] float32, padded with 0
    texts: list[str] | None  # each beam's text (the caller wants text)


def beam_arrays(
    beams: tuple[BeamOutput, ...],
    prompt: list[int],
    pad_id: int,
    decode: Callable[[list[int]], str] | None,
) -> BeamArrays:
    """prompt: what leads each beam's ids (empty when the input is excluded or streaming)."""
    rows = [[*prompt, *beam.token_ids] for beam in beams]
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, np.int32)
    logprobs = np.zeros((len(rows), max(len(b.logprobs) for b in beams)), np.float32)
    for i, (row, beam) in enumerate(zip(rows, beams, strict=True)):
        ids[i, : len(row)] = row
        logprobs[i, : len(beam.logprobs)] = beam.logprobs
    return BeamArrays(
        ids,
        np.array([len(row) for row in rows], np.int32),
        np.array([beam.cum_logprob for beam in beams], np.float32),
        logprobs,
        None if decode is None else [decode(row) for row in rows],
    )
