"""SwiGLU (silu(gate) * up) on the fused gate|up projection output, in Triton. With out_scale
the product leaves as fp8 (primitives.quantize_fp8 of the rounded product): the input of an FP8
down projection, quantized here instead of in one more pass."""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.fp8_quant import saturate_fp8
from pipeline.engine.kernels.tuned_configs import bucket, dtype_name, lookup


@triton.jit
def _silu_and_mul_kernel(
    x_ptr,
    scale_ptr,
    out_ptr,
    inter,
    stride_x,
    stride_o,
    QUANTIZE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0)
    g32 = gate.to(tl.float32)
    silu = (g32 / (1.0 + tl.exp(-g32))).to(gate.dtype)  # rounded like F.silu's output
    y = (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype)
    if QUANTIZE:
        y = saturate_fp8(y, tl.load(scale_ptr))
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor, out_scale: torch.Tensor | None = None) -> torch.Tensor:
    # [T, 2I] (gate | up) -> [T, I] (fp8 with out_scale [] float32)
    assert x.stride(-1) == 1 and x.shape[-1] % 2 == 0
    num_rows, inter = x.shape[0], x.shape[-1] // 2
    out_dtype = x.dtype if out_scale is None else torch.float8_e4m3fn
    out = torch.empty(num_rows, inter, dtype=out_dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(inter))
    launch = dict(lookup("silu_and_mul", (dtype_name(x), inter, bucket(num_rows))) or {})
    if launch:  # `make tune` picked it
        block = launch.pop("BLOCK")
    if num_rows:
        _silu_and_mul_kernel[(num_rows, triton.cdiv(inter, block))](
            x,
            out_scale if out_scale is not None else x,
            out,
            inter,
            x.stride(0),
            out.stride(0),
            QUANTIZE=out_scale is not None,
            BLOCK=block,
            **launch,
        )
    return out
