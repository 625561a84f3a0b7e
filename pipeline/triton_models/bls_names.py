"""The BLS's tables of names: which client input goes to preprocessing under which name, which
preprocessing output goes to the LLM model, which inputs need models the pipeline does not
deploy, and the LLM model's results passed on (upstream's order, docs/trtllm_reference.md,
section 9.1). No imports: the deploy stage copies it beside the BLS, as input_checks.py."""

PREPROCESSING_INPUTS = {
    "text_input": "QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
    "decoder_text_input": "DECODER_QUERY",
    "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
    "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS",
    "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID",
}
PREPROCESSED = {
    "INPUT_ID": "input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "DECODER_INPUT_ID": "decoder_input_ids",
    "REQUEST_DECODER_INPUT_LEN": "decoder_input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "STOP_WORDS_IDS": "stop_words_list",
    "BAD_WORDS_IDS": "bad_words_list",
    "EMBEDDING_BIAS": "embedding_bias",
    "OUT_PROMPT_TABLE_EXTRA_IDS": "prompt_table_extra_ids",
}
# upstream's BLS inputs for models the pipeline does not deploy -> what is missing
# (num_draft_tokens is served when a draft model is deployed: draft_target.py)
NOT_DEPLOYED = {
    "image_input": "a multimodal encoder",
    "image_bytes_input": "a multimodal encoder",
    "image_url_input": "a multimodal encoder",
    "video_bytes_input": "a multimodal encoder",
    "num_draft_tokens": "a draft model (speculative decoding)",
    "use_draft_logits": "a draft model compared by its logits (the pipeline compares tokens)",
}
# the LLM model's results passed on as they come; output_log_probs of responses merged into one
# (accumulate_tokens waits out split characters) are joined
RESULTS = (
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
    "num_input_tokens",
    "num_output_tokens",
)
