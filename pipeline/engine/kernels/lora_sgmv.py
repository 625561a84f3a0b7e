"""The batched LoRA delta in Triton: y += (x @ A[slot].T) @ B[slot].T, each token its slot's.

Tokens are sorted by slot once a forward (`segments`); a program takes a tile of one slot's
tokens and runs tl.dot on them (Punica's SGMV; vLLM's lora_shrink / lora_expand ops grid the
same way: tiles x slots in use, a tile past its slot's token count exits). Slot 0 is no adapter: its
tokens are skipped. Grids depend on the token count only, so CUDA graphs replay them with each
step's slots. The plain-PyTorch twin is engine/lora/layer.py's lora_delta.

Shapes: x [T, in]; lora_a [S, W, in]; lora_b [out, S, W] (W = parts * R, part g's A rows and B
columns at [g * R, (g + 1) * R)); the shrink keeps x @ A.T in float32, [T, W].
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.dot_operands import dot_dtype, dot_precision

# the shrink's K per program: a decode step's few rows split `in` over many programs (8B
# batch-1 decode on an H200: 0.48x of the base engine unsplit, 0.81x at 256, 0.79x at 128,
# 0.77x at 512 with 128-wide expand tiles)
SMALL_K_CHUNK = 256
LARGE_K_CHUNK = 2048


@triton.jit
def _shrink_kernel(
    x_ptr,
    a_ptr,
    xa_ptr,
    order_ptr,
    counts_ptr,
    starts_ptr,
    active_ptr,
    num_in,
    k_chunk,
    stride_x,
    stride_as,
    stride_ar,
    stride_split,
    stride_xa,
    RANK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid_m = tl.program_id(0)
    slot = tl.load(active_ptr + tl.program_id(1))
    num_parts = tl.num_programs(2) // tl.cdiv(num_in, k_chunk)
    part = tl.program_id(2) % num_parts
    split = tl.program_id(2) // num_parts
    count = tl.load(counts_ptr + slot)
    if pid_m * BLOCK_M >= count:
        return
    offs = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    is_row = offs < count
    rows = tl.load(order_ptr + tl.load(starts_ptr + slot) + offs, mask=is_row, other=0)
    ranks = part * RANK + tl.arange(0, RANK)
    acc = tl.zeros((BLOCK_M, RANK), dtype=tl.float32)
    for k0 in range(split * k_chunk, tl.minimum(num_in, (split + 1) * k_chunk), BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        is_k = ks < num_in
        x = tl.load(
            x_ptr + rows[:, None] * stride_x + ks[None, :],
            mask=is_row[:, None] & is_k[None, :],
            other=0.0,
        )
        a = tl.load(
            a_ptr + slot * stride_as + ranks[None, :] * stride_ar + ks[:, None],
            mask=is_k[:, None],
            other=0.0,
        )
        acc += tl.dot(x.to(DOT), a.to(DOT), input_precision=PRECISION)
    at = xa_ptr + split * stride_split + rows[:, None] * stride_xa + ranks[None, :]
    tl.store(at, acc, mask=is_row[:, None])


@triton.jit
def _expand_kernel(
    xa_ptr,
    b_ptr,
    y_ptr,
    order_ptr,
    counts_ptr,
    starts_ptr,
    active_ptr,
    num_out,
    width,
    num_splits,
    stride_split,
    stride_xa,
    stride_bn,
    stride_bs,
    stride_y,
    BLOCK_W: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    slot = tl.load(active_ptr + tl.program_id(2))
    count = tl.load(counts_ptr + slot)
    if pid_m * BLOCK_M >= count:
        return
    offs = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    is_row = offs < count
    rows = tl.load(order_ptr + tl.load(starts_ptr + slot) + offs, mask=is_row, other=0)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    is_col = cols < num_out
    ws = tl.arange(0, BLOCK_W)
    is_w = ws < width
    b = tl.load(
        b_ptr + cols[None, :] * stride_bn + slot * stride_bs + ws[:, None],
        mask=is_w[:, None] & is_col[None, :],
        other=0.0,
    )
    xa = tl.zeros((BLOCK_M, BLOCK_W), dtype=tl.float32)
    for split in range(num_splits):  # the shrink's split-K partial sums, in a fixed order
        xa += tl.load(
            xa_ptr + split * stride_split + rows[:, None] * stride_xa + ws[None, :],
            mask=is_row[:, None] & is_w[None, :],
            other=0.0,
        )
    xa = xa.to(b.dtype)  # rounded to the weights' dtype, as the plain path's bf16 GEMMs round it
    delta = tl.dot(xa.to(DOT), b.to(DOT), input_precision=PRECISION)
    at = y_ptr + rows[:, None] * stride_y + cols[None, :]
    is_out = is_row[:, None] & is_col[None, :]
    y = tl.load(at, mask=is_out, other=0.0)
    tl.store(at, (y.to(tl.float32) + delta).to(y.dtype), mask=is_out)


def segments(
    slots: torch.Tensor, num_slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # slots [T] int64 -> (token rows sorted by slot [T], tokens per slot [S], first [S],
    # adapter slots with tokens first [S - 1]: T tokens use at most T of them, so a grid of
    # min(T, S - 1) programs a tile covers every adapter a batch of T can hold)
    order = torch.argsort(slots, stable=True)
    slot_ids = torch.arange(num_slots, device=slots.device)
    counts = (slots[:, None] == slot_ids).sum(0)
    active = torch.argsort((counts[1:] == 0).to(torch.int32), stable=True) + 1
    return order, counts, torch.cumsum(counts, 0) - counts, active


def add_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    rank: int,
    order: torch.Tensor,
    counts: torch.Tensor,
    starts: torch.Tensor,
    active: torch.Tensor,
) -> torch.Tensor:
    # y [T, out] += each token's delta, in place (rank: R, the width of a part); returns y
    num_tokens, num_in = x.shape
    num_slots, width, _ = lora_a.shape
    if num_tokens == 0 or num_slots == 1:
        return y
    assert x.stride(1) == 1 and y.stride(1) == 1 and lora_a.is_contiguous()
    dot = dot_dtype(x)
    precision = dot_precision(dot)
    block_m = 16 if num_tokens <= 64 else 64
    tiles = triton.cdiv(num_tokens, block_m)
    # few tokens: split K over programs, or one program's loop over all of `in` is the wait
    k_chunk = SMALL_K_CHUNK if num_tokens <= 64 else LARGE_K_CHUNK
    num_splits = triton.cdiv(num_in, k_chunk)
    xa = torch.empty(num_splits, num_tokens, width, dtype=torch.float32, device=x.device)
    num_active = min(num_slots - 1, num_tokens)
    _shrink_kernel[(tiles, num_active, width // rank * num_splits)](
        x, lora_a, xa, order, counts, starts, active, num_in, k_chunk,
        x.stride(0), lora_a.stride(0), lora_a.stride(1), xa.stride(0), xa.stride(1),
        RANK=rank, BLOCK_M=block_m, BLOCK_K=64, DOT=dot, PRECISION=precision,
    )  # fmt: skip
    num_out = y.shape[1]
    block_n = 64
    _expand_kernel[(tiles, triton.cdiv(num_out, block_n), num_active)](
        xa, lora_b, y, order, counts, starts, active, num_out, width, num_splits,
        xa.stride(0), xa.stride(1), lora_b.stride(0), lora_b.stride(1), y.stride(0),
        BLOCK_W=triton.next_power_of_2(width), BLOCK_M=block_m, BLOCK_N=block_n,
        DOT=dot, PRECISION=precision,
    )  # fmt: skip
    return y
