"""The torch backend's `tensorrt_llm` responses: whom each engine request answers, and the
tensors of each response, in the tensorrtllm backend's names, shapes and order
(docs/trtllm_reference.md, section 9.1)."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

# is_cancelled() is a round trip to the server process, as each send is: asked before every
# response it doubled the cost of a streamed token; a hang-up is noticed this much later instead
CANCEL_CHECK_S = 0.1


class Caller:
    """One request's sender, the outputs it asked for, and when it was last asked is_cancelled;
    is_stopped: a `stop` request with its request id came. With several prompts or
    num_return_sequences, its engine requests' responses go out through one sender from several
    lanes: one at a time (lock), the last one's final response with the final flag (num_open),
    none after it (is_closed)."""

    __slots__ = (
        "sender",
        "outputs",
        "checked_at",
        "request_id",
        "is_stopped",
        "num_open",
        "is_closed",
        "lock",
        "is_batched",
        "num_sequences",
    )

    def __init__(self, sender, outputs: frozenset, request_id: str):
        self.sender, self.outputs, self.checked_at = sender, outputs, -CANCEL_CHECK_S
        self.request_id, self.is_stopped = request_id, False
        self.num_open, self.is_closed, self.lock = 1, False, None
        self.is_batched, self.num_sequences = False, 1

    def expect(self, num_prompts: int, num_sequences: int) -> None:
        self.is_batched, self.num_sequences = num_prompts > 1, num_sequences
        if num_prompts * num_sequences > 1:
            self.num_open, self.lock = num_prompts * num_sequences, threading.Lock()

    def is_cancelled(self) -> bool:
        if self.is_stopped:
            return True
        now = time.monotonic()
        if now - self.checked_at < CANCEL_CHECK_S:
            return False
        self.checked_at = now
        return self.sender.is_cancelled()


class Part:
    """One prompt of a request: the engine requests' context (LLMService answers it)."""

    __slots__ = ("caller", "batch_index")

    def __init__(self, caller: Caller, batch_index: int):
        self.caller, self.batch_index = caller, batch_index


def _output_scores():
    # imported once the model's initialize has put the pipeline on sys.path
    from pipeline.triton_models import output_scores

    return output_scores


def column(name: str, value, dtype) -> "pb_utils.Tensor":
    return pb_utils.Tensor(name, np.array([[value]], dtype))


def tensors(part: "Part", out) -> list:
    """[batch, beam, ...], in upstream's order (text_output, ours, last and flat, as upstream's
    postprocessing gives it): the outputs the request asked for and has, as the tensorrtllm
    backend (batch_index with several prompts, sequence_index with num_return_sequences, log
    probs with return_log_probs)."""
    caller = part.caller
    outputs, tensors = caller.outputs, []
    if out.beams is not None:
        return _beam_tensors(part, out)
    if "output_ids" in outputs:
        tensors.append(pb_utils.Tensor("output_ids", out.token_ids.reshape(1, 1, -1)))
    if "sequence_length" in outputs:
        tensors.append(column("sequence_length", out.token_ids.size, np.int32))
    if out.logprobs is not None:
        if "cum_log_probs" in outputs:
            tensors.append(column("cum_log_probs", out.cum_logprob, np.float32))
        if "output_log_probs" in outputs:
            tensors.append(pb_utils.Tensor("output_log_probs", out.logprobs.reshape(1, 1, -1)))
    scores = None if out.scores is None else _output_scores()
    if scores is not None:
        tensors += scores.logits_tensors(out.scores, outputs, pb_utils.Tensor)
    if caller.is_batched and "batch_index" in outputs:
        tensors.append(column("batch_index", part.batch_index, np.int32))
    if caller.lock is not None and caller.num_sequences > 1 and "sequence_index" in outputs:
        tensors.append(column("sequence_index", out.sequence_index, np.int32))
    tensors += _counters(out, outputs, scores, out.token_ids.size)
    if out.text is not None:
        tensors.append(pb_utils.Tensor("text_output", np.array([out.text.encode()], np.object_)))
    if scores is not None:
        tensors += scores.top_tensors(out.scores, outputs, pb_utils.Tensor)
    return tensors


def _counters(out, outputs, scores, num_output_tokens: int) -> list:
    """The perf metrics and token counts asked for, in upstream's order (num_output_tokens:
    output_ids' size, as upstream counts it)."""
    tensors = []
    if scores is not None:
        tensors += scores.perf_tensors(out.scores, outputs, pb_utils.Tensor)
    if out.num_input_tokens is not None and "num_input_tokens" in outputs:
        tensors.append(column("num_input_tokens", out.num_input_tokens, np.int32))
    if out.is_output_counted and "num_output_tokens" in outputs:
        tensors.append(column("num_output_tokens", num_output_tokens, np.int32))
    # upstream sends it with return_perf_metrics; here whenever asked for by name (the OpenAI
    # frontend's usage.prompt_tokens_details.cached_tokens), once: perf_tensors has it when asked
    has_perf = out.scores is not None and out.scores.metrics is not None
    if out.num_reused_blocks is not None and "kv_cache_reused_blocks" in outputs and not has_perf:
        tensors.append(column("kv_cache_reused_blocks", out.num_reused_blocks, np.int32))
    return tensors


def _beam_tensors(part: "Part", out) -> list:
    """A beam-search request's final response: tensors() with a beam dim of every beam
    (beam_outputs.py)."""
    caller, beams = part.caller, out.beams
    outputs, tensors = caller.outputs, []
    if "output_ids" in outputs:
        tensors.append(pb_utils.Tensor("output_ids", beams.token_ids[None]))
    if "sequence_length" in outputs:
        tensors.append(pb_utils.Tensor("sequence_length", beams.lengths[None]))
    if out.logprobs is not None:  # asked for
        if "cum_log_probs" in outputs:
            tensors.append(pb_utils.Tensor("cum_log_probs", beams.cum_logprobs[None]))
        if "output_log_probs" in outputs:
            tensors.append(pb_utils.Tensor("output_log_probs", beams.logprobs[None]))
    scores = None if out.scores is None else _output_scores()
    if caller.is_batched and "batch_index" in outputs:
        tensors.append(column("batch_index", part.batch_index, np.int32))
    tensors += _counters(out, outputs, scores, beams.token_ids.size)
    if beams.texts is not None:
        texts = np.array([text.encode() for text in beams.texts], np.object_)
        tensors.append(pb_utils.Tensor("text_output", texts))
    return tensors


def split(arrays: dict) -> list[dict]:
    """A request's prompts, each with its own rows of every input (upstream splits a batched
    request likewise, and answers each prompt's responses with its batch_index)."""
    prompts = arrays.get("text_input", arrays.get("input_ids"))
    size = 1 if prompts is None or prompts.ndim < 2 else prompts.shape[0]
    if size == 1:
        return [arrays]
    return [{name: value[i : i + 1] for name, value in arrays.items()} for i in range(size)]
