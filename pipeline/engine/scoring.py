"""Prompt scoring: logits for whole prompts from one packed prefill of the engine's own model.

It runs on a KV cache of its own (one block per prompt), so it never touches the serving cache
and works for a model built straight from a checkpoint (the quantize gate) as for a loaded engine.
"""

import torch

from pipeline.engine.batch_metadata import BatchMetadata


@torch.inference_mode()
def prompt_logits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    # ids [B, S] on the model's device -> logits [B, S, V]; each prompt is its own S-token block
    num_seqs, seq_len = ids.shape
    device = ids.device
    meta = BatchMetadata.for_prompts(num_seqs, seq_len, seq_len, device)
    kv_cache = torch.zeros(
        num_layers, 2, num_seqs, seq_len, num_kv_heads, head_dim, dtype=dtype, device=device
    )
    hidden = model(ids.reshape(-1), meta, kv_cache)  # [B*S, hidden]
    return model.compute_logits(hidden).view(num_seqs, seq_len, -1)
