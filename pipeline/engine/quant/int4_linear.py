"""int4 groupwise weight-only linear (W4A16_AWQ). CUDA: decode-sized steps on our tensor-core
kernel (kernels/int4_mma), or tinygemm where it can't run; prompt steps dequantize for one dense
GEMM. CPU: PyTorch's tinygemm twin.

Each kernel wants its own packed layout, made here at load time from the checkpoint's [out/2, in]
rows (the layout is device-specific, so the engine dir keeps the checkpoint's tensors).
"""

import torch
from torch import nn

from pipeline.engine.kernels import int4_mma
from pipeline.engine.quant.matmul_ops import int4_inner_k_tiles, probe
from pipeline.engine.quant.primitives import (
    dequantize_groupwise,
    pack_int4_rows,
    pack_int4_tinygemm,
    tinygemm_scales_and_zeros,
    unpack_int4_rows,
)

TINYGEMM_GROUPS = (32, 64, 128, 256)
PACKED_MAX_ROWS = 64


def _pack_cuda(q: torch.Tensor, scale: torch.Tensor, tiles: int) -> tuple[torch.Tensor, ...]:
    packed = torch._convert_weight_to_int4pack(pack_int4_tinygemm(q), tiles)
    return packed, tinygemm_scales_and_zeros(scale).to(torch.bfloat16)


def _pack_cpu(
    q: torch.Tensor, scale: torch.Tensor, tiles: int, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    unsigned = (q.to(torch.int32) + 8).contiguous()  # [out, in] in [0, 15]
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unsigned, tiles)
    return packed, tinygemm_scales_and_zeros(scale).to(dtype)


class Int4GroupwiseLinear(nn.Module):
    """y = (x * prequant) @ (q * scale per group).T + bias."""

    def __init__(
        self,
        q: torch.Tensor,
        scale: torch.Tensor,
        prequant: torch.Tensor | None,
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        output_sizes: list[int],
    ):
        # q [out, in] int8 in [-8, 7]; scale [out, in/group] float32; prequant [in]
        super().__init__()
        out_features, in_features = q.shape
        self.group = in_features // scale.shape[1]
        self.out_features = out_features
        self.output_sizes = output_sizes
        self.register_buffer(
            "prequant", None if prequant is None else prequant.to(dtype), persistent=False
        )
        self.register_buffer("bias", bias, persistent=False)
        self.is_cuda = q.device.type == "cuda"
        self.act_dtype = torch.bfloat16 if self.is_cuda else dtype  # what the kernels take
        mma_reason = self._try_pack_mma(q, scale) if self.is_cuda else "CPU"
        self.uses_mma = mma_reason is None
        reason = None if self.uses_mma else self._try_pack(q, scale, dtype)
        self.is_packed = reason is None
        if self.uses_mma:
            self.kernel = f"int4_mma (tensor cores, <= {int4_mma.MAX_ROWS} rows)"
        elif reason is None:
            self.kernel = self._kernel_name() + (f" ({mma_reason})" if self.is_cuda else "")
        else:
            self.kernel = f"dequant ({reason})"
        # few-row kernels only: tinygemm made prompt steps many times slower than bf16. On
        # CUDA, steps past PACKED_MAX_ROWS dequantize for one dense GEMM: int4_mma's own words,
        # or else the checkpoint rows (an extra copy of the int4 weights, 0.5 byte a parameter)
        self.max_packed_rows = PACKED_MAX_ROWS if self.is_cuda else None
        if reason is not None or (self.is_cuda and not self.uses_mma):
            self.register_buffer("packed_rows", pack_int4_rows(q), persistent=False)
            self.register_buffer("scale", scale.float(), persistent=False)

    def _try_pack_mma(self, q: torch.Tensor, scale: torch.Tensor) -> str | None:
        # the shape first: a weight that can't fit never builds the kernel
        reason = int4_mma.fits(*q.shape, self.group) or int4_mma.unavailable()
        if reason is None:
            words, scales = int4_mma.pack(q, scale)
            self.register_buffer("mma_words", words, persistent=False)
            self.register_buffer("mma_scales", scales, persistent=False)
            # AWQ's pre-quant scale is applied as the kernel loads x (a multiply kernel a linear
            # cost ~6% of an 8B batch-1 step)
            prequant = None if self.prequant is None else self.prequant.to(torch.bfloat16)
            self.register_buffer("mma_prequant", prequant, persistent=False)
        return reason

    def _kernel_name(self) -> str:
        return "torch._weight_int4pack_mm" if self.is_cuda else "torch._weight_int4pack_mm_for_cpu"

    def _try_pack(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> str | None:
        tiles = int4_inner_k_tiles(q.shape[1])
        if self.group not in TINYGEMM_GROUPS or tiles is None or q.shape[0] % 8:
            return (
                f"tinygemm needs group in {TINYGEMM_GROUPS}, in % 32 == 0, out % 8 == 0; got "
                f"group {self.group}, weight {tuple(q.shape)}"
            )
        try:
            packed, sz = (
                _pack_cuda(q, scale, tiles) if self.is_cuda else _pack_cpu(q, scale, tiles, dtype)
            )
        except (RuntimeError, NotImplementedError) as err:
            return f"int4 packing: {str(err).splitlines()[0][:160]}"
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales_and_zeros", sz, persistent=False)
        x = torch.zeros(1, q.shape[1], dtype=self.act_dtype, device=q.device)
        return probe(self._kernel_name(), lambda: self._packed_mm(x))

    def _packed_mm(self, x: torch.Tensor) -> torch.Tensor:
        mm = (
            torch._weight_int4pack_mm
            if self.is_cuda
            else torch.ops.aten._weight_int4pack_mm_for_cpu
        )
        return mm(x, self.packed, self.group, self.scales_and_zeros)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, in] -> [T, out]
        is_few_rows = self.max_packed_rows is None or x.shape[0] <= self.max_packed_rows
        if self.uses_mma and is_few_rows:  # the kernel applies the pre-quant scale
            y = int4_mma.matmul(
                x.to(self.act_dtype), self.mma_words, self.mma_scales, self.group, self.mma_prequant
            ).to(x.dtype)
        else:
            y = self._matmul(x if self.prequant is None else x * self.prequant, is_few_rows)
        return y if self.bias is None else y + self.bias

    def _matmul(self, x: torch.Tensor, is_few_rows: bool) -> torch.Tensor:
        if self.is_packed and is_few_rows:
            return self._packed_mm(x.to(self.act_dtype)).to(x.dtype)
        if self.uses_mma:
            w = int4_mma.dequantize(self.mma_words, self.mma_scales, self.group)
        else:
            w = dequantize_groupwise(unpack_int4_rows(self.packed_rows), self.scale)
        return nn.functional.linear(x, w.to(x.dtype))
