"""SwiGLU (silu(gate) * up) on the fused gate|up projection output, in Triton."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, inter, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0)
    g32 = gate.to(tl.float32)
    silu = (g32 / (1.0 + tl.exp(-g32))).to(gate.dtype)  # rounded like F.silu's output
    y = (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype)
    tl.store(out_ptr + row * stride_o + cols, y, mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    # [T, 2I] (gate | up) -> [T, I]
    assert x.stride(-1) == 1 and x.shape[-1] % 2 == 0
    num_rows, inter = x.shape[0], x.shape[-1] // 2
    out = torch.empty(num_rows, inter, dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(inter))
    if num_rows:
        _silu_and_mul_kernel[(num_rows, triton.cdiv(inter, block))](
            x, out, inter, x.stride(0), out.stride(0), BLOCK=block
        )
    return out
