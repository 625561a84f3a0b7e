"""Prompt scoring: logits for whole prompts from one packed prefill of the engine's own model.

It runs on a KV cache of its own (one block per prompt), so it never touches the serving cache
and works for a model built straight from a checkpoint (the quantize gate) as for a loaded engine.
In an engine of several ranks each rank runs its part (stage_prompt_logits): a pipeline stage its
own layers, the previous stage's hidden states in and its own out, and the last stage's logits go
back to rank 0.
"""

import torch

from pipeline.engine.execution.launch_schedule import Stage
from pipeline.engine.layers.batch_metadata import BatchMetadata


@torch.inference_mode()
def stage_forward(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    num_seqs: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    # inputs: ids [B*S] or hidden [B*S, 2, hidden] of B prompts of S tokens each -> the model's
    # output: hidden [B*S, hidden] (last stage) or [B*S, 2, hidden]
    seq_len = inputs.shape[0] // num_seqs
    device = inputs.device
    meta = BatchMetadata.for_prompts(num_seqs, seq_len, seq_len, device)
    kv_cache = torch.zeros(
        num_layers, 2, num_seqs, seq_len, num_kv_heads, head_dim, dtype=dtype, device=device
    )
    return model(inputs, meta, kv_cache)


@torch.inference_mode()
def prompt_logits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    # ids [B, S] on the model's device -> logits [B, S, V] (a model with every layer)
    num_seqs, seq_len = ids.shape
    args = (num_layers, num_kv_heads, head_dim, dtype)
    hidden = stage_forward(model, ids.reshape(-1), num_seqs, *args)
    return model.compute_logits(hidden).view(num_seqs, seq_len, -1)


@torch.inference_mode()
def stage_prompt_logits(
    model: torch.nn.Module,
    stage: Stage,
    ids: torch.Tensor,
    device: torch.device,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    # ids [B, S] (host) -> logits [B, S, V] on rank 0 and the last stage; None elsewhere
    num_seqs, seq_len = ids.shape
    link = stage.link
    if link is not None:
        link.settle()  # the sends of the launch before
    inputs = ids.to(device).reshape(-1) if stage.is_first else link.recv_hidden(ids.numel())
    out = stage_forward(model, inputs, num_seqs, num_layers, num_kv_heads, head_dim, dtype)
    logits = None
    if not stage.is_last:
        link.send_hidden(out)
    else:
        logits = model.compute_logits(out)
        if stage.sends_logits:
            link.send_logits(logits)
    if stage.receives_logits:
        logits = link.recv_logits(ids.numel())
    return None if logits is None else logits.view(num_seqs, seq_len, -1)
