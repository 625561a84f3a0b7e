"""SwiGLU on the fused gate|up projection output. Triton kernel on CUDA, plain PyTorch elsewhere."""

import torch
from torch import nn

from pipeline.engine import kernels


class SiluAndMul(nn.Module):
    def __init__(self, device: torch.device):
        super().__init__()
        self.kernel = kernels.load("activation", device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, 2*I] (gate_proj | up_proj) -> [T, I]
        if self.kernel:
            return self.kernel.silu_and_mul(x)
        gate, up = x.chunk(2, dim=-1)
        return nn.functional.silu(gate) * up
