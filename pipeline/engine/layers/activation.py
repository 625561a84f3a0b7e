"""SwiGLU on the fused gate|up projection output. Triton kernel on CUDA, plain PyTorch elsewhere.
Before an FP8 down projection the product leaves quantized with its input scale
(`quantize_output`)."""

import torch
from torch import nn

from pipeline.engine import kernels
from pipeline.engine.kernels.reference import quantize_fp8


class SiluAndMul(nn.Module):
    def __init__(self, device: torch.device):
        super().__init__()
        self.kernel = kernels.load("activation", device)
        self.out_scale: torch.Tensor | None = None  # [] float32: fp8 output

    def quantize_output(self, scale: torch.Tensor | None) -> None:
        """From now on, output fp8(silu(gate) * up / scale); None: the input's dtype."""
        self.out_scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, 2*I] (gate_proj | up_proj) -> [T, I]
        if self.kernel:
            return self.kernel.silu_and_mul(x, self.out_scale)
        gate, up = x.chunk(2, dim=-1)
        y = nn.functional.silu(gate) * up
        return y if self.out_scale is None else quantize_fp8(y, self.out_scale)
