"""Attention over the paged KV cache: plain PyTorch everywhere (the CPU path, and the reference
the kernels are tested against); on CUDA, Triton kernels (pipeline.engine.kernels) store K/V and
attend: split-K paged decode for decode steps, one varlen kernel over the packed batch for
steps with prompt chunks.

Cache layout per layer: k_cache, v_cache [num_blocks, block_size, Hkv, D]. New K/V are written
to their slots first; attention then reads every sequence's keys through its block table, so a
prompt chunk sees the chunks before it, and a recomputed sequence is handled like a prompt.
"""

import torch
from torch import nn
from torch.nn import functional as F

from pipeline.engine import kernels
from pipeline.engine.batch_metadata import BatchMetadata
from pipeline.engine.kernels.reference import store_kv


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    # q [B, H, D]; caches [NB, BS, Hkv, D]; block_tables [B, M]; context_lens [B] -> [B, H, D]
    blocks = block_tables.long()
    k = k_cache[blocks].flatten(1, 2).transpose(1, 2)  # [B, Hkv, M*BS, D]
    v = v_cache[blocks].flatten(1, 2).transpose(1, 2)
    key_pos = torch.arange(k.shape[2], device=q.device)
    mask = key_pos[None, :] < context_lens[:, None]  # [B, M*BS]; no host sync: graph safe
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=mask[:, None, None, :], scale=scale, enable_gqa=True
    )
    return out.squeeze(2)


def varlen_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_lens: list[int],
    context_lens: list[int],
    scale: float,
) -> torch.Tensor:
    # q [T, H, D] packed (no padding); caches [NB, BS, Hkv, D] -> [T, H, D]
    block_size = k_cache.shape[1]
    out = torch.empty_like(q)
    start = 0
    for i, (q_len, ctx_len) in enumerate(zip(query_lens, context_lens, strict=True)):
        blocks = block_tables[i, : -(-ctx_len // block_size)].long()
        k = k_cache[blocks].flatten(0, 1)[:ctx_len].transpose(0, 1)  # [Hkv, ctx, D]
        v = v_cache[blocks].flatten(0, 1)[:ctx_len].transpose(0, 1)
        qi = q[start : start + q_len].transpose(0, 1)  # [H, q_len, D]
        if q_len == ctx_len:
            o = F.scaled_dot_product_attention(
                qi, k, v, is_causal=True, scale=scale, enable_gqa=True
            )
        else:  # earlier tokens are cached: query j sits at position ctx_len - q_len + j
            key_pos = torch.arange(ctx_len, device=q.device)
            query_pos = torch.arange(ctx_len - q_len, ctx_len, device=q.device)
            mask = key_pos[None, :] <= query_pos[:, None]
            o = F.scaled_dot_product_attention(
                qi, k, v, attn_mask=mask, scale=scale, enable_gqa=True
            )
        out[start : start + q_len] = o.transpose(0, 1)
        start += q_len
    return out


class Attention(nn.Module):
    """Writes this step's K/V into the layer's cache, then attends (decode or varlen)."""

    def __init__(self, head_dim: int, device: torch.device):
        super().__init__()
        self.scale = head_dim**-0.5
        self.store_kernel = kernels.load("kv_store", device)
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
        # q [T, H, D]; k, v [T, Hkv, D]; kv_cache [2, NB, BS, Hkv, D] -> [T, H, D]
        k_cache, v_cache = kv_cache[0], kv_cache[1]
        if self.store_kernel:
            self.store_kernel.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        else:
            store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        if meta.is_decode:
            kernel = self.decode_kernel
            # tl.dot needs blocks and heads of at least MIN_DOT rows
            if kernel and min(k_cache.shape[1], q.shape[-1]) >= kernel.MIN_DOT:
                decode = kernel.paged_decode_attention
            else:
                decode = paged_decode_attention
            return decode(q, k_cache, v_cache, meta.block_tables, meta.context_lens, self.scale)
        if self.varlen_kernel:
            return self.varlen_kernel.varlen_attention(
                q,
                k_cache,
                v_cache,
                meta.block_tables,
                meta.query_start,
                meta.context_lens,
                self.scale,
            )
        return varlen_prefill_attention(
            q,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.query_lens,
            meta.context_lens_host,
            self.scale,
        )
