"""Plain-PyTorch twins of the Triton kernels: same signatures, same rounding points.

They define what each kernel must compute, mirror the engine's CPU layers (and HF's Llama), and
are what the kernel tests compare against.
"""

import torch
from torch.nn import functional as F

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # x [T, H], weight [H] -> [T, H]: normalize in fp32, round to x.dtype, then scale
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # x, residual [T, H] -> (rmsnorm(x + residual) [T, H], x + residual [T, H])
    summed = x + residual
    return rmsnorm(summed, weight, eps), summed


def rotary_neox(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # positions [T]; q [T, H, D]; k [T, Hkv, D]; cos, sin [max_pos, D] (halves repeated, q.dtype)
    c = cos[positions].unsqueeze(1)  # [T, 1, D]
    s = sin[positions].unsqueeze(1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=-1)
        return x * c + torch.cat((-second, first), dim=-1) * s

    return rotate(q), rotate(k)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    # [T, 2I] (gate | up) -> [T, I]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_scale: float | None = None,
) -> None:
    # k, v [T, Hkv, D]; caches [NB, BS, Hkv, D]; slot_mapping [T] (block * BS + offset);
    # kv_scale: the caches hold fp8 codes of k / kv_scale, v / kv_scale -> in place
    if kv_scale is not None:  # index_copy_ has no fp8 kernel: copy the codes' bytes
        k, v = (quantize_fp8(x, kv_scale).view(torch.uint8) for x in (k, v))
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    k_cache.view(-1, *k.shape[1:]).index_copy_(0, slot_mapping.long(), k)
    v_cache.view(-1, *v.shape[1:]).index_copy_(0, slot_mapping.long(), v)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    kv_scale: float | None = None,
) -> torch.Tensor:
    # q [B, H, D]; caches [NB, BS, Hkv, D]; block_tables [B, M]; context_lens [B] -> [B, H, D]:
    # each sequence's one query attends to its first context_lens keys, in fp32
    one_token_each = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    out = varlen_attention(
        q.float(),
        k_cache,
        v_cache,
        block_tables,
        one_token_each,
        context_lens,
        scale,
        kv_scale,
    )
    return out.to(q.dtype)


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
    # q [T, H, D] packed; caches [NB, BS, Hkv, D] (q's dtype, or fp8 codes when kv_scale is
    # set: K = codes * kv_scale, likewise V); block_tables [B, M]; query_start [B + 1];
    # context_lens [B] -> [T, H, D]. One SDPA per sequence (reads the lengths on the host);
    # sequences with no query tokens (CUDA-graph padding) are skipped. Codes are read as they
    # are, kv_scale folded into the softmax scale and the output, as the kernels do.
    block_size = k_cache.shape[1]
    scale, out_scale = fold_kv_scale(scale, kv_scale)
    out = torch.empty_like(q)
    starts, ctx_lens = query_start.tolist(), context_lens.tolist()
    for i, ctx_len in enumerate(ctx_lens):
        start, q_len = starts[i], starts[i + 1] - starts[i]
        if q_len == 0:
            continue
        blocks = block_tables[i, : -(-ctx_len // block_size)].long()
        k = k_cache[blocks].flatten(0, 1)[:ctx_len].transpose(0, 1).to(q.dtype)  # [Hkv, ctx, D]
        v = v_cache[blocks].flatten(0, 1)[:ctx_len].transpose(0, 1).to(q.dtype)
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
        o = o.transpose(0, 1)
        out[start : start + q_len] = o if kv_scale is None else o * out_scale
    return out


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    # saturating cast: torch's cast to e4m3fn turns out-of-range values into NaN
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def quantize_fp8(
    x: torch.Tensor, scale: torch.Tensor | float, prequant: torch.Tensor | None = None
) -> torch.Tensor:
    # [T, ...] float, scale [] float32 (or a float), prequant [in] x.dtype -> float8_e4m3fn: the
    # static per-tensor FP8 quantizer of a linear's input (AWQ's pre-scale first, rounded to x's
    # dtype) and of the KV cache
    if prequant is not None:
        x = x * prequant
    return to_fp8(x.float() / scale)


def fold_kv_scale(scale: float, kv_scale: float | None) -> tuple[float, float]:
    """(softmax scale, output scale) of attention that reads the cache as it is: with codes of
    K / kv_scale and V / kv_scale, K's scale joins the softmax scale and V's scales the output
    (None: a cache in the model dtype, nothing to fold)."""
    return (scale, 1.0) if kv_scale is None else (scale * kv_scale, kv_scale)
