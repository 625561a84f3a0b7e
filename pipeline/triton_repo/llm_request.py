"""Triton `tensorrt_llm` input tensors -> one engine request, with the tensorrtllm backend's
semantics: top_k=0 and top_p=0 (or neither sent) mean greedy; a stop/bad word list is the
[2, N] (token ids, cumulative end offsets padded with -1) format preprocessing writes."""

from dataclasses import dataclass

import numpy as np

from pipeline.engine import SamplingParams


@dataclass(frozen=True, slots=True)
class LLMRequest:
    prompt_token_ids: list[int]
    params: SamplingParams
    is_streaming: bool
    is_input_excluded: bool


def word_sequences(words: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """[2, N] or [1, 2, N] word list -> token-id sequences."""
    words = words.reshape(2, -1)
    ids, ends = words[0], words[1]
    sequences, start = [], 0
    for end in ends:
        if end < 0:
            break
        sequences.append(tuple(int(t) for t in ids[start:end]))
        start = int(end)
    return tuple(seq for seq in sequences if seq)


def _scalar(arrays: dict[str, np.ndarray], name: str, default=None):
    """One value per request; the batch dim (and the [1] of scalar inputs) is flattened away."""
    if name not in arrays:
        return default
    values = arrays[name].reshape(-1)
    if values.size != 1:
        raise ValueError(
            f"{name}: expected one value per request, got shape {list(arrays[name].shape)}"
        )
    return values[0].item()


def _prompt(arrays: dict[str, np.ndarray]) -> list[int]:
    if "input_ids" not in arrays:
        raise ValueError("input_ids is required (a decoder-only engine)")
    input_ids = arrays["input_ids"]
    if input_ids.ndim == 2 and input_ids.shape[0] != 1:
        raise ValueError(
            f"batch size {input_ids.shape[0]}: send one prompt per request (the "
            f"engine batches concurrent requests itself)"
        )
    input_ids = input_ids.reshape(-1)
    length = int(_scalar(arrays, "input_lengths", input_ids.size))
    if not 0 < length <= input_ids.size:
        raise ValueError(f"input_lengths={length} but input_ids holds {input_ids.size} tokens")
    return [int(t) for t in input_ids[:length]]


def _sampling(arrays: dict[str, np.ndarray]) -> dict:
    top_k = int(_scalar(arrays, "runtime_top_k", 0))
    top_p = float(_scalar(arrays, "runtime_top_p", 0.0))
    temperature = float(_scalar(arrays, "temperature", 1.0))
    if temperature == 0.0 or top_k == 1 or (top_k == 0 and top_p == 0.0):
        return {"temperature": 0.0}
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p if top_p > 0 else 1.0}


def from_arrays(arrays: dict[str, np.ndarray], default_exclude_input: bool) -> LLMRequest:
    """Raises ValueError (sent back as the request's error) for inputs the engine can't take."""
    end_id, pad_id, seed = (_scalar(arrays, n) for n in ("end_id", "pad_id", "seed"))
    params = SamplingParams(
        max_tokens=int(_scalar(arrays, "request_output_len", 0)),
        seed=None if seed is None else int(seed),
        end_id=None if end_id is None else int(end_id),
        pad_id=None if pad_id is None else int(pad_id),
        stop_sequences=word_sequences(arrays["stop_words_list"])
        if arrays.get("stop_words_list", np.empty(0)).size
        else (),
        bad_sequences=word_sequences(arrays["bad_words_list"])
        if arrays.get("bad_words_list", np.empty(0)).size
        else (),
        **_sampling(arrays),
    )
    return LLMRequest(
        prompt_token_ids=_prompt(arrays),
        params=params,
        is_streaming=bool(_scalar(arrays, "streaming", False)),
        is_input_excluded=bool(_scalar(arrays, "exclude_input_in_output", default_exclude_input)),
    )
