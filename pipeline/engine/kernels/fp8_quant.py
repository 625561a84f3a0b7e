"""Static per-tensor FP8 quantization of a linear's input in one pass (primitives.quantize_fp8):
the optional AWQ pre-scale, the division by the activation scale, the saturating cast. In
PyTorch that is four elementwise kernels over [T, in], each reading and writing the whole
activation; on the 8B shape's prompt steps they cost more than the FP8 GEMM saved."""

import torch
import triton
import triton.language as tl

FP8_MAX = tl.constexpr(448.0)  # torch.finfo(torch.float8_e4m3fn).max


@triton.jit
def saturate_fp8(x, scale):
    """x / scale in fp32, saturated to e4m3's range (the store casts it): quantize_fp8's math,
    shared by the kernels that write fp8 (an FP8 linear's input, the FP8 KV cache)."""
    q = x.to(tl.float32) / scale
    return tl.minimum(tl.maximum(q, -FP8_MAX), FP8_MAX)


@triton.jit
def _quantize_fp8_kernel(
    x_ptr,
    prequant_ptr,
    scale_ptr,
    out_ptr,
    cols,
    stride_x,
    stride_o,
    HAS_PREQUANT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_PREQUANT:  # rounded like x * prequant in x's dtype
        p = tl.load(prequant_ptr + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) * p.to(tl.float32)).to(x.dtype)
    q = saturate_fp8(x, tl.load(scale_ptr))
    tl.store(out_ptr + row * stride_o + offs, q.to(out_ptr.dtype.element_ty), mask=mask)


def quantize_fp8(
    x: torch.Tensor, scale: torch.Tensor, prequant: torch.Tensor | None = None
) -> torch.Tensor:
    # x [T, K], scale [] float32, prequant [K] x.dtype -> [T, K] float8_e4m3fn
    assert x.stride(-1) == 1
    num_rows, cols = x.shape
    out = torch.empty(num_rows, cols, dtype=torch.float8_e4m3fn, device=x.device)
    block = min(1024, triton.next_power_of_2(cols))
    if num_rows:
        _quantize_fp8_kernel[(num_rows, triton.cdiv(cols, block))](
            x,
            prequant if prequant is not None else x,
            scale,
            out,
            cols,
            x.stride(0),
            out.stride(0),
            HAS_PREQUANT=prequant is not None,
            BLOCK=block,
        )
    return out
