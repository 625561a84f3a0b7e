"""Triton `tensorrt_llm` input tensors -> one engine request, with the tensorrtllm backend's
semantics: top_k=0 and top_p=0 (or neither sent) mean greedy; a stop/bad word list is the
[2, N] (token ids, cumulative end offsets padded with -1) format preprocessing writes.

The torch backend's model also takes text (text_input, stop_words, bad_words: the ensemble's own
inputs), tokenized here as preprocessing tokenizes it, with its end_id/pad_id defaults, so its
ensemble needs no preprocessing step: one python-stub hop less on each request's way in.
"""

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.lora.adapters import name_for_task
from pipeline.request import SamplingParams
from pipeline.request.guided import GUIDE_TYPES, GuidedDecoding
from pipeline.triton_models.input_checks import check_inputs, decode_utf8
from pipeline.triton_models.torch_unsupported import refuse_unsupported


class TextEncoder:
    """Text -> token ids as the preprocessing model makes them (same tokenizer and flags).

    A fast tokenizer's ids come from its Rust tokenizer's own encode, which holds the GIL:
    transformers' encode goes through the Rust batch encode, which lets go of it, and taking it
    back waits out the switch interval (5 ms) whenever another thread of the python stub runs
    Python, so a short prompt's encode took a whole switch interval beside the stub's other
    threads (docs/design.md, "The repository")."""

    def __init__(self, tokenizer: Any, add_special_tokens: bool):
        self.tokenizer = tokenizer  # a transformers tokenizer
        self.add_special_tokens = add_special_tokens
        self._fast = _rust_encoder(tokenizer)
        # read once: each read of transformers' token-id properties takes ~20 us
        self.end_id: int = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        self.pad_id: int = self.end_id if pad is None else pad

    def prompt(self, text: str) -> list[int]:
        ids = self._encode(text, self.add_special_tokens)
        if not ids:
            raise ValueError("text_input tokenizes to no tokens; send a non-empty prompt")
        return ids

    def words(self, words: list[str]) -> tuple[tuple[int, ...], ...]:
        """Each word's ids; a word with none (an empty string) is dropped, as preprocessing
        drops it."""
        encoded = (self._encode(w, False) for w in words)
        return tuple(tuple(ids) for ids in encoded if ids)

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        if self._fast is None:
            return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return self._fast.encode(text, add_special_tokens=add_special_tokens).ids


def _rust_encoder(tokenizer: Any):
    """A copy of a fast tokenizer's Rust tokenizer, set as transformers' encode sets it for a
    text (no truncation or padding, its split_special_tokens); None for a slow tokenizer."""
    fast = getattr(tokenizer, "backend_tokenizer", None)
    if fast is None:
        return None
    fast = copy.deepcopy(fast)  # the tokenizer's own stays as transformers keeps it
    fast.no_truncation()
    fast.no_padding()
    fast.encode_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))
    return fast


@dataclass(frozen=True, slots=True)
class LLMRequest:
    prompt_token_ids: list[int]
    params: SamplingParams
    is_streaming: bool
    is_input_excluded: bool
    num_sequences: int = 1  # num_return_sequences: independent samples, each its own responses
    # beam search: how many of the best beams the response holds (num_return_sequences; 0: all)
    num_beams_returned: int = 0
    wants_num_input_tokens: bool = False
    wants_num_output_tokens: bool = False

    def sequence_params(self) -> list[SamplingParams]:
        """Each returned sequence's params: seeds seed, seed + 1, ... when seeded (so each is
        reproducible and they differ), else the engine's generator draws each its own."""
        seed = self.params.seed
        return [
            self.params if seed is None else replace(self.params, seed=(seed + i) % 2**64)
            for i in range(self.num_sequences)
        ]


def word_sequences(words: np.ndarray, name: str = "word list") -> tuple[tuple[int, ...], ...]:
    """[2, N] or [1, 2, N] word list -> token-id sequences. Row 1 holds each word's end offset
    into row 0, increasing, then -1 padding."""
    if words.size % 2 or (words.ndim > 2 and words.shape[0] != 1):
        raise ValueError(
            f"{name}: shape {list(words.shape)} is not [2, N] (row 0 token ids, row 1 each "
            f"word's end offset, -1 padded)"
        )
    words = words.reshape(2, -1)
    ids, ends = words[0], words[1]
    sequences, start = [], 0
    for end in ends.tolist():
        if end < 0:
            break
        if not start <= end <= ids.size:
            raise ValueError(
                f"{name}: end offset {end} after {start} is not in [{start}, {ids.size}] "
                f"(offsets must increase and stay within the {ids.size} ids)"
            )
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
    return [decode_utf8(v, name) for v in values.reshape(-1)]


def _prompt(arrays: dict[str, np.ndarray], encoder: TextEncoder | None) -> list[int]:
    if "text_input" in arrays:
        if "input_ids" in arrays:
            raise ValueError("send input_ids or text_input, not both")
        if encoder is None:
            raise ValueError("text_input needs the model's tokenizer_dir parameter")
        (text,) = _strings(arrays, "text_input")  # text_input's dims are [1]
        return encoder.prompt(text)
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
    name = f"{kind}_words_list"
    ids = arrays.get(name, np.empty(0))
    sequences = word_sequences(ids, name) if ids.size else ()
    if f"{kind}_words" in arrays:
        if encoder is None:
            raise ValueError(f"{kind}_words needs the model's tokenizer_dir parameter")
        sequences += encoder.words(_strings(arrays, f"{kind}_words"))
    return sequences


def _scores(arrays: dict[str, np.ndarray]) -> dict:
    """Log probabilities and logits asked for: upstream's return_* flags, and the torch model's
    num_top_log_probs (each output token's likeliest alternatives, implying return_log_probs)
    and num_prompt_log_probs (each prompt token's, with that many alternatives)."""
    num_top = int(_scalar(arrays, "num_top_log_probs", 0))
    num_prompt = int(_scalar(arrays, "num_prompt_log_probs", -1))
    asks_log_probs = bool(_scalar(arrays, "return_log_probs", False)) or num_top > 0
    return {
        "logprobs": num_top if asks_log_probs else None,
        "prompt_logprobs": None if num_prompt < 0 else num_prompt,
        "return_context_logits": bool(_scalar(arrays, "return_context_logits", False)),
        "return_generation_logits": bool(_scalar(arrays, "return_generation_logits", False)),
        "return_perf_metrics": bool(_scalar(arrays, "return_perf_metrics", False)),
    }


def _logit_bias(arrays: dict[str, np.ndarray]) -> tuple[tuple[int, float], ...]:
    """embedding_bias ([V] or [1, V] floats added to the logits, the tensorrtllm backend's) as
    (token id, bias) pairs of its non-zero entries; an empty tensor (preprocessing's [1, 0]
    when no bias is asked) is none."""
    bias = arrays.get("embedding_bias")
    if bias is None or not bias.size:
        return ()
    if bias.ndim > 1 and bias.shape[0] != 1:
        raise ValueError(f"embedding_bias: batch size {bias.shape[0]}: send one per request")
    bias = bias.reshape(-1)
    return tuple((int(t), float(bias[t])) for t in np.flatnonzero(bias))


def _beams(arrays: dict[str, np.ndarray]) -> dict:
    """Beam search, as the tensorrtllm backend takes it: beam_width, len_penalty (the ensemble's
    length_penalty) and early_stopping (a bool: TensorRT-LLM's 1 or 0; unsent, its default 1)."""
    width = int(_scalar(arrays, "beam_width", 1))
    return {
        "beam_width": width,
        "length_penalty": float(_scalar(arrays, "len_penalty", 1.0)),
        "early_stopping": int(bool(_scalar(arrays, "early_stopping", True))),
    }


def _returned(arrays: dict[str, np.ndarray], beam_width: int) -> dict:
    """num_return_sequences: independent samples (beam width 1), or with beam search the best
    that many beams, in one response ("the number of beams to be returned will be limited by
    numReturnSequences": docs/source/advanced/executor.md, TensorRT-LLM 1.2)."""
    num = int(_scalar(arrays, "num_return_sequences", 1))
    if beam_width == 1:
        return {"num_sequences": num}
    if num > beam_width:
        raise ValueError(
            f"num_return_sequences={num} is above beam_width={beam_width} (beam search returns "
            f"its best beams); send at most {beam_width}"
        )
    return {"num_beams_returned": num if "num_return_sequences" in arrays else 0}


def _lora_name(arrays: dict[str, np.ndarray], lora_dir: str | None) -> str | None:
    """The adapter lora_task_id names (the repository's adapter dir, read again each time, so
    an adapter copied in while serving is found); None without one."""
    lora_task_id = _scalar(arrays, "lora_task_id")
    if lora_task_id is None:
        return None
    if lora_dir is None:
        raise ValueError(
            f"not supported by backend=torch: lora_task_id={lora_task_id} (no LoRA adapters: "
            f"deploy the model with lora.adapters, or leave it out)"
        )
    return name_for_task(Path(lora_dir), int(lora_task_id))


def _guide(arrays: dict[str, np.ndarray]) -> GuidedDecoding | None:
    """guided_decoding_guide_type (json, json_schema, regex, ebnf_grammar) and its
    guided_decoding_guide, as the tensorrtllm backend takes them; no type (or an empty one) is
    no grammar."""
    kind = (
        _strings(arrays, "guided_decoding_guide_type")
        if "guided_decoding_guide_type" in arrays
        else []
    )
    text = _strings(arrays, "guided_decoding_guide") if "guided_decoding_guide" in arrays else []
    kind, text = (kind[0] if kind else ""), (text[0] if text else "")
    if not kind:
        if text:
            raise ValueError(
                "guided_decoding_guide is set without guided_decoding_guide_type; send its type "
                f"({', '.join(GUIDE_TYPES)})"
            )
        return None
    if kind not in GUIDE_TYPES:
        raise ValueError(
            f"guided_decoding_guide_type={kind!r} is not served (backend=torch takes "
            f"{', '.join(GUIDE_TYPES)})"
        )
    return GuidedDecoding(kind, text)


def from_arrays(
    arrays: dict[str, np.ndarray],
    default_exclude_input: bool,
    encoder: TextEncoder | None = None,
    lora_dir: str | None = None,
) -> LLMRequest:
    """Raises ValueError (sent back as the request's error) for inputs the engine can't take.
    encoder: tokenizes text inputs; a text prompt's end_id/pad_id default to its tokenizer's."""
    check_inputs(arrays)
    refuse_unsupported(arrays)
    prompt = _prompt(arrays, encoder)  # refuses text without an encoder
    # a text prompt gets preprocessing's defaults: it always sends its tokenizer's ids
    is_text = "text_input" in arrays
    end_id = _scalar(arrays, "end_id", encoder.end_id if is_text else None)
    pad_id = _scalar(arrays, "pad_id", encoder.pad_id if is_text else None)
    seed = _scalar(arrays, "seed")
    if "request_output_len" not in arrays:
        raise ValueError(
            "missing required input request_output_len (the ensemble's max_tokens); send it"
        )
    params = SamplingParams(
        max_tokens=int(_scalar(arrays, "request_output_len")),
        seed=None if seed is None else int(seed),
        end_id=None if end_id is None else int(end_id),
        pad_id=None if pad_id is None else int(pad_id),
        stop_sequences=_sequences(arrays, "stop", encoder),
        bad_sequences=_sequences(arrays, "bad", encoder),
        repetition_penalty=float(_scalar(arrays, "repetition_penalty", 1.0)),
        presence_penalty=float(_scalar(arrays, "presence_penalty", 0.0)),
        frequency_penalty=float(_scalar(arrays, "frequency_penalty", 0.0)),
        prompt_ignore_length=int(_scalar(arrays, "prompt_ignore_length", 0)),
        min_tokens=int(_scalar(arrays, "min_tokens", 0)),
        min_p=float(_scalar(arrays, "min_p", 0.0)),
        logit_bias=_logit_bias(arrays),
        lora_name=_lora_name(arrays, lora_dir),
        guide=_guide(arrays),
        **_scores(arrays),
        **_sampling(arrays),
        **_beams(arrays),
    )
    return LLMRequest(
        prompt_token_ids=prompt,
        params=params,
        is_streaming=bool(_scalar(arrays, "streaming", False)),
        is_input_excluded=bool(_scalar(arrays, "exclude_input_in_output", default_exclude_input)),
        **_returned(arrays, params.beam_width),
        wants_num_input_tokens=bool(_scalar(arrays, "return_num_input_tokens", False)),
        wants_num_output_tokens=bool(_scalar(arrays, "return_num_output_tokens", False)),
    )
