"""FP8 linear (per-tensor weight and static activation scales) via torch._scaled_mm.

W4A8_AWQ runs here too: modelopt's W4A8 weight quantizer is int4-groupwise followed by a per-tensor
fp8 quantizer, so fp8(int4 dequant / weights_scaling_factor_2) is that fake-quant weight exactly
(8 bits per weight in memory instead of 4; the activations are fp8 either way).
"""

import torch
from torch import nn

from pipeline.engine.quant.matmul_ops import pad_rows, probe_min_rows
from pipeline.engine.quant.primitives import to_fp8


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
        # weight [out, in] float8_e4m3fn; w_scale [out] float32 (per member, repeated per row)
        super().__init__()
        w_scale = w_scale.float().reshape(-1)
        is_uniform = bool((w_scale == w_scale[0]).all())
        self.register_buffer("weight", weight.contiguous(), persistent=False)
        self.register_buffer("act_scale", act_scale.float().reshape(()), persistent=False)
        # one scale goes into the GEMM; members with other scales get a per-row correction
        self.register_buffer("w_scale", w_scale[0].reshape(()).clone(), persistent=False)
        self.register_buffer(
            "row_scale", None if is_uniform else (w_scale / w_scale[0]).to(dtype), persistent=False
        )
        self.register_buffer(
            "prequant", None if prequant is None else prequant.to(dtype), persistent=False
        )
        self.register_buffer("bias", bias, persistent=False)
        self.output_sizes = output_sizes
        self.dtype = dtype
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
        # [T, in] -> [T, out]
        if self.prequant is not None:
            x = x * self.prequant
        xq = to_fp8(x.float() / self.act_scale)  # [T, in] fp8
        if self.min_rows is None:
            w = self.weight.to(x.dtype) * self.w_scale.to(x.dtype)
            y = nn.functional.linear(xq.to(x.dtype) * self.act_scale.to(x.dtype), w)
        else:
            y = self._scaled_mm(pad_rows(xq, self.min_rows))[: x.shape[0]].to(x.dtype)
        if self.row_scale is not None:
            y = y * self.row_scale
        return y if self.bias is None else y + self.bias
