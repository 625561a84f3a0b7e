"""Pure tensor functions for the quantized formats modelopt exports (no module state).

Layouts (modelopt 0.47 `export_tensorrt_llm_checkpoint`, checked against its fake-quant weights):
- int8 weights: I8 [out, in]; per-channel scale F32 [out]; w = q * scale[:, None].
- int4 AWQ weights: I8 [out/2, in], two signed int4 of adjacent OUTPUT rows per byte (low nibble =
  even row); scale F32 [out, in/group]; w = q * scale repeated over each group of `group` columns.
- fp8 weights: F8_E4M3 [out, in]; per-tensor scale F32 [1]; w = q.float() * scale.
Activation scales are amax / qmax (int8: 127, fp8: 448), like the weight scales.
"""

import torch

from pipeline.engine.kernels.reference import FP8_MAX, to_fp8

INT8_MAX = 127
INT4_MIN, INT4_MAX = -8, 7


def unpack_int4_rows(packed: torch.Tensor) -> torch.Tensor:
    # [out/2, in] int8 (two rows per byte) -> [out, in] int8 in [-8, 7]
    u = packed.view(torch.uint8).to(torch.int16)
    low = ((u & 0xF) ^ 8) - 8  # sign-extend a nibble
    high = ((u >> 4) ^ 8) - 8
    return torch.stack([low, high], dim=1).reshape(-1, packed.shape[1]).to(torch.int8)


def pack_int4_rows(q: torch.Tensor) -> torch.Tensor:
    # [out, in] int8 in [-8, 7] -> [out/2, in] int8, the inverse of unpack_int4_rows
    assert q.shape[0] % 2 == 0, "int4 rows are packed in pairs"
    u = q.to(torch.int16) & 0xF
    return (u[0::2] | (u[1::2] << 4)).to(torch.uint8).view(torch.int8)


def pack_int4_tinygemm(q: torch.Tensor) -> torch.Tensor:
    # [out, in] int8 in [-8, 7] -> [out, in/2] uint8 for CUDA `_convert_weight_to_int4pack`:
    # values offset to [0, 15], even COLUMN in the high nibble (tinygemm's order).
    u = q.to(torch.int32) + 8
    return (u[:, 0::2] << 4 | u[:, 1::2]).to(torch.uint8)


def tinygemm_scales_and_zeros(scale: torch.Tensor) -> torch.Tensor:
    # [out, in/group] -> [in/group, out, 2] (scale, zero); tinygemm computes (u - 8) * scale + zero,
    # so a zero of 0 gives the symmetric q * scale of the checkpoint.
    scale_t = scale.t().contiguous()
    return torch.stack([scale_t, torch.zeros_like(scale_t)], dim=-1).contiguous()


def dequantize_groupwise(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # q [out, in] int, scale [out, in/group] -> [out, in] float32
    group = q.shape[1] // scale.shape[1]
    return q.float() * scale.float().repeat_interleave(group, dim=1)


def quantize_int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # [out, in] float -> (q [out, in] int8, scale [out] float32), symmetric, amax / 127
    scale = w.float().abs().amax(dim=1).clamp(min=1e-8) / INT8_MAX
    q = torch.clamp(torch.round(w.float() / scale[:, None]), -INT8_MAX - 1, INT8_MAX)
    return q.to(torch.int8), scale


def quantize_int4_groupwise(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    # [out, in] float -> (q [out, in] int8 in [-8, 7], scale [out, in/group] float32), amax / 7
    out_features, in_features = w.shape
    grouped = w.float().reshape(out_features, in_features // group, group)
    scale = grouped.abs().amax(dim=-1).clamp(min=1e-8) / INT4_MAX
    q = torch.clamp(torch.round(grouped / scale[..., None]), INT4_MIN, INT4_MAX)
    return q.reshape(out_features, in_features).to(torch.int8), scale


def quantize_fp8_per_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # [out, in] float -> (q [out, in] float8_e4m3fn, scale [1] float32), amax / 448
    scale = (w.float().abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(1)
    return to_fp8(w.float() / scale), scale


def requantize_fp8(q: torch.Tensor, scale: torch.Tensor, new_scale: torch.Tensor) -> torch.Tensor:
    # fp8 q with per-tensor scale -> fp8 with new_scale >= scale (the same values, re-rounded)
    return to_fp8(q.float() * (scale.float() / new_scale.float()))


def quantize_int8_activation(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # [T, in] float, scale [1] -> [T, in] int8, the static per-tensor activation quantizer
    return torch.clamp(torch.round(x.float() / scale), -INT8_MAX - 1, INT8_MAX).to(torch.int8)
