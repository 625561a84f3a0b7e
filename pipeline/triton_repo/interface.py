"""The models' tensors, as the tensorrtllm backend's templates declare them (TensorRT-LLM 1.2.x).

`ensemble` and `tensorrt_llm_bls` declare upstream's whole client interface (names, data types,
dims: docs/trtllm_reference.md, section 9.1), so a client written for upstream's models sends
what it sends; with backend=trtllm every input reaches the tensorrtllm backend, and the torch
backend's `tensorrt_llm` serves what its engine can and refuses the rest by name. The torch
`tensorrt_llm` declares every input of the tensorrtllm backend's; preprocessing and
postprocessing the inputs the pipeline drives. Every model's outputs are upstream's, in upstream's
order, with ours after them (section 9.7).
"""

from dataclasses import dataclass, replace

from pipeline.triton_models.input_checks import LLM_DIRECT_INPUTS
from pipeline.trtllm import triton_io


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    data_type: str  # a ModelConfig DataType name, e.g. "TYPE_INT32"
    dims: tuple[int, ...]  # without the batch dim (every model batches)
    optional: bool = False
    scalar: bool = False  # dims [1] + reshape { shape: [] }, as the tensorrt_llm template writes
    ragged: bool = False  # allow_ragged_batch


LOGITS = "LOGITS"  # upstream's ${logits_datatype}: the engine's logits type (with_logits_type)
LOGITS_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}


def t(name: str, data_type: str, dims: tuple[int, ...] = (1,), **flags: bool) -> TensorSpec:
    data_type = data_type if data_type == LOGITS else f"TYPE_{data_type}"
    return TensorSpec(name, data_type, dims, **flags)


def with_logits_type(specs, data_type: str) -> tuple[TensorSpec, ...]:
    """specs with the LOGITS placeholder set to data_type (a ModelConfig DataType name)."""
    return tuple(replace(s, data_type=data_type) if s.data_type == LOGITS else s for s in specs)


# The client-facing interface of `ensemble` and `tensorrt_llm_bls`.
ENSEMBLE_INPUTS = (
    t("text_input", "STRING"),
    t("max_tokens", "INT32"),
    t("bad_words", "STRING", (-1,), optional=True),
    t("stop_words", "STRING", (-1,), optional=True),
    t("end_id", "INT32", optional=True),
    t("pad_id", "INT32", optional=True),
    t("temperature", "FP32", optional=True),
    t("top_k", "INT32", optional=True),
    t("top_p", "FP32", optional=True),
    t("seed", "UINT64", optional=True),
    t("stream", "BOOL", optional=True),
    t("exclude_input_in_output", "BOOL", optional=True),
    # the rest of upstream's ensemble inputs, in its order
    t("decoder_text_input", "STRING", optional=True),
    t("num_return_sequences", "INT32", optional=True),
    t("length_penalty", "FP32", optional=True),
    t("repetition_penalty", "FP32", optional=True),
    t("min_tokens", "INT32", optional=True),
    t("presence_penalty", "FP32", optional=True),
    t("frequency_penalty", "FP32", optional=True),
    t("return_log_probs", "BOOL", optional=True),
    t("return_context_logits", "BOOL", optional=True),
    t("return_generation_logits", "BOOL", optional=True),
    t("return_perf_metrics", "BOOL", optional=True),
    t("return_num_input_tokens", "BOOL", optional=True),
    t("return_num_output_tokens", "BOOL", optional=True),
    t("beam_width", "INT32", optional=True),
    t("prompt_embedding_table", "FP16", (-1, -1), optional=True),
    t("prompt_table_extra_id", "UINT64", optional=True),
    t("prompt_vocab_size", "INT32", optional=True),
    t("embedding_bias_words", "STRING", (-1,), optional=True),
    t("embedding_bias_weights", "FP32", (-1,), optional=True),
    t("lora_task_id", "UINT64", optional=True),
    t("lora_weights", "FP16", (-1, -1), optional=True, ragged=True),
    t("lora_config", "INT32", (-1, 3), optional=True, ragged=True),
    t("guided_decoding_guide_type", "STRING", optional=True, ragged=True),
    t("guided_decoding_guide", "STRING", optional=True, ragged=True),
)
# The BLS's: the ensemble's, reshaped to scalars and unragged where upstream's BLS template does,
# and its own multimodal and draft-model inputs
_BLS_SCALARS = frozenset(
    (
        "return_log_probs",
        "return_context_logits",
        "return_generation_logits",
        "num_return_sequences",
        "lora_task_id",
        "return_perf_metrics",
        "return_num_input_tokens",
        "return_num_output_tokens",
    )
)
BLS_INPUTS = (
    *(
        replace(s, scalar=s.name in _BLS_SCALARS, ragged=s.ragged and s.name.startswith("lora"))
        for s in ENSEMBLE_INPUTS
    ),
    t("image_input", "FP16", (-1, 3, -1, -1), optional=True),
    t("image_bytes_input", "UINT8", (-1, -1, -1, -1), optional=True),
    t("image_url_input", "STRING", optional=True),
    t("video_bytes_input", "UINT8", (-1, -1, -1, -1), optional=True),
    t("num_draft_tokens", "INT32", optional=True),
    t("use_draft_logits", "BOOL", optional=True, scalar=True),
)
# What upstream's models give back beside the text or tokens (the tensorrt_llm model's, passed on
# by the ensemble and the BLS); upstream's ensemble lists kv_cache_alloc_total_blocks twice,
# which a repository cannot (validate.py refuses duplicate names)
RESULT_OUTPUTS = (
    t("cum_log_probs", "FP32", (-1,)),
    t("output_log_probs", "FP32", (-1, -1)),
    t("context_logits", LOGITS, (-1, -1)),
    t("generation_logits", LOGITS, (-1, -1, -1)),
    t("batch_index", "INT32"),
    t("sequence_index", "INT32"),
    t("kv_cache_alloc_new_blocks", "INT32"),
    t("kv_cache_reused_blocks", "INT32"),
    t("kv_cache_alloc_total_blocks", "INT32"),
    t("arrival_time_ns", "INT64"),
    t("first_scheduled_time_ns", "INT64"),
    t("first_token_time_ns", "INT64"),
    t("last_token_time_ns", "INT64"),
    t("acceptance_rate", "FP32"),
    t("total_accepted_draft_tokens", "INT32"),
    t("total_draft_tokens", "INT32"),
    t("num_input_tokens", "INT32"),
    t("num_output_tokens", "INT32"),
)
# sequence_length (ours, not upstream's, after upstream's so their order stays upstream's): tokens
# behind each response's text_output, for clients that count tokens (a streamed response can
# carry several when the server falls behind)
ENSEMBLE_OUTPUTS = (
    t("text_output", "STRING", (-1,)),
    *RESULT_OUTPUTS,
    t("sequence_length", "INT32", (-1,)),
)

PREPROCESSING_INPUTS = (
    t("QUERY", "STRING"),
    t("REQUEST_OUTPUT_LEN", "INT32"),
    t("BAD_WORDS_DICT", "STRING", (-1,), optional=True),
    t("STOP_WORDS_DICT", "STRING", (-1,), optional=True),
    t("END_ID", "INT32", optional=True),
    t("PAD_ID", "INT32", optional=True),
    t("DECODER_QUERY", "STRING", optional=True),  # refused: the engines are decoder-only
    t("EMBEDDING_BIAS_WORDS", "STRING", (-1,), optional=True),
    t("EMBEDDING_BIAS_WEIGHTS", "FP32", (-1,), optional=True),
    t("PROMPT_TABLE_EXTRA_ID", "UINT64", optional=True),
)
# upstream's, in its order; the multimodal ones (from PIXEL_VALUES on) are declared and never
# sent: the pipeline deploys no multimodal encoder
PREPROCESSING_OUTPUTS = (
    t("INPUT_ID", "INT32", (-1,)),
    t("REQUEST_INPUT_LEN", "INT32"),
    t("DECODER_INPUT_ID", "INT32", (-1,)),
    t("REQUEST_DECODER_INPUT_LEN", "INT32"),
    t("BAD_WORDS_IDS", "INT32", (2, -1)),
    t("STOP_WORDS_IDS", "INT32", (2, -1)),
    t("EMBEDDING_BIAS", "FP32", (-1,)),
    t("REQUEST_OUTPUT_LEN", "INT32", (-1,)),
    t("OUT_END_ID", "INT32"),
    t("OUT_PAD_ID", "INT32"),
    t("OUT_PROMPT_TABLE_EXTRA_IDS", "UINT64", (-1,)),
    t("PIXEL_VALUES", "FP16", (-1, -1, -1, -1)),
    t("ASPECT_RATIO_IDS", "INT64", (-1,)),
    t("ASPECT_RATIO_MASK", "INT64", (-1, -1)),
    t("CROSS_ATTENTION_MASK", "INT64", (-1, -1, -1)),
    t("IMAGE_SIZES", "INT64", (-1, 2)),
    t("IS_VIDEO_INPUT", "BOOL"),
    t("ATTENTION_MASK", "INT64", (-1,)),
    t("IMAGE_GRID_THW", "INT64", (3,)),
    t("VISION_INPUT_ID", "INT32", (-1,)),
)

# `tensorrt_llm`: the tensorrtllm backend's template, as vendored (docs/trtllm_reference.md,
# section 5.1): every input and output, in its order. Placeholder types: the logits' (LOGITS, set
# per repository), the encoder features' and the prompt table's (FP16, as upstream fills them).
_PLACEHOLDERS = {"FEATURES": "TYPE_FP16", "PROMPT_TABLE": "TYPE_FP16"}


def _upstream(name: str, data_type: str, dims: tuple[int, ...], flags: str = "") -> TensorSpec:
    return TensorSpec(
        name,
        _PLACEHOLDERS.get(data_type, data_type),
        dims,
        optional="o" in flags,
        scalar="r" in flags,
        ragged="g" in flags,
    )


LLM_INPUTS = tuple(_upstream(*spec) for spec in triton_io.INPUTS)
LLM_OUTPUTS = tuple(_upstream(*spec) for spec in triton_io.OUTPUTS)

POSTPROCESSING_INPUTS = (
    t("TOKENS_BATCH", "INT32", (-1, -1)),
    t("SEQUENCE_LENGTH", "INT32", (-1,)),
)
POSTPROCESSING_OUTPUTS = (t("OUTPUT", "STRING", (-1,)), t("OUT_SEQUENCE_LENGTH", "INT32", (-1,)))

# text_output of the torch backend's `tensorrt_llm` (ours; the tensorrtllm backend cannot
# detokenize): each response's text, as postprocessing would write it for its tokens, except that a
# stream's character split over responses comes whole in the later one
LLM_TEXT_OUTPUT = t("text_output", "STRING", (-1,))
# text inputs of the torch backend's `tensorrt_llm` (ours), tokenized as preprocessing does: with
# them input_ids and input_lengths are left out, so the torch model takes those as optional
LLM_TEXT_INPUTS = (
    t("text_input", "STRING", optional=True),
    t("bad_words", "STRING", (-1,), optional=True),
    t("stop_words", "STRING", (-1,), optional=True),
    # the ensemble's inputs preprocessing would take: decoder_text_input is ignored (decoder-only
    # engines, as upstream's preprocessing and backend treat it), the others refused by name
    t("decoder_text_input", "STRING", optional=True),
    t("embedding_bias_words", "STRING", (-1,), optional=True),
    t("embedding_bias_weights", "FP32", (-1,), optional=True),
    t("prompt_table_extra_id", "UINT64", optional=True),
)
# the torch backend's `tensorrt_llm`: upstream's inputs (draft_logits float32, as the logits it
# would return) and ours after them
TORCH_LLM_INPUTS = (
    *with_logits_type(
        (replace(s, optional=True) if s.name == "input_lengths" else s for s in LLM_INPUTS),
        LOGITS_TYPES["float32"],
    ),
    *LLM_TEXT_INPUTS,
    # ours, as later upstream versions: presence and frequency penalties skip this many prompt
    # tokens (docs/trtllm_reference.md, section 9.2)
    t("prompt_ignore_length", "INT32", scalar=True, optional=True),
    # ours: min-p sampling (vLLM's min_p; docs/trtllm_reference.md, section 9.2)
    t("min_p", "FP32", scalar=True, optional=True),
    # ours: the likeliest tokens' log probabilities of each output token (vLLM's logprobs=N)
    # and of each prompt token (vLLM's prompt_logprobs=N; -1 off); section 9.3
    t("num_top_log_probs", "INT32", scalar=True, optional=True),
    t("num_prompt_log_probs", "INT32", scalar=True, optional=True),
)
# ours, for num_top_log_probs ([batch, beam, tokens, N], as output_log_probs' [batch, beam,
# tokens]) and num_prompt_log_probs ([batch, prompt tokens(, N)]; the first position has none: 0)
TOP_LOG_PROBS_OUTPUTS = (
    t("output_top_log_probs", "FP32", (-1, -1, -1)),
    t("output_top_log_prob_ids", "INT32", (-1, -1, -1)),
    t("prompt_log_probs", "FP32", (-1,)),
    t("prompt_top_log_probs", "FP32", (-1, -1)),
    t("prompt_top_log_prob_ids", "INT32", (-1, -1)),
)
# upstream's outputs, then ours
TORCH_LLM_OUTPUTS = with_logits_type(
    (*LLM_OUTPUTS, *TOP_LOG_PROBS_OUTPUTS, LLM_TEXT_OUTPUT), LOGITS_TYPES["float32"]
)

# Ensemble steps: (model, {model input: ensemble tensor}, {model output: ensemble tensor}).
PREPROCESSING_STEP = (
    "preprocessing",
    {
        "QUERY": "text_input",
        "REQUEST_OUTPUT_LEN": "max_tokens",
        "BAD_WORDS_DICT": "bad_words",
        "STOP_WORDS_DICT": "stop_words",
        "END_ID": "end_id",
        "PAD_ID": "pad_id",
        "DECODER_QUERY": "decoder_text_input",
        "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
        "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights",
        "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id",
    },
    {
        "INPUT_ID": "_INPUT_ID",
        "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
        "DECODER_INPUT_ID": "_DECODER_INPUT_ID",
        "REQUEST_DECODER_INPUT_LEN": "_REQUEST_DECODER_INPUT_LEN",
        "BAD_WORDS_IDS": "_BAD_WORDS_IDS",
        "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
        "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN",
        "OUT_END_ID": "_PREPROCESSOR_END_ID",
        "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID",
        "EMBEDDING_BIAS": "_EMBEDDING_BIAS",
        "OUT_PROMPT_TABLE_EXTRA_IDS": "_OUT_PROMPT_TABLE_EXTRA_IDS",
    },
)
LLM_STEP_INPUTS = {
    "input_ids": "_INPUT_ID",
    "input_lengths": "_REQUEST_INPUT_LEN",
    "decoder_input_ids": "_DECODER_INPUT_ID",
    "decoder_input_lengths": "_REQUEST_DECODER_INPUT_LEN",
    "request_output_len": "_REQUEST_OUTPUT_LEN",
    "end_id": "_PREPROCESSOR_END_ID",
    "pad_id": "_PREPROCESSOR_PAD_ID",
    "stop_words_list": "_STOP_WORDS_IDS",
    "bad_words_list": "_BAD_WORDS_IDS",
    "embedding_bias": "_EMBEDDING_BIAS",
    "prompt_table_extra_ids": "_OUT_PROMPT_TABLE_EXTRA_IDS",
    **LLM_DIRECT_INPUTS,
}
# tensorrt_llm tokenizes (backend=torch): the ensemble's inputs go to it as they come
TOKENIZING_LLM_STEP_INPUTS = {
    "text_input": "text_input",
    "request_output_len": "max_tokens",
    "end_id": "end_id",
    "pad_id": "pad_id",
    "stop_words": "stop_words",
    "bad_words": "bad_words",
    **{name: name for name in PREPROCESSING_STEP[1].values() if name not in ("max_tokens",)},
    **LLM_DIRECT_INPUTS,
}
POSTPROCESSING_STEP = (
    "postprocessing",
    {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
    {"OUTPUT": "text_output", "OUT_SEQUENCE_LENGTH": "sequence_length"},
)


def ensemble_steps(is_llm_tokenizing: bool, is_llm_detokenizing: bool) -> tuple:
    """Upstream: preprocessing -> tensorrt_llm -> postprocessing, where every response of
    tensorrt_llm is one execution of postprocessing. A torch tensorrt_llm that tokenizes or
    detokenizes itself replaces the step before or after it."""
    llm_step = (
        "tensorrt_llm",
        TOKENIZING_LLM_STEP_INPUTS if is_llm_tokenizing else LLM_STEP_INPUTS,
        {
            **(
                {"text_output": "text_output", "sequence_length": "sequence_length"}
                if is_llm_detokenizing
                else {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"}
            ),
            **{spec.name: spec.name for spec in RESULT_OUTPUTS},
        },
    )
    return (
        *(() if is_llm_tokenizing else (PREPROCESSING_STEP,)),
        llm_step,
        *(() if is_llm_detokenizing else (POSTPROCESSING_STEP,)),
    )


MODEL_NAMES = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
