"""Paged decode attention (one query token per sequence, GQA) in Triton.

Grid: (sequence, kv head, split). Each program walks its share of the sequence's cache blocks
with an online softmax for all query heads of its kv head (padded to 16 rows for tl.dot).
With more than one split (long contexts, few sequences) the partial results are merged by a
second small kernel, flash-decoding style, so a batch of one still fills the GPU; with one (a
large batch) the program writes the output itself, and there is no second kernel.
An fp8 cache (quant.kv_cache) is read as codes: kv_scale multiplies the softmax scale (K) and the
output (V; a split's partial too, which the merge then averages linearly).
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.dot_operands import MIN_DOT, dot_dtype, dot_precision
from pipeline.engine.kernels.reference import fold_kv_scale
from pipeline.engine.kernels.tuned_configs import bucket, dtype_name, lookup

TARGET_PROGRAMS = 264  # ~2 waves of 132 SMs (H100): split a sequence when the batch is small


@triton.jit
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    out_ptr,
    max_ptr,
    sum_ptr,
    scale,
    out_scale,
    group,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_bt,
    stride_ob,
    stride_oh,
    stride_os,
    stride_mb,
    stride_mh,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCKS_PER_SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    IS_SPLIT: tl.constexpr,
):
    # IS_SPLIT: out is the fp32 partials [B, S, H, D] and max/sum get the merge's statistics;
    # otherwise out is the result [B, H, D] (stride_os unused)
    seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    rows = tl.arange(0, GROUP_PAD)
    heads = kv_head * group + rows
    row_mask = rows < group
    dims = tl.arange(0, HEAD_DIM)
    tokens = tl.arange(0, BLOCK_SIZE)
    q = tl.load(
        q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
        mask=row_mask[:, None],
        other=0.0,
    ).to(DOT_DTYPE)  # [GROUP_PAD, D]
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    first = split * BLOCKS_PER_SPLIT
    last = tl.minimum(first + BLOCKS_PER_SPLIT, tl.cdiv(context_len, BLOCK_SIZE))
    for i in range(first, last):
        block = tl.load(block_tables_ptr + seq * stride_bt + i).to(tl.int64)
        token_mask = i * BLOCK_SIZE + tokens < context_len
        k = tl.load(
            k_cache_ptr
            + block * stride_kb
            + tokens[:, None] * stride_kt
            + kv_head * stride_kh
            + dims[None, :],
            mask=token_mask[:, None],
            other=0.0,
        )
        k = k.to(DOT_DTYPE)
        # torch.compile passes the float `scale` as fp64; keep the loop-carried stats fp32
        scores = (tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale).to(tl.float32)
        scores = tl.where(token_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_cache_ptr
            + block * stride_vb
            + tokens[:, None] * stride_vt
            + kv_head * stride_vh
            + dims[None, :],
            mask=token_mask[:, None],
            other=0.0,
        )
        v = v.to(DOT_DTYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=DOT_PRECISION)
        m_i = m_new
    out_rows = out_ptr + seq * stride_ob + split * stride_os + heads[:, None] * stride_oh
    l_safe = tl.where(l_i > 0, l_i, 1.0)  # a split past the context has no keys: acc is 0
    result = (acc / l_safe[:, None] * out_scale).to(out_ptr.dtype.element_ty)
    tl.store(out_rows + dims[None, :], result, mask=row_mask[:, None])
    if IS_SPLIT:
        stat = seq * stride_mb + heads * stride_mh + split
        tl.store(max_ptr + stat, m_i, mask=row_mask)
        tl.store(sum_ptr + stat, l_i, mask=row_mask)


@triton.jit(do_not_specialize=["num_splits"])  # varies per step: one compile
def _merge_kernel(
    partial_ptr,
    max_ptr,
    sum_ptr,
    out_ptr,
    num_splits,
    stride_pb,
    stride_ph,
    stride_ps,
    stride_mb,
    stride_mh,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
):
    seq, head = tl.program_id(0), tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    split_mask = splits < num_splits
    stat = seq * stride_mb + head * stride_mh + splits
    m = tl.load(max_ptr + stat, mask=split_mask, other=float("-inf"))  # [S]
    l_s = tl.load(sum_ptr + stat, mask=split_mask, other=0.0)
    m_max = tl.max(m, axis=0)
    weight = tl.where(l_s > 0, tl.exp(m - m_max) * l_s, 0.0)  # empty splits weigh nothing
    dims = tl.arange(0, HEAD_DIM)
    partial = tl.load(
        partial_ptr
        + seq * stride_pb
        + head * stride_ph
        + splits[:, None] * stride_ps
        + dims[None, :],
        mask=split_mask[:, None] & (l_s > 0)[:, None],
        other=0.0,
    )  # [S, D]
    out = tl.sum(partial * weight[:, None], axis=0) / tl.sum(weight, axis=0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


def num_splits_for(batch: int, num_kv_heads: int, max_blocks: int) -> int:
    """Splits per sequence: enough programs to fill the GPU, at least one block per split."""
    wanted = max(1, TARGET_PROGRAMS // max(1, batch * num_kv_heads))
    return min(wanted, max_blocks, 64)


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
    # context_lens [B] -> [B, H, D]. The split count depends only on shapes, so CUDA graphs can
    # capture it.
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    assert block_size >= MIN_DOT and head_dim >= MIN_DOT
    group = num_heads // num_kv_heads
    max_blocks = block_tables.shape[1]
    num_splits = num_splits_for(batch, num_kv_heads, max_blocks)
    shape = (dtype_name(q), dtype_name(k_cache), num_heads, num_kv_heads, head_dim, block_size)
    launch = dict(lookup("paged_decode_attention", (*shape, bucket(batch))) or {})
    if launch:  # `make tune` picked it
        num_splits = min(launch.pop("num_splits"), max_blocks)
    blocks_per_split = triton.cdiv(max_blocks, num_splits)
    dot_type = dot_dtype(q)
    out = torch.empty_like(q)
    if batch == 0:
        return out
    is_split = num_splits > 1
    if is_split:
        partial = torch.empty(
            batch, num_splits, num_heads, head_dim, dtype=torch.float32, device=q.device
        )  # [B, S, H, D]
        stats = torch.empty(2, batch, num_heads, num_splits, dtype=torch.float32, device=q.device)
        dest, maxes, sums = partial, stats[0], stats[1]
        strides = (  # out's [b, h, s], then max/sum's [b, h]
            partial.stride(0),
            partial.stride(2),
            partial.stride(1),
            stats.stride(1),
            stats.stride(2),
        )
    else:  # the program writes the result: no statistics to keep
        dest = maxes = sums = out
        strides = (out.stride(0), out.stride(1), 0, 0, 0)
    _decode_kernel[(batch, num_kv_heads, num_splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        dest,
        maxes,
        sums,
        *fold_kv_scale(scale, kv_scale),
        group,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        *strides,
        BLOCK_SIZE=block_size,
        HEAD_DIM=head_dim,
        GROUP_PAD=max(MIN_DOT, triton.next_power_of_2(group)),
        BLOCKS_PER_SPLIT=blocks_per_split,
        DOT_PRECISION=dot_precision(dot_type),
        DOT_DTYPE=dot_type,
        IS_SPLIT=is_split,
        **launch,
    )
    if not is_split:
        return out
    _merge_kernel[(batch, num_heads)](
        partial,
        stats[0],
        stats[1],
        out,
        num_splits,
        partial.stride(0),
        partial.stride(2),
        partial.stride(1),
        stats.stride(1),
        stats.stride(2),
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        SPLITS_PAD=triton.next_power_of_2(num_splits),
    )
    return out
