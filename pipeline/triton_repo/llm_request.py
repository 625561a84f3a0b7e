"""Triton `tensorrt_llm` input tensors -> one engine request, with the tensorrtllm backend's
semantics: top_k=0 and top_p=0 (or neither sent) mean greedy; a stop/bad word list is the
[2, N] (token ids, cumulative end offsets padded with -1) format preprocessing writes.

The torch backend's model also takes text (text_input, stop_words, bad_words: the ensemble's own
inputs), tokenized here as preprocessing tokenizes it, with its end_id/pad_id defaults, so its
ensemble needs no preprocessing step: one python-stub hop less on each request's way in.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.engine import SamplingParams


@dataclass(frozen=True, slots=True)
class TextEncoder:
    """Text -> token ids as the preprocessing model makes them (same tokenizer and flags)."""

    tokenizer: Any  # a transformers tokenizer
    add_special_tokens: bool

    @property
    def end_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return self.end_id if pad is None else pad

    def prompts(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids, in one call: a fast tokenizer encodes a batch on all cores without
        the GIL, where one encode at a time holds up the python stub (~0.2 ms a 128-token
        prompt, serial in execute() for every request Triton hands it at once)."""
        return self.tokenizer(texts, add_special_tokens=self.add_special_tokens)["input_ids"]

    def words(self, words: list[str]) -> tuple[tuple[int, ...], ...]:
        """Each word's ids; a word with none (an empty string) is dropped, as preprocessing
        drops it."""
        encoded = (self.tokenizer.encode(w, add_special_tokens=False) for w in words)
        return tuple(tuple(ids) for ids in encoded if ids)


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


def _strings(arrays: dict[str, np.ndarray], name: str) -> list[str]:
    """One request's strings ([1, N] bytes, utf-8)."""
    values = arrays[name]
    if values.ndim > 1 and values.shape[0] != 1:
        raise ValueError(f"{name}: batch size {values.shape[0]}: send one prompt per request")
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]


def _text(arrays: dict[str, np.ndarray], encoder: TextEncoder | None) -> str | None:
    """The text prompt to tokenize, or None when the request sends input_ids."""
    if "text_input" not in arrays:
        return None
    if "input_ids" in arrays:
        raise ValueError("send input_ids or text_input, not both")
    if encoder is None:
        raise ValueError("text_input needs the model's tokenizer_dir parameter")
    (text,) = _strings(arrays, "text_input")  # text_input's dims are [1]
    return text


def _input_ids(arrays: dict[str, np.ndarray]) -> list[int]:
    if "input_ids" not in arrays:
        raise ValueError("input_ids (or text_input) is required (a decoder-only engine)")
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


def _sequences(arrays: dict[str, np.ndarray], kind: str, encoder: TextEncoder | None):
    """Stop or bad word sequences: from the [2, N] id list (kind_words_list), and from strings
    (kind_words) when the model tokenizes."""
    ids = arrays.get(f"{kind}_words_list", np.empty(0))
    sequences = word_sequences(ids) if ids.size else ()
    if f"{kind}_words" in arrays:
        if encoder is None:
            raise ValueError(f"{kind}_words needs the model's tokenizer_dir parameter")
        sequences += encoder.words(_strings(arrays, f"{kind}_words"))
    return sequences


def from_batch(
    batch: list[dict[str, np.ndarray]],
    default_exclude_input: bool,
    encoder: TextEncoder | None = None,
) -> list[LLMRequest | ValueError]:
    """Each request's LLMRequest, or the ValueError (sent back as its error) for inputs the
    engine can't take. encoder: tokenizes text inputs, all text prompts of the batch in one call;
    a text prompt's end_id/pad_id default to its tokenizer's."""
    texts: list[str | ValueError | None] = []
    for arrays in batch:
        try:
            texts.append(_text(arrays, encoder))
        except ValueError as exc:
            texts.append(exc)
    to_encode = [text for text in texts if isinstance(text, str)]
    encoded = iter(encoder.prompts(to_encode) if to_encode else ())
    out: list[LLMRequest | ValueError] = []
    for arrays, text in zip(batch, texts, strict=True):
        try:
            if isinstance(text, ValueError):
                raise text
            prompt = _input_ids(arrays) if text is None else next(encoded)
            out.append(_request(arrays, prompt, text is not None, default_exclude_input, encoder))
        except ValueError as exc:
            out.append(exc)
    return out


def _request(
    arrays: dict[str, np.ndarray],
    prompt: list[int],
    is_text: bool,
    default_exclude_input: bool,
    encoder: TextEncoder | None,
) -> LLMRequest:
    if not prompt:  # text only (input_ids are checked): "" without special tokens
        raise ValueError("text_input tokenizes to no tokens; send a non-empty prompt")
    # a text prompt gets preprocessing's defaults: it always sends its tokenizer's ids
    end_id = _scalar(arrays, "end_id", encoder.end_id if is_text else None)
    pad_id = _scalar(arrays, "pad_id", encoder.pad_id if is_text else None)
    seed = _scalar(arrays, "seed")
    params = SamplingParams(
        max_tokens=int(_scalar(arrays, "request_output_len", 0)),
        seed=None if seed is None else int(seed),
        end_id=None if end_id is None else int(end_id),
        pad_id=None if pad_id is None else int(pad_id),
        stop_sequences=_sequences(arrays, "stop", encoder),
        bad_sequences=_sequences(arrays, "bad", encoder),
        **_sampling(arrays),
    )
    return LLMRequest(
        prompt_token_ids=prompt,
        params=params,
        is_streaming=bool(_scalar(arrays, "streaming", False)),
        is_input_excluded=bool(_scalar(arrays, "exclude_input_in_output", default_exclude_input)),
    )
