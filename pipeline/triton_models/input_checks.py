"""The allowed values of every numeric request input, in one table, for every entry point.

The Triton models check what a client sent before anything acts on it: the torch backend's
`tensorrt_llm` (which the ensemble and the BLS reach too), and the BLS and preprocessing models,
which sit in front of either backend's `tensorrt_llm`. Triton checks each input's data type and
shape; a float32 NaN, a negative max_tokens or an int32 at its limit pass that, so the range of
every value is checked here and a refusal names the input as the client spelt it, the value and
the range. SamplingParams and RequestLimits check the engine's side again (token ids against
the vocabulary, lengths against the engine's limits). numpy only: the python models that sit in
front of the tensorrtllm backend import it without this package's engine.
"""

import math
from dataclasses import dataclass

import numpy as np

MAX_INT32 = int(np.iinfo(np.int32).max)
MAX_UINT64 = int(np.iinfo(np.uint64).max)


@dataclass(frozen=True, slots=True)
class Allowed:
    low: float
    high: float
    meaning: str = ""  # what the edge values mean, for the error message

    def describe(self) -> str:
        high = "2**64 - 1" if self.high == MAX_UINT64 else self.high
        return f"[{self.low}, {high}]" + (f" ({self.meaning})" if self.meaning else "")

    def allows(self, value: float) -> bool:
        return self.low <= value <= self.high


_OUTPUT_LEN = Allowed(1, MAX_INT32, "tokens to generate")
_TOP_K = Allowed(0, MAX_INT32, "0 = no top-k filter")
_TOP_P = Allowed(0.0, 1.0, "0 with top_k 0 = greedy")
_TOKEN_ID = Allowed(-1, MAX_INT32, "a token id; -1 = none, which no token matches")
# The sampler divides the logits by temperature (greedy below 1e-5) and scales them by
# repetition_penalty either way: within these bounds a logit under 1e6 stays under 1e23, far from
# float32's 3.4e38, where 1e308 became inf and inf * 0 a NaN that failed the batch. Neither
# vLLM (SamplingParams._verify_args, v0.11) nor TensorRT-LLM (SamplingConfig, v1.0) bounds them
# above; both refuse a negative temperature and a repetition_penalty <= 0.
MAX_SCALE = 1e6
# presence and frequency: OpenAI's range, which vLLM enforces too ([-2, 2]); TensorRT-LLM's is
# unbounded, but frequency_penalty * a count near 2**31 must stay finite
_ADDITIVE_PENALTY = Allowed(-2.0, 2.0, "0 = none")
# OpenAI's logit_bias range (vLLM clamps to it); TensorRT-LLM's embedding_bias is unbounded; a bias
# must leave the logits finite: -100 already makes a token practically never drawn
LOGIT_BIAS = Allowed(-100.0, 100.0, "added to the token's logit; 0 = none")
_LENGTH_PENALTY = Allowed(-math.inf, math.inf, "beam search only")
# the ensemble's / BLS's names and the tensorrt_llm model's names for the same knobs
ALLOWED = {
    "max_tokens": _OUTPUT_LEN,
    "request_output_len": _OUTPUT_LEN,
    "REQUEST_OUTPUT_LEN": _OUTPUT_LEN,
    "top_k": _TOP_K,
    "runtime_top_k": _TOP_K,
    "top_p": _TOP_P,
    "runtime_top_p": _TOP_P,
    "temperature": Allowed(0.0, MAX_SCALE, "0 = greedy"),
    "seed": Allowed(0, MAX_UINT64),
    "end_id": _TOKEN_ID,
    "pad_id": _TOKEN_ID,
    "END_ID": _TOKEN_ID,
    "PAD_ID": _TOKEN_ID,
    "input_lengths": Allowed(1, MAX_INT32, "tokens of input_ids to use"),
    # TensorRT-LLM's SamplingConfig ranges (docs/trtllm_reference.md, section 9.2)
    "repetition_penalty": Allowed(1 / MAX_SCALE, MAX_SCALE, "1 = none"),
    "presence_penalty": _ADDITIVE_PENALTY,
    "frequency_penalty": _ADDITIVE_PENALTY,
    "min_tokens": Allowed(0, MAX_INT32, "0 = none"),
    "min_p": Allowed(0.0, 1.0, "0 = none"),
    "embedding_bias": LOGIT_BIAS,
    "length_penalty": _LENGTH_PENALTY,
    "len_penalty": _LENGTH_PENALTY,
    "beam_width": Allowed(1, MAX_INT32, "1 = no beam search"),
    "num_return_sequences": Allowed(1, MAX_INT32, "sequences returned"),
    "prompt_vocab_size": Allowed(0, MAX_INT32),
    "lora_task_id": Allowed(0, MAX_UINT64),
    "prompt_table_extra_id": Allowed(0, MAX_UINT64),
    "prompt_ignore_length": Allowed(0, MAX_INT32, "prompt tokens presence/frequency skip"),
    # the torch model's (vLLM's logprobs / prompt_logprobs; SamplingParams.MAX_LOGPROBS)
    "num_top_log_probs": Allowed(0, 20, "likeliest tokens' log probabilities per output token"),
    "num_prompt_log_probs": Allowed(-1, 20, "-1 = off; likeliest tokens per prompt token"),
}


# the tensorrt_llm model's names of inputs the ensemble and the BLS call otherwise
CLIENT_NAMES = {
    "request_output_len": "max_tokens",
    "REQUEST_OUTPUT_LEN": "max_tokens",
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "len_penalty": "length_penalty",
    "END_ID": "end_id",
    "PAD_ID": "pad_id",
}


# the ensemble's client inputs the tensorrt_llm model takes as they come (upstream's renames)
LLM_DIRECT_INPUTS = {
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "temperature": "temperature",
    "seed": "seed",
    "streaming": "stream",
    "exclude_input_in_output": "exclude_input_in_output",
    "num_return_sequences": "num_return_sequences",
    "beam_width": "beam_width",
    "len_penalty": "length_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "return_log_probs": "return_log_probs",
    "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits",
    "return_perf_metrics": "return_perf_metrics",
    "return_num_input_tokens": "return_num_input_tokens",
    "return_num_output_tokens": "return_num_output_tokens",
    "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size",
    "lora_task_id": "lora_task_id",
    "lora_weights": "lora_weights",
    "lora_config": "lora_config",
    "guided_decoding_guide_type": "guided_decoding_guide_type",
    "guided_decoding_guide": "guided_decoding_guide",
}


def check_inputs(arrays: dict[str, np.ndarray]) -> None:
    """Raise ValueError naming every input whose value is not a finite number in its range."""
    problems = []
    for name, allowed in ALLOWED.items():
        if name not in arrays:
            continue
        client = f" (the ensemble's {CLIENT_NAMES[name]})" if name in CLIENT_NAMES else ""
        for value in np.asarray(arrays[name]).reshape(-1).tolist():
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            if not is_number or not math.isfinite(value):
                problems.append(f"{name}={value!r}{client} is not a finite number")
            elif not allowed.allows(value):
                problems.append(f"{name}={value!r}{client} is outside {allowed.describe()}")
    if problems:
        raise ValueError("; ".join(problems))


def decode_utf8(value, name: str) -> str:
    """A string input's value as text; ValueError naming the input when it is not UTF-8."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{name}: byte {exc.start} is not valid UTF-8 ({exc.reason}); send UTF-8 text"
        ) from None
