"""The LoRA delta of a decode-sized batch: y += (x @ A[slot].T) @ B[slot].T, programs a token
(Punica's BGMV, as vLLM's bgmv_shrink / bgmv_expand), two kernels an adapted linear.

At a few tokens the delta is latency-bound: a few hundred KB of weights a linear, read in a few
microseconds only if many programs each issue one deep load. So neither kernel loops:
- the shrink splits `in` over programs (grid: K chunks x tokens); each reads its token's slot,
  its x chunk and the slot's A rows over that chunk (every part's: q, k and v share x), and
  writes its partial x @ A.T [W] to a float32 scratch row of its chunk;
- the expand (grid: output tiles x tokens) sums its token's partials of its part in a fixed
  order (the delta does not depend on which program finished first, as atomic adds would),
  then adds its tile's B columns' delta into y in place.
Each program reads its token's slot first (one load apart from its weights: no sorting or
segment chains, which made SGMV slow here); slot 0 (no adapter) exits at once, its delta zero.
Grids depend on the token count only, so CUDA graphs replay them with each step's slots.

Shapes as lora_sgmv: x [T, in]; lora_a [S, W, in]; lora_b [out, S, W]; W = parts * R, part g's
A rows and B columns at [g * R, (g + 1) * R) and its outputs at [part_starts[g],
part_starts[g + 1]).
"""

import torch
import triton
import triton.language as tl

# more tokens: SGMV, whose tiles share a slot's A among its tokens (here every token's programs
# read it: at 8 tokens the 8B's gate_up would read its A and B from L2 8 times)
MAX_TOKENS = 4
# for latency at batch <= 4, not throughput: at one token the 8B's shrinks run 64 programs
# (in 4096) or 224 (down_proj's 14336), its expands 32 (o_proj, down_proj: out 4096), 48 (qkv)
# or 224 (gate_up), each program one load of weights deep
BLOCK_K = 64  # the shrink's `in` a program
BLOCK_N = 128  # the expand's outputs a program
NUM_LAUNCHES_PER_LINEAR = 2  # the shrink, the expand


@triton.jit
def _shrink_kernel(x_ptr, a_ptr, xa_ptr, slots_ptr, num_in, width, stride_x, stride_as,
                   stride_ar, stride_split, stride_xa, BLOCK_W: tl.constexpr,
                   BLOCK_K: tl.constexpr):  # fmt: skip
    split, token = tl.program_id(0), tl.program_id(1)
    ks = split * BLOCK_K + tl.arange(0, BLOCK_K)
    is_k = ks < num_in
    # x does not depend on the slot: its load is in flight while the slot's is
    x = tl.load(x_ptr + token * stride_x + ks, mask=is_k, other=0.0)
    slot = tl.load(slots_ptr + token)
    if slot == 0:  # the expand skips the token too
        return
    ws = tl.arange(0, BLOCK_W)
    is_w = ws < width
    a = tl.load(  # [BLOCK_W, BLOCK_K]: every part's rows
        a_ptr + slot * stride_as + ws[:, None] * stride_ar + ks[None, :],
        mask=is_w[:, None] & is_k[None, :],
        other=0.0,
    )
    xa = tl.sum(a.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    tl.store(xa_ptr + split * stride_split + token * stride_xa + ws, xa, mask=is_w)


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
def _expand_kernel(xa_ptr, b_ptr, y_ptr, slots_ptr, num_out, num_splits, tiles0, tiles1,
                   start1, start2, stride_split, stride_xa, stride_bn, stride_bs, stride_y,
                   RANK: tl.constexpr, SPLITS: tl.constexpr,
                   BLOCK_N: tl.constexpr):  # fmt: skip
    tile, token = tl.program_id(0), tl.program_id(1)
    part, cols, is_col = _tile(tile, tiles0, tiles1, start1, start2, num_out, BLOCK_N)
    at = y_ptr + token * stride_y + cols
    y = tl.load(at, mask=is_col, other=0.0)  # in flight while the slot's load is
    slot = tl.load(slots_ptr + token)
    if slot == 0:
        return
    ranks = part * RANK + tl.arange(0, RANK)
    b = tl.load(
        b_ptr + cols[:, None] * stride_bn + slot * stride_bs + ranks[None, :],
        mask=is_col[:, None],
        other=0.0,
    )
    splits = tl.arange(0, SPLITS)
    partial = tl.load(  # [SPLITS, RANK]
        xa_ptr + splits[:, None] * stride_split + token * stride_xa + ranks[None, :],
        mask=(splits < num_splits)[:, None],
        other=0.0,
    )
    # rounded to the weights' dtype, as the plain path's GEMMs round x @ A.T
    xa = tl.sum(partial, axis=0).to(b.dtype).to(tl.float32)
    delta = tl.sum(b.to(tl.float32) * xa[None, :], axis=1)
    tl.store(at, (y.to(tl.float32) + delta).to(y.dtype), mask=is_col)


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
    num_splits = triton.cdiv(num_in, BLOCK_K)
    # every chunk's partial is written (slot-0 tokens' rows are never read): no zeroing
    xa = torch.empty(num_splits, num_tokens, width, dtype=torch.float32, device=x.device)
    _shrink_kernel[(num_splits, num_tokens)](
        x, lora_a, xa, slots, num_in, width, x.stride(0), lora_a.stride(0), lora_a.stride(1),
        xa.stride(0), xa.stride(1), BLOCK_W=triton.next_power_of_2(width), BLOCK_K=BLOCK_K,
    )  # fmt: skip
    # tiles of each part, in part order; up to three parts (q, k, v)
    ends = [*part_starts[1:], part_starts[-1], part_starts[-1]][:3]
    tiles = [triton.cdiv(e - s, BLOCK_N) for s, e in zip([0, *ends[:2]], ends, strict=True)]
    _expand_kernel[(sum(tiles), num_tokens)](
        xa, lora_b, y, slots, y.shape[1], num_splits, tiles[0], tiles[0] + tiles[1], ends[0],
        ends[1], xa.stride(0), xa.stride(1), lora_b.stride(0), lora_b.stride(1), y.stride(0),
        RANK=rank, SPLITS=triton.next_power_of_2(num_splits), BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return y
