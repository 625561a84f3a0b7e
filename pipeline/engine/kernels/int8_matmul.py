"""W8A16 matmul in Triton: y = x @ (q * scale).T, int8 weights [N, K] converted in registers,
the per-channel scale [N] applied to the sums. (aten's CUDA _weight_int8pack_mm converts to fp32
without tensor cores.) Steps of up to int8_gemv.MAX_ROWS rows go to int8_gemv's CUDA-core GEMV;
the tl.dot kernel here takes the rest.

Decode reads the weights once per step, so half the bytes of bf16 is the speed-up; that needs
enough programs in flight to keep HBM busy, and a decode batch has few row tiles. So K is split
(SPLIT_K programs per output tile adding fp32 partial sums atomically), and the tile shape and
split are autotuned per (N, K, row tile) the first time a shape runs, which the engine does
while warming up its CUDA graphs. Prompt batches use square tiles and no split.
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels import int8_gemv
from pipeline.engine.kernels.dot_operands import dot_dtype
from pipeline.engine.kernels.tuned_configs import dtype_name, lookup

DECODE_MAX_ROWS = 64


@triton.jit(do_not_specialize=["M"])  # varies per step: one compile per config
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
    SPLIT_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    pid_n, pid_m, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets = tl.arange(0, BLOCK_K)
    row_mask, col_mask = rows < M, cols < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_start = pid_k * k_per_split
    for k in range(k_start, tl.minimum(k_start + k_per_split, K), BLOCK_K):
        ks = k + offsets
        k_mask = ks < K
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + ks[None, :],
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        ).to(DOT_DTYPE)  # [BM, BK]
        w = tl.load(
            w_ptr + cols[:, None] * stride_wn + ks[None, :],
            mask=col_mask[:, None] & k_mask[None, :],
            other=0,
        ).to(DOT_DTYPE)  # [BN, BK]
        acc += tl.dot(x, tl.trans(w))
    acc *= tl.load(scale_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + rows[:, None] * stride_om + cols[None, :]
    mask = row_mask[:, None] & col_mask[None, :]
    if SPLIT_K > 1:
        tl.atomic_add(out, acc, mask=mask, sem="relaxed")
    else:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _config(block_n: int, block_k: int, split: int, warps: int, stages: int) -> triton.Config:
    kwargs = {"BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split}
    return triton.Config(kwargs, num_warps=warps, num_stages=stages)


DECODE_CONFIGS = [
    _config(n, k, s, 4, 4) for n in (64, 128) for k in (128, 256) for s in (1, 4, 8)
] + [_config(32, 256, s, 4, 4) for s in (4, 8, 16)]
PROMPT_CONFIGS = [_config(128, 64, 1, 8, 3), _config(128, 32, 1, 4, 4), _config(64, 64, 1, 4, 4)]
INTERPRETER_CONFIG = {"BLOCK_N": 64, "BLOCK_K": 128}
_decode = triton.autotune(DECODE_CONFIGS, key=["N", "K", "BLOCK_M"], reset_to_zero=["out_ptr"])(
    _w8a16_kernel
)
_prompt = triton.autotune(PROMPT_CONFIGS, key=["N", "K"])(_w8a16_kernel)


def _shape_class(x: torch.Tensor, n: int, k: int, block_m: int, is_decode: bool) -> tuple:
    if is_decode:
        return "int8_matmul_decode", (dtype_name(x), n, k, block_m)
    return "int8_matmul_prompt", (dtype_name(x), n, k)


def w8a16_matmul(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # x [M, K] fp16/bf16; weight [N, K] int8; scale [N] -> [M, N] in x.dtype
    if x.shape[0] <= int8_gemv.MAX_ROWS:
        return int8_gemv.w8a16_gemv(x, weight, scale)
    return w8a16_dot(x, weight, scale)


def w8a16_dot(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # x [M, K] fp16/bf16; weight [N, K] int8; scale [N] -> [M, N] in x.dtype, on tensor cores
    num_rows, k = x.shape
    n = weight.shape[0]
    assert x.stride(1) == 1 and weight.stride(1) == 1
    is_decode = num_rows <= DECODE_MAX_ROWS
    block_m = max(16, triton.next_power_of_2(num_rows)) if is_decode else 128
    config = lookup(*_shape_class(x, n, k, block_m, is_decode))  # `make tune` picked it
    if config and not is_decode:
        config = dict(config)
        block_m = config.pop("BLOCK_M", block_m)
    # split-K adds fp32 partial sums into zeros (cast after); prompt tiles store x.dtype
    if is_decode:
        out = torch.zeros(num_rows, n, dtype=torch.float32, device=x.device)
    else:
        out = torch.empty(num_rows, n, dtype=x.dtype, device=x.device)
    is_interpreted = x.device.type == "cpu"
    if config:
        kernel, tuned = _w8a16_kernel, {"SPLIT_K": 1, **config}
    elif is_interpreted:
        # decode splits K there too, so the CPU tests cover the atomic sums
        kernel, tuned = _w8a16_kernel, {**INTERPRETER_CONFIG, "SPLIT_K": 1 + is_decode}
    else:
        kernel, tuned = (_decode if is_decode else _prompt), {}
    grid = lambda meta: (  # noqa: E731
        triton.cdiv(n, meta["BLOCK_N"]),
        triton.cdiv(num_rows, block_m),
        meta["SPLIT_K"],
    )
    kernel[grid](
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
        DOT_DTYPE=dot_dtype(x),
        **tuned,
    )
    return out.to(x.dtype)
