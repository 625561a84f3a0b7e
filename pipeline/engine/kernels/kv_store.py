"""Writes this step's K/V rows into the paged cache at their slots, in Triton.

Slot = block * block_size + offset; a negative slot means "do not store" (padding rows).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    row_size,
    block_size,
    head_dim,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kcb,
    stride_kct,
    stride_kch,
    stride_vcb,
    stride_vct,
    stride_vch,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot >= 0:
        idx = tl.arange(0, BLOCK)
        mask = idx < row_size
        head, dim = idx // head_dim, idx % head_dim
        block, offset = slot // block_size, slot % block_size
        k = tl.load(k_ptr + token * stride_kt + head * stride_kh + dim, mask=mask)
        v = tl.load(v_ptr + token * stride_vt + head * stride_vh + dim, mask=mask)
        tl.store(
            k_cache_ptr + block * stride_kcb + offset * stride_kct + head * stride_kch + dim,
            k,
            mask=mask,
        )
        tl.store(
            v_cache_ptr + block * stride_vcb + offset * stride_vct + head * stride_vch + dim,
            v,
            mask=mask,
        )


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    # k, v [T, Hkv, D]; caches [NB, BS, Hkv, D]; slot_mapping [T] int -> writes the caches
    num_tokens, num_kv_heads, head_dim = k.shape
    assert k.stride(-1) == 1 and v.stride(-1) == 1 and k_cache.stride(-1) == 1
    assert v_cache.stride(-1) == 1 and k_cache.dtype == k.dtype
    if num_tokens:
        _store_kv_kernel[(num_tokens,)](
            k,
            v,
            k_cache,
            v_cache,
            slot_mapping,
            num_kv_heads * head_dim,
            k_cache.shape[1],
            head_dim,
            k.stride(0),
            k.stride(1),
            v.stride(0),
            v.stride(1),
            k_cache.stride(0),
            k_cache.stride(1),
            k_cache.stride(2),
            v_cache.stride(0),
            v_cache.stride(1),
            v_cache.stride(2),
            BLOCK=triton.next_power_of_2(num_kv_heads * head_dim),
        )
