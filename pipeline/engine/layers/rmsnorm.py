"""RMSNorm as Llama computes it (normalize in fp32, cast back, then scale), optionally fused with
the residual add that precedes it. Triton kernel on CUDA, plain PyTorch elsewhere."""

import torch
from torch import nn

from pipeline.engine import kernels


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [hidden]
        self.eps = eps
        self.kernel = kernels.load("rmsnorm", weight.device)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        # x [T, hidden] -> normed [T, hidden]; with residual [T, hidden]: (norm(x + residual),
        # x + residual), the sum being the next residual
        if residual is None:
            return self.kernel.rmsnorm(x, self.weight, self.eps) if self.kernel else self._norm(x)
        if self.kernel:
            return self.kernel.add_rmsnorm(x, residual, self.weight, self.eps)
        summed = x + residual
        return self._norm(summed), summed
