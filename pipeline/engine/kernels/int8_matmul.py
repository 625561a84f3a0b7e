"""W8A16 matmul in Triton: y = x @ (q * scale).T with int8 weights converted in registers.

Decode is bound by reading the weights, so half the bytes of bf16 should give up to 2x; that
needs enough programs in flight to saturate HBM. A decode batch gives few row tiles, so K is
split (SPLIT_K programs per output tile, fp32 partial sums added atomically) until the grid
covers the GPU a few times over. torch._weight_int8pack_mm on CUDA converts to fp32 without
tensor cores and ran slower than bf16 at batch 1 on the H100.
"""

import torch
import triton
import triton.language as tl

NUM_SMS = 132  # H100: a grid of a few waves of these keeps HBM busy


@triton.jit(do_not_specialize=["M"])  # varies per step: one compile per tile shape
def _w8a16_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_om,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_PER_SPLIT: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    pid_n, pid_m, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_start = pid_k * K_PER_SPLIT
    for k in range(k_start, tl.minimum(k_start + K_PER_SPLIT, K), BLOCK_K):
        ks = k + offsets
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + ks[None, :],
            mask=(rows < M)[:, None] & (ks < K)[None, :],
            other=0.0,
        ).to(DOT_DTYPE)  # [BM, BK]
        w = tl.load(
            w_ptr + cols[:, None] * stride_wn + ks[None, :],
            mask=(cols < N)[:, None] & (ks < K)[None, :],
            other=0,
        )  # [BN, BK] int8
        acc += tl.dot(x, tl.trans(w.to(DOT_DTYPE)))
    acc *= tl.load(scale_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + rows[:, None] * stride_om + cols[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    if IS_SPLIT:
        tl.atomic_add(out, acc, mask=mask, sem="relaxed")
    else:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _tiles(num_rows: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): thin tiles for decode batches, square ones for prompts."""
    if num_rows <= 64:
        return max(16, triton.next_power_of_2(num_rows)), 64, 128
    return 128, 128, 64


def w8a16_matmul(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # x [M, K] fp16/bf16; weight [N, K] int8; scale [N] -> [M, N] in x.dtype
    num_rows, k = x.shape
    n = weight.shape[0]
    assert x.stride(1) == 1 and weight.stride(1) == 1
    block_m, block_n, block_k = _tiles(num_rows)
    tiles = triton.cdiv(num_rows, block_m) * triton.cdiv(n, block_n)
    num_k_blocks = triton.cdiv(k, block_k)
    split = 1
    if num_rows <= 64:  # fill ~4 waves, at least 4 K blocks per program
        split = max(1, min(4 * NUM_SMS // tiles, num_k_blocks // 4))
    k_per_split = triton.cdiv(num_k_blocks, split) * block_k
    split = triton.cdiv(k, k_per_split)
    out = (
        torch.zeros(num_rows, n, dtype=torch.float32, device=x.device)
        if split > 1
        else torch.empty(num_rows, n, dtype=x.dtype, device=x.device)
    )
    grid = (triton.cdiv(n, block_n), triton.cdiv(num_rows, block_m), split)
    _w8a16_kernel[grid](
        x,
        weight,
        scale,
        out,
        num_rows,
        n,
        k,
        x.stride(0),
        weight.stride(0),
        out.stride(0),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        K_PER_SPLIT=k_per_split,
        IS_SPLIT=split > 1,
        # triton's CPU interpreter (tests) gets 16-bit tl.dot wrong: fp32 operands there
        DOT_DTYPE=tl.float32
        if x.device.type == "cpu"
        else {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[x.dtype],
        num_warps=4 if num_rows <= 64 else 8,
        num_stages=4 if num_rows <= 64 else 3,
    )
    return out.to(x.dtype) if split > 1 else out
