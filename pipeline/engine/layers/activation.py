"""SwiGLU on the fused gate|up projection output."""

import torch
from torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, 2*I] (gate_proj | up_proj) -> [T, I]
        gate, up = x.chunk(2, dim=-1)
        return nn.functional.silu(gate) * up
