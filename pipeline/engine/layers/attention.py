"""Attention over the paged KV cache, rotary embedding included: plain PyTorch everywhere (the
CPU path, and the reference the kernels are tested against); on CUDA, Triton kernels
(pipeline.engine.kernels) rotate q and k as they store K/V, then attend: split-K paged decode
for decode steps, one varlen kernel over the packed batch for steps with prompt chunks.

Cache layout per layer: k_cache, v_cache [num_blocks, block_size, Hkv, D]. New K/V are written
to their slots first; attention then reads every sequence's keys through its block table, so a
prompt chunk sees the chunks before it, and a recomputed sequence is handled like a prompt.
With a quantized cache (kv_scale set: quant/kv_cache.py) the caches hold fp8 codes.
"""

import torch
from torch import nn
from torch.nn import functional as F

from pipeline.engine import kernels
from pipeline.engine.kernels.reference import fold_kv_scale, store_kv, varlen_attention
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.layers.rotary import RotaryEmbedding


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    kv_scale: float | None = None,
) -> torch.Tensor:
    # q [B, H, D]; caches [NB, BS, Hkv, D] (fp8 codes when kv_scale is set); block_tables [B, M];
    # context_lens [B] -> [B, H, D]
    softmax_scale, out_scale = fold_kv_scale(scale, kv_scale)
    blocks = block_tables.long()
    k = k_cache[blocks].flatten(1, 2).transpose(1, 2).to(q.dtype)  # [B, Hkv, M*BS, D]
    v = v_cache[blocks].flatten(1, 2).transpose(1, 2).to(q.dtype)
    key_pos = torch.arange(k.shape[2], device=q.device)
    mask = key_pos[None, :] < context_lens[:, None]  # [B, M*BS]; no host sync: graph safe
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2),
        k,
        v,
        attn_mask=mask[:, None, None, :],
        scale=softmax_scale,
        enable_gqa=True,
    ).squeeze(2)
    return out if kv_scale is None else out * out_scale


class Attention(nn.Module):
    """Rotates q and k, writes this step's K/V into the layer's cache, then attends (decode or
    varlen). kv_scale: the layer's kv_cache_scaling_factor when the cache holds fp8 codes."""

    def __init__(
        self,
        head_dim: int,
        rotary: RotaryEmbedding,
        device: torch.device,
        kv_scale: float | None = None,
    ):
        super().__init__()
        self.scale = head_dim**-0.5
        self.kv_scale = kv_scale
        self.rotary = rotary
        self.rotary_store_kernel = kernels.load("rotary_kv_store", device)
        self.decode_kernel = kernels.load("paged_attention", device)
        self.varlen_kernel = kernels.load("varlen_attention", device)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: BatchMetadata,
    ) -> torch.Tensor:
        # q [T, H, D]; k, v [T, Hkv, D] (q, k not rotated yet); kv_cache [2, NB, BS, Hkv, D]
        # -> [T, H, D]
        k_cache, v_cache = kv_cache[0], kv_cache[1]
        if self.rotary_store_kernel:
            q = self.rotary_store_kernel.rotary_store_kv(
                meta.positions,
                q,
                k,
                v,
                self.rotary.cos,
                self.rotary.sin,
                k_cache,
                v_cache,
                meta.slot_mapping,
                self.kv_scale,
            )
        else:
            q, k = self.rotary(meta.positions, q, k)
            store_kv(k, v, k_cache, v_cache, meta.slot_mapping, self.kv_scale)
        if meta.is_decode:
            kernel = self.decode_kernel
            # tl.dot needs blocks and heads of at least MIN_DOT rows
            if kernel and min(k_cache.shape[1], q.shape[-1]) >= kernel.MIN_DOT:
                decode = kernel.paged_decode_attention
            else:
                decode = paged_decode_attention
            return decode(
                q,
                k_cache,
                v_cache,
                meta.block_tables,
                meta.context_lens,
                self.scale,
                self.kv_scale,
            )
        varlen = self.varlen_kernel.varlen_attention if self.varlen_kernel else varlen_attention
        return varlen(
            q,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.query_start,
            meta.context_lens,
            self.scale,
            self.kv_scale,
        )
