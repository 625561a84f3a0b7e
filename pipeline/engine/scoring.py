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
    meta = BatchMetadata(
        positions=torch.arange(seq_len, device=device).repeat(num_seqs),
        slot_mapping=torch.arange(num_seqs * seq_len, device=device),
        block_tables=torch.arange(num_seqs, dtype=torch.int32, device=device)[:, None],
        context_lens=torch.full((num_seqs,), seq_len, dtype=torch.int32, device=device),
        is_decode=False,
        query_lens=[seq_len] * num_seqs,
        context_lens_host=[seq_len] * num_seqs,
    )
    kv_cache = torch.zeros(
        num_layers, 2, num_seqs, seq_len, num_kv_heads, head_dim, dtype=dtype, device=device
    )
    hidden = model(ids.reshape(-1), meta, kv_cache)  # [B*S, hidden]
    return model.compute_logits(hidden).view(num_seqs, seq_len, -1)
