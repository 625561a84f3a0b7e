"""Varlen paged attention over a packed batch in Triton: prompt chunks, with decode rows mixed in.

Sequence b feeds q_len = query_start[b + 1] - query_start[b] new tokens and has context_lens[b]
keys after this step (its new K/V are stored before attention runs). Its query j sits at
position context_lens[b] - q_len + j and attends causally to keys [0, that position], read
through the block table, so a chunk sees the chunks cached before it.

Grid: (query tile, kv head). A tile is BLOCK_Q tokens of one sequence times the `group` query
heads that share a kv head, packed as BLOCK_M = BLOCK_Q * group rows, so each K/V tile is read
once for the whole GQA group. T // BLOCK_Q + B tiles bound any batch of T tokens and B
sequences, so the grid depends only on shapes; a program finds its sequence by binary search
over the tile starts (query_start[b] // BLOCK_Q + b) and exits when its tile is past the end.
Keys come BLOCK_N at a time, gathered token by token through the block table, so any cache
block size works. FlashAttention-2 online softmax in fp32 (exp2, log2(e) folded into the scale).
An fp8 cache (quant.kv_cache) is read as codes: kv_scale multiplies the softmax scale (K) and the
output (V).
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.dot_operands import MIN_DOT, dot_dtype, dot_precision
from pipeline.engine.kernels.reference import fold_kv_scale
from pipeline.engine.kernels.tuned_configs import bucket, dtype_name, lookup

LOG2_E = 1.4426950408889634


@triton.jit
def _find_seq(query_start_ptr, tile, num_seqs, BLOCK_Q: tl.constexpr):
    # the last sequence whose first tile is <= tile
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_tile = tl.load(query_start_ptr + mid) // BLOCK_Q + mid
        if first_tile <= tile:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit(do_not_specialize=["num_seqs"])  # varies per step: one compile
def _varlen_attention_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    query_start_ptr,
    context_lens_ptr,
    out_ptr,
    scale_log2,
    out_scale,
    group,
    num_seqs,
    head_dim,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_bt,
    stride_ot,
    stride_oh,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    tile, kv_head = tl.program_id(0), tl.program_id(1)
    seq = _find_seq(query_start_ptr, tile, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    q_tile = tile - (q_start // BLOCK_Q + seq)
    if q_tile * BLOCK_Q >= q_len:
        return
    context_len = tl.load(context_lens_ptr + seq)
    rows = tl.arange(0, BLOCK_M)
    q_tok = q_tile * BLOCK_Q + rows // group  # [M] token index within the sequence's chunk
    heads = kv_head * group + rows % group
    row_mask = (rows < BLOCK_Q * group) & (q_tok < q_len)
    q_pos = context_len - q_len + q_tok  # [M] absolute positions
    dims = tl.arange(0, HEAD_DIM)
    dim_mask = dims < head_dim
    q = tl.load(
        q_ptr + (q_start + q_tok)[:, None] * stride_qt + heads[:, None] * stride_qh + dims[None, :],
        mask=row_mask[:, None] & dim_mask[None, :],
        other=0.0,
    ).to(DOT_DTYPE)  # [M, D]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # keys up to the tile's last query position; every row sees key 0, so m_i is finite
    num_keys = context_len - q_len + tl.minimum((q_tile + 1) * BLOCK_Q, q_len)
    offsets = tl.arange(0, BLOCK_N)
    for start in range(0, num_keys, BLOCK_N):
        k_pos = start + offsets  # [N]
        key_mask = k_pos < num_keys
        blocks = tl.load(
            block_tables_ptr + seq * stride_bt + k_pos // BLOCK_SIZE, mask=key_mask, other=0
        ).to(tl.int64)
        slots = k_pos % BLOCK_SIZE
        kv_mask = key_mask[:, None] & dim_mask[None, :]
        k = tl.load(
            k_cache_ptr
            + blocks[:, None] * stride_kb
            + slots[:, None] * stride_kt
            + kv_head * stride_kh
            + dims[None, :],
            mask=kv_mask,
            other=0.0,
        ).to(DOT_DTYPE)  # [N, D]
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [M, N]
        causal = (k_pos[None, :] <= q_pos[:, None]) & key_mask[None, :]
        scores = tl.where(causal, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_cache_ptr
            + blocks[:, None] * stride_vb
            + slots[:, None] * stride_vt
            + kv_head * stride_vh
            + dims[None, :],
            mask=kv_mask,
            other=0.0,
        ).to(DOT_DTYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=DOT_PRECISION)
        m_i = m_new
    out = acc / l_i[:, None] * out_scale
    tl.store(
        out_ptr
        + (q_start + q_tok)[:, None] * stride_ot
        + heads[:, None] * stride_oh
        + dims[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_mask[:, None] & dim_mask[None, :],
    )


def tile_shape(group: int) -> tuple[int, int]:
    """(BLOCK_M rows, BLOCK_Q tokens) of a query tile for `group` query heads per kv head."""
    block_m = max(64, triton.next_power_of_2(group))
    return block_m, block_m // group


def varlen_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    kv_scale: float | None = None,
) -> torch.Tensor:
    # q [T, H, D] packed; caches [NB, BS, Hkv, D] (fp8 codes when kv_scale is set); block_tables
    # [B, M]; query_start [B + 1] (cumulative query lengths); context_lens [B] -> [T, H, D]
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    num_seqs = context_lens.shape[0]
    group = num_heads // num_kv_heads
    block_m, block_q = tile_shape(group)
    block_n = 64 if head_dim <= 128 else 32
    shape = (dtype_name(q), dtype_name(k_cache), num_heads, num_kv_heads, head_dim, block_size)
    launch = dict(lookup("varlen_attention", (*shape, bucket(num_tokens))) or {})
    if launch:  # `make tune` picked it
        block_m, block_n = launch.pop("BLOCK_M"), launch.pop("BLOCK_N")
        block_q = block_m // group
    dot_type = dot_dtype(q)
    softmax_scale, out_scale = fold_kv_scale(scale, kv_scale)
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    grid = (num_tokens // block_q + num_seqs, num_kv_heads)
    _varlen_attention_kernel[grid](
        q,
        k_cache,
        v_cache,
        block_tables,
        query_start,
        context_lens,
        out,
        softmax_scale * LOG2_E,
        out_scale,
        group,
        num_seqs,
        head_dim,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        BLOCK_SIZE=block_size,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=max(MIN_DOT, triton.next_power_of_2(head_dim)),
        DOT_PRECISION=dot_precision(dot_type),
        DOT_DTYPE=dot_type,
        **launch,
    )
    return out
