"""RMSNorm as Llama computes it (normalize in fp32, cast back, then scale), optionally fused with
the residual add that precedes it. Triton kernel on CUDA, plain PyTorch elsewhere.

Before an FP8 linear the normed rows leave quantized with that linear's static input scale
(`quantize_output`): one pass over the activations less."""

import torch
from torch import nn

from pipeline.engine import kernels
from pipeline.engine.kernels.reference import quantize_fp8


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [hidden]
        self.eps = eps
        self.kernel = kernels.load("rmsnorm", weight.device)
        self.out_scale: torch.Tensor | None = None  # [] float32: fp8 output

    def quantize_output(self, scale: torch.Tensor | None) -> None:
        """From now on, output fp8(normed / scale); None: the input's dtype."""
        self.out_scale = scale

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        y = self.weight * x32.to(x.dtype)
        return y if self.out_scale is None else quantize_fp8(y, self.out_scale)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        # x [T, hidden] -> normed [T, hidden]; with residual [T, hidden]: (norm(x + residual),
        # x + residual), the sum being the next residual
        if residual is None:
            if self.kernel:
                return self.kernel.rmsnorm(x, self.weight, self.eps, self.out_scale)
            return self._norm(x)
        if self.kernel:
            return self.kernel.add_rmsnorm(x, residual, self.weight, self.eps, self.out_scale)
        summed = x + residual
        return self._norm(summed), summed
