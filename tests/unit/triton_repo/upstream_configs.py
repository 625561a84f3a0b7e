"""The outputs of the tensorrtllm backend's models, as TensorRT-LLM 1.2's
triton_backend/all_models/inflight_batcher_llm/*/config.pbtxt declare them, in their order
(docs/trtllm_reference.md, section 9.7), and ours, which come after them."""

from pipeline.trtllm.triton_io import OUTPUTS as LLM_OUTPUTS

RESULTS = [
    ("cum_log_probs", "FP32", [-1]),
    ("output_log_probs", "FP32", [-1, -1]),
    ("context_logits", "FP32", [-1, -1]),  # ${logits_datatype}: float32 engines
    ("generation_logits", "FP32", [-1, -1, -1]),
    ("batch_index", "INT32", [1]),
    ("sequence_index", "INT32", [1]),
    ("kv_cache_alloc_new_blocks", "INT32", [1]),
    ("kv_cache_reused_blocks", "INT32", [1]),
    ("kv_cache_alloc_total_blocks", "INT32", [1]),
    ("arrival_time_ns", "INT64", [1]),
    ("first_scheduled_time_ns", "INT64", [1]),
    ("first_token_time_ns", "INT64", [1]),
    ("last_token_time_ns", "INT64", [1]),
    ("acceptance_rate", "FP32", [1]),
    ("total_accepted_draft_tokens", "INT32", [1]),
    ("total_draft_tokens", "INT32", [1]),
    ("num_input_tokens", "INT32", [1]),
    ("num_output_tokens", "INT32", [1]),
]
# model -> (upstream's outputs in order, ours after them): (name, data type, dims)
UPSTREAM = {
    "preprocessing": (
        [
            ("INPUT_ID", "INT32", [-1]),
            ("REQUEST_INPUT_LEN", "INT32", [1]),
            ("DECODER_INPUT_ID", "INT32", [-1]),
            ("REQUEST_DECODER_INPUT_LEN", "INT32", [1]),
            ("BAD_WORDS_IDS", "INT32", [2, -1]),
            ("STOP_WORDS_IDS", "INT32", [2, -1]),
            ("EMBEDDING_BIAS", "FP32", [-1]),
            ("REQUEST_OUTPUT_LEN", "INT32", [-1]),
            ("OUT_END_ID", "INT32", [1]),
            ("OUT_PAD_ID", "INT32", [1]),
            ("OUT_PROMPT_TABLE_EXTRA_IDS", "UINT64", [-1]),
            ("PIXEL_VALUES", "FP16", [-1, -1, -1, -1]),
            ("ASPECT_RATIO_IDS", "INT64", [-1]),
            ("ASPECT_RATIO_MASK", "INT64", [-1, -1]),
            ("CROSS_ATTENTION_MASK", "INT64", [-1, -1, -1]),
            ("IMAGE_SIZES", "INT64", [-1, 2]),
            ("IS_VIDEO_INPUT", "BOOL", [1]),
            ("ATTENTION_MASK", "INT64", [-1]),
            ("IMAGE_GRID_THW", "INT64", [3]),
            ("VISION_INPUT_ID", "INT32", [-1]),
        ],
        [],
    ),
    "postprocessing": (
        [("OUTPUT", "STRING", [-1])],
        [("OUT_SEQUENCE_LENGTH", "INT32", [-1])],
    ),
    "ensemble": ([("text_output", "STRING", [-1]), *RESULTS], [("sequence_length", "INT32", [-1])]),
    "tensorrt_llm_bls": (
        [("text_output", "STRING", [-1]), *RESULTS],
        [("sequence_length", "INT32", [-1])],
    ),
    "tensorrt_llm": (  # the vendored template (section 5.1); the torch model adds top log
        # probabilities (section 9.3) and its text
        [
            (name, "FP32" if dtype == "LOGITS" else dtype.removeprefix("TYPE_"), list(dims))
            for name, dtype, dims in LLM_OUTPUTS
        ],
        [
            ("output_top_log_probs", "FP32", [-1, -1, -1]),
            ("output_top_log_prob_ids", "INT32", [-1, -1, -1]),
            ("prompt_log_probs", "FP32", [-1]),
            ("prompt_top_log_probs", "FP32", [-1, -1]),
            ("prompt_top_log_prob_ids", "INT32", [-1, -1]),
            ("text_output", "STRING", [-1]),
        ],
    ),
}
