"""The models' tensors, as the tensorrtllm backend's templates declare them (TensorRT-LLM 1.2.x).

Only the subset the pipeline drives is declared; a client written for the upstream ensemble works
unchanged, and the ensemble maps onto either backend's `tensorrt_llm` model.
"""

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    data_type: str  # a ModelConfig DataType name, e.g. "TYPE_INT32"
    dims: tuple[int, ...]  # without the batch dim (every model batches)
    optional: bool = False
    scalar: bool = False  # dims [1] + reshape { shape: [] }, as the tensorrt_llm template writes
    ragged: bool = False  # allow_ragged_batch


def t(name: str, data_type: str, dims: tuple[int, ...] = (1,), **flags: bool) -> TensorSpec:
    return TensorSpec(name, f"TYPE_{data_type}", dims, **flags)


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
)
# sequence_length (ours, not upstream's): tokens behind each response's text_output, for clients
# that count tokens (a streamed response can carry several when the server falls behind)
ENSEMBLE_OUTPUTS = (t("text_output", "STRING", (-1,)), t("sequence_length", "INT32", (-1,)))

PREPROCESSING_INPUTS = (
    t("QUERY", "STRING"),
    t("REQUEST_OUTPUT_LEN", "INT32"),
    t("BAD_WORDS_DICT", "STRING", (-1,), optional=True),
    t("STOP_WORDS_DICT", "STRING", (-1,), optional=True),
    t("END_ID", "INT32", optional=True),
    t("PAD_ID", "INT32", optional=True),
)
PREPROCESSING_OUTPUTS = (
    t("INPUT_ID", "INT32", (-1,)),
    t("REQUEST_INPUT_LEN", "INT32"),
    t("BAD_WORDS_IDS", "INT32", (2, -1)),
    t("STOP_WORDS_IDS", "INT32", (2, -1)),
    t("REQUEST_OUTPUT_LEN", "INT32"),
    t("OUT_END_ID", "INT32"),
    t("OUT_PAD_ID", "INT32"),
)

# `tensorrt_llm`: the inputs/outputs of the tensorrtllm backend's model that the pipeline uses.
LLM_INPUTS = (
    t("input_ids", "INT32", (-1,), optional=True, ragged=True),
    t("input_lengths", "INT32", scalar=True),
    t("request_output_len", "INT32", scalar=True),
    t("end_id", "INT32", scalar=True, optional=True),
    t("pad_id", "INT32", scalar=True, optional=True),
    t("stop_words_list", "INT32", (2, -1), optional=True),
    t("bad_words_list", "INT32", (2, -1), optional=True),
    t("runtime_top_k", "INT32", scalar=True, optional=True),
    t("runtime_top_p", "FP32", scalar=True, optional=True),
    t("temperature", "FP32", scalar=True, optional=True),
    t("seed", "UINT64", scalar=True, optional=True),
    t("streaming", "BOOL", scalar=True, optional=True),
    t("exclude_input_in_output", "BOOL", scalar=True, optional=True),
    # true: cancel the requests in flight that carry this request's id (how the BLS cancels)
    t("stop", "BOOL", scalar=True, optional=True),
)
LLM_OUTPUTS = (
    t("output_ids", "INT32", (-1, -1)),
    t("sequence_length", "INT32", (-1,)),
)

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
)
TORCH_LLM_INPUTS = (
    *(replace(s, optional=True) if s.name == "input_lengths" else s for s in LLM_INPUTS),
    *LLM_TEXT_INPUTS,
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
    },
    {
        "INPUT_ID": "_INPUT_ID",
        "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
        "BAD_WORDS_IDS": "_BAD_WORDS_IDS",
        "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
        "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN",
        "OUT_END_ID": "_PREPROCESSOR_END_ID",
        "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID",
    },
)
LLM_STEP_INPUTS = {
    "input_ids": "_INPUT_ID",
    "input_lengths": "_REQUEST_INPUT_LEN",
    "request_output_len": "_REQUEST_OUTPUT_LEN",
    "end_id": "_PREPROCESSOR_END_ID",
    "pad_id": "_PREPROCESSOR_PAD_ID",
    "stop_words_list": "_STOP_WORDS_IDS",
    "bad_words_list": "_BAD_WORDS_IDS",
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "temperature": "temperature",
    "seed": "seed",
    "streaming": "stream",
    "exclude_input_in_output": "exclude_input_in_output",
}
# tensorrt_llm tokenizes (backend=torch): the ensemble's inputs go to it as they come
TOKENIZING_LLM_STEP_INPUTS = {
    "text_input": "text_input",
    "request_output_len": "max_tokens",
    "end_id": "end_id",
    "pad_id": "pad_id",
    "stop_words": "stop_words",
    "bad_words": "bad_words",
    **{k: v for k, v in LLM_STEP_INPUTS.items() if not v.startswith("_")},
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
        {"text_output": "text_output", "sequence_length": "sequence_length"}
        if is_llm_detokenizing
        else {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"},
    )
    return (
        *(() if is_llm_tokenizing else (PREPROCESSING_STEP,)),
        llm_step,
        *(() if is_llm_detokenizing else (POSTPROCESSING_STEP,)),
    )


MODEL_NAMES = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
