"""Checkpoint tensors of one quant_algo -> its runtime module, fused along the output dim.

A "member" is one checkpoint linear prefix: {suffix: tensor} for weight, weights_scaling_factor,
weights_scaling_factor_2, activation_scaling_factor, prequant_scaling_factor, bias.
Members fuse into one GEMM only when their input-side tensors (prequant and activation scales)
are equal; the caller checks that with `share_input_transform` before fusing.
"""

from collections.abc import Callable

import torch
from torch import nn

from pipeline.engine.quant.fp8_linear import Fp8Linear
from pipeline.engine.quant.int4_linear import Int4GroupwiseLinear
from pipeline.engine.quant.int8_linear import Int8SmoothQuantLinear, Int8WeightOnlyLinear
from pipeline.engine.quant.primitives import (
    dequantize_groupwise,
    requantize_fp8,
    to_fp8,
    unpack_int4_rows,
)
from pipeline.errors import ArtifactError

SUFFIXES = (
    "weight",
    "weights_scaling_factor",
    "weights_scaling_factor_2",
    "activation_scaling_factor",
    "prequant_scaling_factor",
    "bias",
)
INPUT_SUFFIXES = ("prequant_scaling_factor", "activation_scaling_factor")
REQUIRED = {
    "W8A16": ("weight", "weights_scaling_factor"),
    "W4A16_AWQ": ("weight", "weights_scaling_factor"),
    "W8A8_SQ_PER_CHANNEL": ("weight", "weights_scaling_factor", "activation_scaling_factor"),
    "FP8": ("weight", "weights_scaling_factor", "activation_scaling_factor"),
    "W4A8_AWQ": (
        "weight",
        "weights_scaling_factor",
        "weights_scaling_factor_2",
        "activation_scaling_factor",
    ),
}
Member = dict[str, torch.Tensor]


def read_member(weights: dict[str, torch.Tensor], prefix: str, quant_algo: str) -> Member:
    member = {s: weights[f"{prefix}.{s}"] for s in SUFFIXES if f"{prefix}.{s}" in weights}
    missing = [f"{prefix}.{s}" for s in REQUIRED[quant_algo] if s not in member]
    if missing:
        raise ArtifactError(
            f"build: {quant_algo} checkpoint lacks {missing}; re-export it with "
            "the quantize stage (force=true)"
        )
    return member


def share_input_transform(members: list[Member]) -> bool:
    """True when every member sees the same quantized input, so one GEMM can serve them all."""
    for suffix in INPUT_SUFFIXES:
        values = [m.get(suffix) for m in members]
        if any(v is None for v in values) != all(v is None for v in values):
            return False
        if values[0] is not None and not all(torch.equal(values[0], v) for v in values[1:]):
            return False
    return True


def _cat(members: list[Member], suffix: str) -> torch.Tensor:
    return torch.cat([m[suffix] for m in members])


def _bias(members: list[Member], sizes: list[int], dtype: torch.dtype) -> torch.Tensor | None:
    if not any("bias" in m for m in members):
        return None
    return torch.cat(
        [
            m["bias"].to(dtype) if "bias" in m else torch.zeros(n, dtype=dtype)
            for m, n in zip(members, sizes, strict=True)
        ]
    )


def _to(t: torch.Tensor | None, device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


def build_w8a16(members: list[Member], dtype: torch.dtype, device) -> nn.Module:
    sizes = [m["weight"].shape[0] for m in members]
    return Int8WeightOnlyLinear(
        _cat(members, "weight").to(device),
        _cat(members, "weights_scaling_factor").to(device),
        _to(_bias(members, sizes, dtype), device),
        dtype,
        sizes,
    )


def build_w8a8(members: list[Member], dtype: torch.dtype, device) -> nn.Module:
    sizes = [m["weight"].shape[0] for m in members]
    first = members[0]
    return Int8SmoothQuantLinear(
        _cat(members, "weight").to(device),
        _cat(members, "weights_scaling_factor").to(device),
        first["activation_scaling_factor"].to(device),
        _to(first.get("prequant_scaling_factor"), device),
        _to(_bias(members, sizes, dtype), device),
        dtype,
        sizes,
    )


def build_w4a16_awq(members: list[Member], dtype: torch.dtype, device) -> nn.Module:
    qs = [unpack_int4_rows(m["weight"]) for m in members]  # each [out_i, in]
    sizes = [q.shape[0] for q in qs]
    return Int4GroupwiseLinear(
        torch.cat(qs).to(device),
        _cat(members, "weights_scaling_factor").float().to(device),
        _to(members[0].get("prequant_scaling_factor"), device),
        _to(_bias(members, sizes, dtype), device),
        dtype,
        sizes,
    )


def build_fp8(members: list[Member], dtype: torch.dtype, device) -> nn.Module:
    """Fused members (mlp.fc + mlp.gate) share the largest weight scale: the others' weights are
    re-rounded to it (vLLM's requantize_with_max_scale), so one GEMM needs no per-row rescale."""
    sizes = [m["weight"].shape[0] for m in members]
    scales = [m["weights_scaling_factor"].float().reshape(1) for m in members]
    scale = torch.stack(scales).amax(dim=0)
    weight = torch.cat(
        [requantize_fp8(m["weight"], s, scale) for m, s in zip(members, scales, strict=True)]
    )
    return Fp8Linear(
        weight.to(device),
        scale.to(device),
        members[0]["activation_scaling_factor"].to(device),
        _to(members[0].get("prequant_scaling_factor"), device),
        _to(_bias(members, sizes, dtype), device),
        dtype,
        sizes,
    )


def w4a8_as_fp8(member: Member) -> Member:
    """W4A8_AWQ member -> FP8 member: the int4 weight requantized per tensor to fp8."""
    # [out/2, in] int4 rows, [out, in/group] scales -> [out, in] fp8 scaled by scale_2
    scale_2 = member["weights_scaling_factor_2"].float().reshape(1)
    weight = dequantize_groupwise(
        unpack_int4_rows(member["weight"]), member["weights_scaling_factor"]
    )
    return {**member, "weight": to_fp8(weight / scale_2), "weights_scaling_factor": scale_2}


def build_w4a8_awq(members: list[Member], dtype: torch.dtype, device) -> nn.Module:
    return build_fp8([w4a8_as_fp8(m) for m in members], dtype, device)


BUILDERS: dict[str, Callable[[list[Member], torch.dtype, object], nn.Module]] = {
    "W8A16": build_w8a16,
    "W4A16_AWQ": build_w4a16_awq,
    "W8A8_SQ_PER_CHANNEL": build_w8a8,
    "FP8": build_fp8,
    "W4A8_AWQ": build_w4a8_awq,
}
