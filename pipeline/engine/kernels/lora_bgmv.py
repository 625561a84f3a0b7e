"""The LoRA delta of a decode-sized batch: y += (x @ A[slot].T) @ B[slot].T, a program a token
and output tile (Punica's BGMV, as vLLM's bgmv_shrink / bgmv_expand), shrink and expand fused.

Why not SGMV (lora_sgmv.py) at a few tokens: its tiles pad every token to 16 rows for tl.dot
and each kernel walks a chain of dependent loads (the active slot, its count, its first row, the
sorted rows) before it touches a weight; two kernels per adapted linear made batch-1 decode of
the 8B 0.81x the base engine (H200). Here a program reads its token's slot, then its weights:
one load apart. It recomputes its part's x @ A.T (the A rows of the part its tile writes, read
from L2 by every tile after the first), so the tiles are wide (few programs a token) and the
fused kernel runs where `in` is small enough for one program's loop (its loads feed tl.dot,
which triton pipelines); a linear with a wider input (the 8B's down_proj) runs the shrink split
over `in` in a kernel of its own and the expand sums the splits. Slot 0 (no adapter) exits at
once. Grids depend on the token count only, so CUDA graphs replay them with each step's slots.

Shapes as lora_sgmv: x [T, in]; lora_a [S, W, in]; lora_b [out, S, W]; W = parts * R, part g's
A rows and B columns at [g * R, (g + 1) * R) and its outputs at [part_starts[g],
part_starts[g + 1]).
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.dot_operands import MIN_DOT, dot_dtype, dot_precision

# more tokens: SGMV, whose tiles share a slot's A among its tokens (here every token's programs
# read it: at 8 tokens the 8B's gate_up reads 57 MB from L2, about SGMV's two kernels' time)
MAX_TOKENS = 4
FUSED_MAX_IN = 4096  # a wider input: the split shrink + expand
K_CHUNK = 1024  # the split shrink's `in` per program
BLOCK_N = 512  # outputs a program; every program reads its part's A once
BLOCK_K = 256  # the shrink's step: [BLOCK_K, R] of A a pipelined stage


@triton.jit
def _shrink(x_ptr, a_ptr, slot, token, part, k_begin, k_end, stride_x, stride_as, stride_ar,
            RANK: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
            PRECISION: tl.constexpr):  # fmt: skip
    # -> [RANK] float32: x[token, k_begin:k_end] @ A[slot, part's rows, k_begin:k_end].T. The
    # token is row 0 of a 16-row tile (tl.dot's smallest; the others are zeros): a loop whose
    # loads feed tl.dot is one triton's pipeliner overlaps, so its iterations do not each wait
    # on memory, which a program alone on its SM cannot hide
    rows = tl.arange(0, 16)
    ranks = part * RANK + tl.arange(0, RANK)
    a_rows = a_ptr + slot * stride_as + ranks[None, :] * stride_ar
    acc = tl.zeros((16, RANK), dtype=tl.float32)
    for k0 in range(k_begin, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        is_k = ks < k_end
        x = tl.load(
            x_ptr + token * stride_x + rows[:, None] * 0 + ks[None, :],
            mask=(rows[:, None] == 0) & is_k[None, :],
            other=0.0,
        )
        a = tl.load(a_rows + ks[:, None], mask=is_k[:, None], other=0.0)  # [BLOCK_K, RANK]
        acc += tl.dot(x.to(DOT), a.to(DOT), input_precision=PRECISION)
    return tl.sum(acc, axis=0)


@triton.jit
def _tile(tile, tiles0, tiles1, start1, start2, num_out, BLOCK: tl.constexpr):
    # an output tile -> (its part, its columns, their mask): part g's tiles follow part g - 1's
    part = (tile >= tiles0).to(tl.int32) + (tile >= tiles1).to(tl.int32)
    first = tl.where(part == 0, 0, tl.where(part == 1, tiles0, tiles1))
    begin = tl.where(part == 0, 0, tl.where(part == 1, start1, start2))
    end = tl.where(part == 0, start1, tl.where(part == 1, start2, num_out))
    cols = begin + (tile - first) * BLOCK + tl.arange(0, BLOCK)
    return part, cols, cols < end


@triton.jit
def _fused_kernel(x_ptr, a_ptr, b_ptr, y_ptr, slots_ptr, num_in, num_out, tiles0, tiles1, start1,
                  start2, stride_x, stride_as, stride_ar, stride_bn, stride_bs, stride_y,
                  RANK: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK: tl.constexpr,
                  DOT: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    token = tl.program_id(0)
    slot = tl.load(slots_ptr + token)
    if slot == 0:
        return
    part, cols, is_col = _tile(tl.program_id(1), tiles0, tiles1, start1, start2, num_out, BLOCK)
    # B and y first: their loads are in flight while the shrink runs
    ranks = part * RANK + tl.arange(0, RANK)
    b = tl.load(
        b_ptr + cols[:, None] * stride_bn + slot * stride_bs + ranks[None, :],
        mask=is_col[:, None],
        other=0.0,
    )
    at = y_ptr + token * stride_y + cols
    y = tl.load(at, mask=is_col, other=0.0)
    xa = _shrink(x_ptr, a_ptr, slot, token, part, 0, num_in, stride_x, stride_as, stride_ar,
                 RANK, BLOCK_K, DOT, PRECISION)  # fmt: skip
    xa = xa.to(b.dtype).to(tl.float32)  # rounded to the weights' dtype, as the plain path's GEMMs
    delta = tl.sum(b.to(tl.float32) * xa[None, :], axis=1)
    tl.store(at, (y.to(tl.float32) + delta).to(y.dtype), mask=is_col)


@triton.jit
def _split_shrink_kernel(x_ptr, a_ptr, xa_ptr, slots_ptr, num_in, k_chunk, stride_x, stride_as,
                         stride_ar, stride_split, stride_xa, RANK: tl.constexpr,
                         BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                         PRECISION: tl.constexpr):  # fmt: skip
    token, part, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slots_ptr + token)
    if slot == 0:  # the expand skips the token too
        return
    k_begin = split * k_chunk
    k_end = tl.minimum(num_in, k_begin + k_chunk)
    xa = _shrink(x_ptr, a_ptr, slot, token, part, k_begin, k_end, stride_x, stride_as, stride_ar,
                 RANK, BLOCK_K, DOT, PRECISION)  # fmt: skip
    ranks = part * RANK + tl.arange(0, RANK)
    tl.store(xa_ptr + split * stride_split + token * stride_xa + ranks, xa)


@triton.jit
def _split_expand_kernel(xa_ptr, b_ptr, y_ptr, slots_ptr, num_out, num_splits, tiles0, tiles1,
                         start1, start2, stride_split, stride_xa, stride_bn, stride_bs, stride_y,
                         RANK: tl.constexpr, SPLITS: tl.constexpr,
                         BLOCK: tl.constexpr):  # fmt: skip
    token = tl.program_id(0)
    slot = tl.load(slots_ptr + token)
    if slot == 0:
        return
    part, cols, is_col = _tile(tl.program_id(1), tiles0, tiles1, start1, start2, num_out, BLOCK)
    ranks = part * RANK + tl.arange(0, RANK)
    b = tl.load(
        b_ptr + cols[:, None] * stride_bn + slot * stride_bs + ranks[None, :],
        mask=is_col[:, None],
        other=0.0,
    )
    at = y_ptr + token * stride_y + cols
    y = tl.load(at, mask=is_col, other=0.0)
    splits = tl.arange(0, SPLITS)
    partial = tl.load(  # [SPLITS, RANK], summed in a fixed order
        xa_ptr + splits[:, None] * stride_split + token * stride_xa + ranks[None, :],
        mask=(splits < num_splits)[:, None],
        other=0.0,
    )
    xa = tl.sum(partial, axis=0).to(b.dtype).to(tl.float32)
    delta = tl.sum(b.to(tl.float32) * xa[None, :], axis=1)
    tl.store(at, (y.to(tl.float32) + delta).to(y.dtype), mask=is_col)


def num_launches(num_in: int) -> int:
    """Kernels a linear of `in` features launches."""
    return 1 if num_in <= FUSED_MAX_IN else 2


def add_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    rank: int,
    part_starts: list[int],
    slots: torch.Tensor,
) -> torch.Tensor:
    # y [T, out] += each token's delta, in place; part_starts: each part's first output and
    # out ([0, out] for one part); slots [T] int64 (0: no adapter); returns y
    num_tokens, num_in = x.shape
    num_slots, width, _ = lora_a.shape
    if num_tokens == 0 or num_slots == 1:
        return y
    assert x.stride(1) == 1 and y.stride(1) == 1 and lora_a.is_contiguous()
    assert lora_b.stride(2) == 1 and width == rank * (len(part_starts) - 1) <= 3 * rank
    # tiles of each part, in part order; up to three parts (q, k, v)
    ends = [*part_starts[1:], part_starts[-1], part_starts[-1]][:3]
    tiles = [triton.cdiv(e - s, BLOCK_N) for s, e in zip([0, *ends[:2]], ends, strict=True)]
    tiles0, tiles1 = tiles[0], tiles[0] + tiles[1]
    grid = (num_tokens, tiles0 + tiles[1] + tiles[2])
    block_k = max(MIN_DOT, min(BLOCK_K, triton.next_power_of_2(num_in)))
    dot = dot_dtype(x)
    operands = {"DOT": dot, "PRECISION": dot_precision(dot)}
    num_out = y.shape[1]
    b_strides = (lora_b.stride(0), lora_b.stride(1))
    if num_in <= FUSED_MAX_IN:
        _fused_kernel[grid](
            x, lora_a, lora_b, y, slots, num_in, num_out, tiles0, tiles1, ends[0], ends[1],
            x.stride(0), lora_a.stride(0), lora_a.stride(1), *b_strides, y.stride(0),
            RANK=rank, BLOCK_K=block_k, BLOCK=BLOCK_N, num_warps=8, **operands,
        )  # fmt: skip
        return y
    num_splits = triton.cdiv(num_in, K_CHUNK)
    xa = torch.empty(num_splits, num_tokens, width, dtype=torch.float32, device=x.device)
    _split_shrink_kernel[(num_tokens, width // rank, num_splits)](
        x, lora_a, xa, slots, num_in, K_CHUNK, x.stride(0), lora_a.stride(0), lora_a.stride(1),
        xa.stride(0), xa.stride(1), RANK=rank, BLOCK_K=min(block_k, K_CHUNK), num_warps=8,
        **operands,
    )  # fmt: skip
    _split_expand_kernel[grid](
        xa, lora_b, y, slots, num_out, num_splits, tiles0, tiles1, ends[0], ends[1],
        xa.stride(0), xa.stride(1), *b_strides, y.stride(0),
        RANK=rank, SPLITS=triton.next_power_of_2(num_splits), BLOCK=BLOCK_N, num_warps=8,
    )  # fmt: skip
    return y
