"""int8 weight linears: W8A16 (weight-only) and W8A8_SQ_PER_CHANNEL (SmoothQuant, static act)."""

import torch
from torch import nn

from pipeline.engine import kernels
from pipeline.engine.quant.matmul_ops import pad_rows, probe, probe_min_rows
from pipeline.engine.quant.primitives import quantize_int8_activation


def _buffer(module: nn.Module, name: str, value: torch.Tensor | None) -> None:
    module.register_buffer(name, value, persistent=False)


class Int8WeightOnlyLinear(nn.Module):
    """y = x @ (q * scale).T + bias: Triton on CUDA (16-bit: a GEMV for batch-1 decode, tl.dot
    for more rows), else torch._weight_int8pack_mm where it runs, else dequantize + matmul."""

    def __init__(
        self,
        weight: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        output_sizes: list[int],
    ):
        super().__init__()
        _buffer(self, "weight", weight.contiguous())  # [out, in] int8
        _buffer(self, "scale", scale.to(dtype))  # [out]
        _buffer(self, "bias", bias)  # [out] or None
        self.output_sizes = output_sizes
        # CUDA 16-bit: our Triton kernel (aten's CUDA int8pack_mm has no tensor cores)
        self.triton = kernels.load("int8_matmul", weight.device) if dtype.itemsize == 2 else None
        x = torch.zeros(1, weight.shape[1], dtype=dtype, device=weight.device)
        reason = probe(
            "torch._weight_int8pack_mm",
            lambda: torch._weight_int8pack_mm(x, self.weight, self.scale),
        )
        self.is_packed_mm = reason is None
        self.kernel = "torch._weight_int8pack_mm" if reason is None else f"dequant ({reason})"
        if self.triton:
            max_rows = self.triton.int8_gemv.MAX_ROWS
            self.kernel = f"triton w8a16 (gemv <= {max_rows} row, tl.dot above)"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, in] -> [T, out]
        if self.triton:
            y = self.triton.w8a16_matmul(x, self.weight, self.scale)
        elif self.is_packed_mm:
            y = torch._weight_int8pack_mm(x, self.weight, self.scale)
        else:
            y = nn.functional.linear(x, self.weight.to(x.dtype)) * self.scale
        return y if self.bias is None else y + self.bias


class Int8SmoothQuantLinear(nn.Module):
    """y = int8(x * smooth / act_scale) @ q.T * act_scale * w_scale + bias, via torch._int_mm.

    The activation quantizer is modelopt's static per-tensor int8 (round, clamp to [-128, 127]).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        w_scale: torch.Tensor,
        act_scale: torch.Tensor,
        smooth: torch.Tensor | None,
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        output_sizes: list[int],
    ):
        super().__init__()
        _buffer(self, "weight", weight.contiguous())  # [out, in] int8
        _buffer(self, "act_scale", act_scale.float().reshape(1))  # [1]
        _buffer(self, "out_scale", (act_scale.float() * w_scale.float()).reshape(-1))  # [out]
        _buffer(self, "smooth", None if smooth is None else smooth.to(dtype))  # [in]
        _buffer(self, "bias", bias)
        self.output_sizes = output_sizes
        k = weight.shape[1]

        def int_mm(rows: int) -> torch.Tensor:
            xq = torch.zeros(rows, k, dtype=torch.int8, device=weight.device)
            return torch._int_mm(xq, self.weight.t())

        self.min_rows, reason = probe_min_rows("torch._int_mm", int_mm)
        self.kernel = "torch._int_mm" if reason is None else f"dequant ({reason})"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, in] -> [T, out]
        if self.smooth is not None:
            x = x * self.smooth
        xq = quantize_int8_activation(x, self.act_scale)  # [T, in] int8
        if self.min_rows is None:
            acc = nn.functional.linear(xq.to(x.dtype), self.weight.to(x.dtype)).float()
        else:
            acc = torch._int_mm(pad_rows(xq, self.min_rows), self.weight.t())[: x.shape[0]]
        y = (acc.float() * self.out_scale).to(x.dtype)
        return y if self.bias is None else y + self.bias
