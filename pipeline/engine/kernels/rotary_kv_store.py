"""Rotary embedding (GPT-NeoX layout, rotate halves) fused with the paged KV store, in Triton:
one program per token rotates its query heads, and writes its rotated key heads and its value
heads into the cache at its slot. One kernel where there were two, per layer and step: a small
model's decode step is a chain of tiny kernels, paced by their count (TensorRT-LLM's attention
plugin applies RoPE while it writes the cache for the same reason).

cos/sin are the engine's tables [max_pos, D] with the two halves repeated, in the model dtype;
products and sum are rounded to that dtype like reference.rotary_neox (and HF Llama).
Slot = block * block_size + offset; a negative slot means "do not store" (padding rows).
An fp8 cache (quant.kv_cache) gets the codes of the rotated k (rounded as above) and of v
divided by kv_scale, saturated: reference.store_kv's primitives.quantize_fp8.
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.fp8_quant import saturate_fp8
from pipeline.engine.kernels.tuned_configs import bucket, dtype_name, lookup


@triton.jit
def _rotate_heads(
    x_ptr,
    out_ptr,
    stride_xh,
    stride_oh,
    num_heads,
    c,
    s,
    kv_scale,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    HEADS: tl.constexpr,
    QUANT: tl.constexpr,
):
    # x_ptr, out_ptr: this token's first head; QUANT: out gets fp8 codes of the result / kv_scale
    heads = tl.arange(0, HEADS)[:, None]
    cols = tl.arange(0, HALF_PAD)[None, :]
    mask = (heads < num_heads) & (cols < HALF)
    x1 = tl.load(x_ptr + heads * stride_xh + cols, mask=mask, other=0.0)
    x2 = tl.load(x_ptr + heads * stride_xh + cols + HALF, mask=mask, other=0.0)
    dt = x1.dtype
    f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
    # out1 = x1*cos - x2*sin, out2 = x2*cos + x1*sin, each product and the sum rounded to dt
    out1 = ((f1 * c).to(dt).to(tl.float32) - (f2 * s).to(dt).to(tl.float32)).to(dt)
    out2 = ((f2 * c).to(dt).to(tl.float32) + (f1 * s).to(dt).to(tl.float32)).to(dt)
    if QUANT:
        out1, out2 = saturate_fp8(out1, kv_scale), saturate_fp8(out2, kv_scale)
    tl.store(out_ptr + heads * stride_oh + cols, out1, mask=mask)
    tl.store(out_ptr + heads * stride_oh + cols + HALF, out2, mask=mask)


@triton.jit
def _rotary_store_kv_kernel(
    positions_ptr,
    slot_mapping_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    cos_ptr,
    sin_ptr,
    q_out_ptr,
    k_cache_ptr,
    v_cache_ptr,
    num_q_heads,
    num_kv_heads,
    block_size,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_qot,
    stride_qoh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_cos,
    kv_scale,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    Q_HEADS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    QUANT_KV: tl.constexpr,
):
    token = tl.program_id(0)
    pos = tl.load(positions_ptr + token)
    cols = tl.arange(0, HALF_PAD)[None, :]
    c = tl.load(cos_ptr + pos * stride_cos + cols, mask=cols < HALF).to(tl.float32)  # [1, HALF]
    s = tl.load(sin_ptr + pos * stride_cos + cols, mask=cols < HALF).to(tl.float32)
    _rotate_heads(
        q_ptr + token * stride_qt,
        q_out_ptr + token * stride_qot,
        stride_qh,
        stride_qoh,
        num_q_heads,
        c,
        s,
        kv_scale,
        HALF,
        HALF_PAD,
        Q_HEADS,
        False,
    )
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot >= 0:
        # k_cache and v_cache share one layout (kv_cache[0], kv_cache[1] of a layer)
        row = (slot // block_size) * stride_cb + (slot % block_size) * stride_ct
        _rotate_heads(
            k_ptr + token * stride_kt,
            k_cache_ptr + row,
            stride_kh,
            stride_ch,
            num_kv_heads,
            c,
            s,
            kv_scale,
            HALF,
            HALF_PAD,
            KV_HEADS,
            QUANT_KV,
        )
        heads = tl.arange(0, KV_HEADS)[:, None]
        dims = tl.arange(0, 2 * HALF_PAD)[None, :]
        mask = (heads < num_kv_heads) & (dims < 2 * HALF)
        v = tl.load(v_ptr + token * stride_vt + heads * stride_vh + dims, mask=mask)
        if QUANT_KV:
            v = saturate_fp8(v, kv_scale)
        tl.store(v_cache_ptr + row + heads * stride_ch + dims, v, mask=mask)


def rotary_store_kv(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_scale: float | None = None,
) -> torch.Tensor:
    # positions, slot_mapping [T]; q [T, H, D]; k, v [T, Hkv, D]; cos, sin [max_pos, D];
    # caches [NB, BS, Hkv, D] (fp8 when kv_scale is set) -> rotated q [T, H, D]; writes rotated
    # k and v at the slots
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    assert cos.is_contiguous() and sin.is_contiguous() and head_dim % 2 == 0
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    assert k.dtype == v.dtype
    assert k_cache.dtype == (k.dtype if kv_scale is None else torch.float8_e4m3fn)
    q_out = torch.empty_like(q)
    shape = (dtype_name(q), num_q_heads, num_kv_heads, head_dim, bucket(num_tokens))
    launch = lookup("rotary_store_kv", shape) or {}  # `make tune` picked it
    if num_tokens:
        _rotary_store_kv_kernel[(num_tokens,)](
            positions,
            slot_mapping,
            q,
            k,
            v,
            cos,
            sin,
            q_out,
            k_cache,
            v_cache,
            num_q_heads,
            num_kv_heads,
            k_cache.shape[1],
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            v.stride(0),
            v.stride(1),
            q_out.stride(0),
            q_out.stride(1),
            k_cache.stride(0),
            k_cache.stride(1),
            k_cache.stride(2),
            cos.stride(0),
            1.0 if kv_scale is None else kv_scale,
            HALF=head_dim // 2,
            HALF_PAD=triton.next_power_of_2(head_dim // 2),
            Q_HEADS=triton.next_power_of_2(num_q_heads),
            KV_HEADS=triton.next_power_of_2(num_kv_heads),
            QUANT_KV=kv_scale is not None,
            **launch,
        )
    return q_out
