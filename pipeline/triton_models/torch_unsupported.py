"""The tensorrtllm backend's inputs the torch engine does not serve, refused by name.

The ensemble and the BLS declare upstream's whole client interface (interface.py), and Triton
accepts whatever a model declares; a request that relies on one of these gets an error naming
the input, its value and the backend, never a silently different answer. An empty tensor, or a
value meaning "off", asks for nothing and passes. embedding_bias itself (a per-vocabulary bias)
is served; the ensemble's embedding_bias_words/weights are not (text the torch model would have
to tokenize into a bias).
"""

import numpy as np

# input -> what the torch engine lacks, for the error
ABSENT_FEATURES = {
    "embedding_bias_words": "no embedding bias",
    "embedding_bias_weights": "no embedding bias",
    "prompt_embedding_table": "no prompt tables (p-tuning)",
    "prompt_vocab_size": "no prompt tables (p-tuning)",
    "prompt_table_extra_ids": "no prompt tables (p-tuning)",
    "prompt_table_extra_id": "no prompt tables (p-tuning)",
    # adapters are deployed with the model (lora.adapters) and named by lora_task_id
    "lora_weights": "no LoRA weights in requests (deploy the adapter, send its lora_task_id)",
    "lora_config": "no LoRA weights in requests (deploy the adapter, send its lora_task_id)",
    "encoder_input_features": "no encoder-decoder models",
    "encoder_output_lengths": "no encoder-decoder models",
    "cross_attention_mask": "no encoder-decoder models",
    "skip_cross_attn_blocks": "no encoder-decoder models",
    # speculative decoding drafts its own tokens (deploy.torch.spec)
    "draft_input_ids": "no client draft tokens (speculative decoding drafts its own)",
    "draft_logits": "no client draft tokens (speculative decoding drafts its own)",
    "draft_acceptance_threshold": "no client draft tokens (speculative decoding drafts its own)",
    "lookahead_window_size": "no speculative decoding (lookahead)",
    "lookahead_ngram_size": "no speculative decoding (lookahead)",
    "lookahead_verification_set_size": "no speculative decoding (lookahead)",
    "runtime_top_p_min": "no top-p decay",
    "runtime_top_p_decay": "no top-p decay",
    "runtime_top_p_reset_ids": "no top-p decay",
    "mrope_rotary_cos_sin": "no multimodal rotary embeddings (mrope)",
    "mrope_position_deltas": "no multimodal rotary embeddings (mrope)",
    "context_phase_params": "no disaggregated serving (context phase parameters)",
    "retention_token_range_starts": "no KV-cache retention priorities",
    "retention_token_range_ends": "no KV-cache retention priorities",
    "retention_token_range_priorities": "no KV-cache retention priorities",
    "retention_token_range_durations_ms": "no KV-cache retention priorities",
    "retention_decode_priority": "no KV-cache retention priorities",
    "retention_decode_duration_ms": "no KV-cache retention priorities",
}
# Accepted and unused, as the tensorrtllm backend uses them with a decoder-only engine:
# decoder_text_input, decoder_input_ids and decoder_input_lengths (an encoder-decoder model's
# decoder prompt; upstream's preprocessing always sends one). Beam search's beam_width,
# len_penalty and early_stopping are served (llm_request.py); beam_search_diversity_rate is
# refused with beam_width > 1 (the engine has no diverse beam search) and unused without.


def _describe(value: np.ndarray) -> str:
    flat = value.reshape(-1)
    if flat.size == 1:
        item = flat[0]
        return repr(item.decode() if isinstance(item, bytes) else item.item())
    return f"<{list(value.shape)} {value.dtype}>"


def refuse_unsupported(arrays: dict[str, np.ndarray]) -> None:
    """Raise ValueError naming every input of this request backend=torch cannot serve."""
    problems = []
    beam_width = arrays.get("beam_width")
    diversity = arrays.get("beam_search_diversity_rate")
    if (
        beam_width is not None
        and beam_width.size
        and int(beam_width.reshape(-1)[0]) > 1
        and diversity is not None
        and diversity.any()
    ):
        problems.append(
            f"beam_search_diversity_rate={_describe(diversity)} (no diverse beam search; "
            f"leave it out or send 0)"
        )
    for name, lacking in ABSENT_FEATURES.items():
        value = arrays.get(name)
        if value is None or not value.size:
            continue
        if name.startswith("prompt_table_extra_id") and not value.any():
            continue  # 0: no prompt-table token
        problems.append(f"{name}={_describe(value)} ({lacking}; leave it out)")
    if problems:
        raise ValueError("not supported by backend=torch: " + "; ".join(problems))
