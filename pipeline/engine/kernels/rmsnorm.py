"""Fused RMSNorm (+ residual add) in Triton: one program per token row.

Rounding matches reference.rmsnorm (and HF Llama): the sum x + residual is rounded to the
input dtype, the normalized row is rounded to it before the weight multiply. With out_scale the
row leaves as fp8 (primitives.quantize_fp8 of that rounded row): the input of an FP8 linear,
quantized here instead of in one more pass over the activations.
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.fp8_quant import saturate_fp8
from pipeline.engine.kernels.tuned_configs import bucket, dtype_name, lookup


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    scale_ptr,
    out_ptr,
    residual_out_ptr,
    hidden,
    eps,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    HAS_RESIDUAL: tl.constexpr,
    QUANTIZE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(residual_out_ptr + row * stride_ro + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    variance = tl.sum(x32 * x32, axis=0) / hidden
    normed = (x32 * (1.0 / tl.sqrt(variance + eps))).to(x.dtype)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    y = (normed.to(tl.float32) * w.to(tl.float32)).to(x.dtype)
    if QUANTIZE:
        y = saturate_fp8(y, tl.load(scale_ptr))
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _launch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    out_scale: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    assert x.stride(-1) == 1 and weight.is_contiguous()
    num_rows, hidden = x.shape
    out_dtype = x.dtype if out_scale is None else torch.float8_e4m3fn
    out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    residual_out = torch.empty_like(x) if residual is not None else None
    launch = lookup("rmsnorm", (dtype_name(x), hidden, bucket(num_rows))) or {}  # `make tune`
    if num_rows:
        _rmsnorm_kernel[(num_rows,)](
            x,
            residual if residual is not None else x,
            weight,
            out_scale if out_scale is not None else weight,
            out,
            residual_out if residual_out is not None else out,
            hidden,
            eps,
            x.stride(0),
            residual.stride(0) if residual is not None else 0,
            out.stride(0),
            residual_out.stride(0) if residual_out is not None else 0,
            HAS_RESIDUAL=residual is not None,
            QUANTIZE=out_scale is not None,
            BLOCK=triton.next_power_of_2(hidden),
            **launch,
        )
    return out, residual_out


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out_scale: torch.Tensor | None = None
) -> torch.Tensor:
    # x [T, H], weight [H] -> [T, H] (fp8 with out_scale [] float32)
    return _launch(x, None, weight, eps, out_scale)[0]


def add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # x, residual [T, H] -> (rmsnorm(x + residual) [T, H] (fp8 with out_scale), x + residual)
    return _launch(x, residual, weight, eps, out_scale)
