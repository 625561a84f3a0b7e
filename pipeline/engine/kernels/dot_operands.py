"""What tl.dot needs: the operand type and precision for a tensor's dtype, the smallest
dimension."""

import torch
import triton.language as tl

MIN_DOT = 16  # tl.dot needs every dimension >= 16


def dot_dtype(x: torch.Tensor) -> tl.dtype:
    """fp32 stays fp32; 16-bit floats multiply in their own type, except under triton's CPU
    interpreter (the tests), which computes 16-bit tl.dot wrongly: fp32 operands there."""
    if x.dtype == torch.float32 or x.device.type == "cpu":
        return tl.float32
    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[x.dtype]


def dot_precision(dtype: tl.dtype) -> str:
    """fp32 operands exactly (no tf32 rounding); the setting is moot for 16-bit ones."""
    return "ieee" if dtype == tl.float32 else "tf32"
