"""One Triton request's engine request in flight, and the chunks its responses carry.

LLMService keeps a LiveRequest per engine request (several for num_return_sequences): whom to
answer, the tokens (and their log probabilities) not sent yet when streaming or all so far, and
the timestamps its hops are measured with.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.request import StreamDelta
from pipeline.request.outputs import BeamOutput
from pipeline.triton_models.beam_outputs import BeamArrays, beam_arrays
from pipeline.triton_models.detokenizer import TextStream
from pipeline.triton_models.llm_request import LLMRequest
from pipeline.triton_models.output_scores import OutputScores, ScoresSoFar


# not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, ~5x the
# cost of a plain one, and the responder makes a chunk per response of every stream
@dataclass(slots=True)
class OutputChunk:
    token_ids: np.ndarray  # [n] int32: new tokens when streaming, else the whole output
    is_final: bool
    text: str | None = None  # the text these tokens complete; None: the caller wants no text
    # the request asked for log probabilities: those of the generated tokens among token_ids
    # ([m] float32; the prompt has none), and the sum over every token generated so far
    logprobs: np.ndarray | None = None
    cum_logprob: float = 0.0
    sequence_index: int = 0  # which of the request's num_return_sequences
    num_input_tokens: int | None = None  # the prompt's, when the request asked
    is_output_counted: bool = False  # the request asked for num_output_tokens
    # the final chunk's: prompt blocks the prefix cache held (kv_cache_reused_blocks)
    num_reused_blocks: int | None = None
    scores: OutputScores | None = None  # top log probabilities, logits, perf metrics (asked)
    beams: BeamArrays | None = None  # beam search's final chunk: every beam (token_ids empty)


@dataclass(slots=True)
class LiveRequest:
    """One request in flight: who to answer, its tokens not sent yet (streaming) or so far."""

    request: LLMRequest
    context: Any
    lane: int
    text: TextStream | None = None  # when the caller wants text
    sequence_index: int = 0
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None  # as tokens (the request asked for log probabilities)
    cum_logprob: float = 0.0
    is_finished: bool = False
    sent_at: float = 0.0  # of its last response; 0: none yet, so the first goes out at once
    received_at: float = 0.0  # perf_counter() when execute() took it
    submitted_at: float = 0.0  # when the engine was given it
    first_token_at: float = 0.0  # when its first token reached the responder
    first_sent_at: float = 0.0  # when its first response (streaming) left its lane
    final_at: float = 0.0  # when its final delta reached the responder
    is_sending: bool = False  # its last response is still in its lane
    is_gone: bool = False  # its caller hung up or failed: nothing more goes out
    error: str | None = None  # the engine failed this request
    block_size: int = 0  # the engine's tokens a KV block (0: reused blocks not reported)
    num_cached_tokens: int = 0  # prompt tokens the prefix cache held (from the final delta)
    scores: ScoresSoFar | None = None  # made by the first delta that brings any
    beams: tuple[BeamOutput, ...] | None = None  # beam search: from the final delta

    def take(self, delta: StreamDelta, now: float) -> None:
        if not self.first_token_at and delta.token_ids:
            self.first_token_at = now
        self.tokens.extend(delta.token_ids)
        if delta.logprobs is not None:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs.extend(delta.logprobs)
            self.cum_logprob += sum(delta.logprobs)
        if self.scores is not None or (
            delta.top_logprobs is not None
            or delta.prompt is not None
            or delta.generation_logits is not None
            or delta.metrics is not None
        ):
            self.scores = self.scores or ScoresSoFar()
            self.scores.take(delta)
        if delta.beams is not None:
            self.beams = delta.beams
        self.is_finished = delta.finished
        self.error = delta.error
        if delta.finished:
            self.final_at = now
            self.num_cached_tokens = delta.num_cached_tokens

    def is_due(self, now: float, gap_s: float) -> bool:
        return self.is_finished or (
            self.request.is_streaming and (self.sent_at == 0.0 or now - self.sent_at >= gap_s)
        )

    def chunk(self) -> OutputChunk:
        if self.beams is not None:
            return self._beam_chunk()
        logprobs = self.logprobs
        if self.request.is_streaming:  # TensorRT-LLM streams new tokens only, prompt or not
            ids, self.tokens = self.tokens, []
            if logprobs is not None:
                self.logprobs = []
        else:
            prompt = [] if self.request.is_input_excluded else self.request.prompt_token_ids
            ids = [*prompt, *self.tokens]
        text = None if self.text is None else self.text.add(ids, self.is_finished)
        if logprobs is None and self.request.params.logprobs is not None:
            logprobs = []  # asked for, none yet (an end token carries none)
        return OutputChunk(
            np.asarray(ids, np.int32),
            self.is_finished,
            text,
            None if logprobs is None else np.asarray(logprobs, np.float32),
            self.cum_logprob,
            self.sequence_index,
            len(self.request.prompt_token_ids) if self.request.wants_num_input_tokens else None,
            self.request.wants_num_output_tokens,
            self.num_cached_tokens // self.block_size
            if self.is_finished and self.block_size
            else None,
            None if self.scores is None else self.scores.chunk(self.request.is_streaming),
        )

    def _beam_chunk(self) -> OutputChunk:
        request = self.request
        excluded = request.is_input_excluded or request.is_streaming
        ids = (request.params.pad_id, request.params.end_id)
        pad_id = next((i for i in ids if i is not None and i >= 0), 0)
        beams = beam_arrays(
            self.beams[: request.num_beams_returned or None],
            [] if excluded else request.prompt_token_ids,
            pad_id,
            None if self.text is None else self.text.decode_whole,
        )
        return OutputChunk(
            np.zeros(0, np.int32),
            True,
            # asked for log probabilities: the beams' are in `beams`
            logprobs=None if request.params.logprobs is None else np.zeros(0, np.float32),
            sequence_index=self.sequence_index,
            num_input_tokens=len(request.prompt_token_ids)
            if request.wants_num_input_tokens
            else None,
            is_output_counted=request.wants_num_output_tokens,
            num_reused_blocks=self.num_cached_tokens // self.block_size
            if self.block_size
            else None,
            scores=None if self.scores is None else self.scores.chunk(request.is_streaming),
            beams=beams,
        )
