"""FP8 linear (per-tensor weight and static activation scales) via torch._scaled_mm.

W4A8_AWQ runs here too: modelopt's W4A8 weight quantizer is int4-groupwise followed by a per-tensor
fp8 quantizer, so fp8(int4 dequant / weights_scaling_factor_2) is that fake-quant weight exactly
(8 bits per weight in memory instead of 4; the activations are fp8 either way).

The input quantizer is static, so the layer that produces the input can apply it: RMSNorm and
SwiGLU take `fused_input_scale(linear)` and hand over fp8 rows, which this linear takes as they
are. Otherwise it quantizes in one Triton pass on CUDA (kernels/fp8_quant.py).
"""

import torch
from torch import nn

from pipeline.engine import kernels
from pipeline.engine.kernels.reference import quantize_fp8
from pipeline.engine.quant.matmul_ops import pad_rows, probe_min_rows


class Fp8Linear(nn.Module):
    """y = fp8(x * prequant / act_scale) @ w_fp8.T * act_scale * w_scale + bias."""

    def __init__(
        self,
        weight: torch.Tensor,
        w_scale: torch.Tensor,
        act_scale: torch.Tensor,
        prequant: torch.Tensor | None,
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        output_sizes: list[int],
    ):
        # weight [out, in] float8_e4m3fn; w_scale [1] float32 (fused members share one)
        super().__init__()
        self.register_buffer("weight", weight.contiguous(), persistent=False)
        self.register_buffer("w_scale", w_scale.float().reshape(()), persistent=False)
        self.register_buffer("act_scale", act_scale.float().reshape(()), persistent=False)
        self.register_buffer(
            "prequant", None if prequant is None else prequant.to(dtype), persistent=False
        )
        self.register_buffer("bias", bias, persistent=False)
        self.output_sizes = output_sizes
        self.dtype = dtype
        self.quantizer = kernels.load("fp8_quant", weight.device)
        k = weight.shape[1]

        def scaled_mm(rows: int) -> torch.Tensor:
            xq = torch.zeros(rows, k, dtype=torch.float8_e4m3fn, device=weight.device)
            return self._scaled_mm(xq)

        self.min_rows, reason = probe_min_rows("torch._scaled_mm", scaled_mm)
        self.kernel = "torch._scaled_mm" if reason is None else f"dequant ({reason})"

    def _scaled_mm(self, xq: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(
            xq, self.weight.t(), scale_a=self.act_scale, scale_b=self.w_scale, out_dtype=self.dtype
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, in] (float, or fp8 already quantized with act_scale) -> [T, out]
        if x.dtype != torch.float8_e4m3fn:
            quantize = self.quantizer.quantize_fp8 if self.quantizer else quantize_fp8
            x = quantize(x, self.act_scale, self.prequant)
        if self.min_rows is None:
            w = self.weight.to(self.dtype) * self.w_scale.to(self.dtype)
            y = nn.functional.linear(x.to(self.dtype) * self.act_scale.to(self.dtype), w)
        else:
            y = self._scaled_mm(pad_rows(x, self.min_rows))[: x.shape[0]]
        return y if self.bias is None else y + self.bias


def fused_input_scale(linear: nn.Module) -> torch.Tensor | None:
    """The activation scale a producing layer may quantize linear's input with (fp8 out), or
    None: linear is not FP8, or its input needs AWQ's per-channel pre-scale first."""
    if isinstance(linear, Fp8Linear) and linear.prequant is None:
        return linear.act_scale
    return None
