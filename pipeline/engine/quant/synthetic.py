"""Quantized linears written the way modelopt's TensorRT-LLM export writes them, from float
weights, and the float32 math those tensors stand for. For tests, GPU self-checks and the
bench's quantized checkpoints (scripts.quant_checkpoints): no calibration, so activation scales
come from a given amax.
"""

import torch

from pipeline.engine.quant.primitives import (
    FP8_MAX,
    INT8_MAX,
    dequantize_groupwise,
    pack_int4_rows,
    quantize_fp8_per_tensor,
    quantize_int4_groupwise,
    quantize_int8_per_channel,
    requantize_fp8,
    to_fp8,
    unpack_int4_rows,
)

GROUP = 64  # int4 group: divides SmolLM2's 576 and every Llama width
QUANTIZATION = {  # checkpoint config.json "quantization" blocks, as modelopt writes them
    "W8A16": {"quant_algo": "W8A16"},
    "W8A8_SQ_PER_CHANNEL": {"quant_algo": "W8A8_SQ_PER_CHANNEL"},
    "FP8": {"quant_algo": "FP8"},
    "W4A16_AWQ": {
        "quant_algo": "W4A16_AWQ",
        "group_size": GROUP,
        "has_zero_point": False,
        "pre_quant_scale": True,
    },
    "W4A8_AWQ": {
        "quant_algo": "W4A8_AWQ",
        "group_size": GROUP,
        "has_zero_point": False,
        "pre_quant_scale": True,
    },
}


def export_like_modelopt(
    algo: str,
    prefix: str,
    w: torch.Tensor,
    smooth: torch.Tensor | None,
    act_amax: float,
    group_size: int = GROUP,
) -> dict[str, torch.Tensor]:
    """Tensors modelopt writes for one linear w [out, in] (modelopt_on_cpu.md §5 layouts);
    smooth [in] is the prequant (AWQ / SmoothQuant) vector, None for recipes that export none
    (int4 blockwise weight-only is labelled W4A16_AWQ but has no prequant scale)."""
    if algo in ("W8A16", "W8A8_SQ_PER_CHANNEL"):
        q, scale = quantize_int8_per_channel(w)
        out = {"weight": q, "weights_scaling_factor": scale}
    elif algo == "FP8":
        q, scale = quantize_fp8_per_tensor(w)
        out = {"weight": q, "weights_scaling_factor": scale}
    else:
        q, scale = quantize_int4_groupwise(w, group_size)
        out = {"weight": pack_int4_rows(q), "weights_scaling_factor": scale}
    if algo == "W8A8_SQ_PER_CHANNEL":
        out["activation_scaling_factor"] = torch.tensor([act_amax / INT8_MAX])
    if algo in ("FP8", "W4A8_AWQ"):
        out["activation_scaling_factor"] = torch.tensor([act_amax / FP8_MAX])
    if algo in ("W4A16_AWQ", "W4A8_AWQ", "W8A8_SQ_PER_CHANNEL") and smooth is not None:
        out["prequant_scaling_factor"] = smooth.to(torch.bfloat16)
    if algo == "W4A8_AWQ":
        w_dq = dequantize_groupwise(q, scale)
        out["weights_scaling_factor_2"] = (w_dq.abs().amax() / FP8_MAX).reshape(1)
    return {f"{prefix}.{k}": v for k, v in out.items()}


def reference_forward(
    algo: str,
    tensors: dict[str, torch.Tensor],
    prefix: str,
    x: torch.Tensor,
    shared_fp8_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    # [T, in] float32 -> [T, out] float32: dequantized weights, fake-quantized activations;
    # shared_fp8_scale: the fp8 weight re-rounded to the scale of the GEMM it is fused into
    get = lambda s: tensors[f"{prefix}.{s}"].float()  # noqa: E731
    if f"{prefix}.prequant_scaling_factor" in tensors:
        x = x * get("prequant_scaling_factor")
    if algo in ("W8A16", "W8A8_SQ_PER_CHANNEL"):
        w = get("weight") * get("weights_scaling_factor")[:, None]
    elif algo == "FP8":
        w8, s = tensors[f"{prefix}.weight"], get("weights_scaling_factor")
    else:
        w = dequantize_groupwise(
            unpack_int4_rows(tensors[f"{prefix}.weight"]), get("weights_scaling_factor")
        )
    if algo == "W4A8_AWQ":
        s = get("weights_scaling_factor_2")
        w8 = to_fp8(w / s)
    if algo in ("FP8", "W4A8_AWQ"):
        if shared_fp8_scale is not None:
            w8, s = requantize_fp8(w8, s, shared_fp8_scale), shared_fp8_scale
        w = w8.float() * s
        a = get("activation_scaling_factor")
        x = to_fp8(x / a).float() * a
    if algo == "W8A8_SQ_PER_CHANNEL":
        a = get("activation_scaling_factor")
        x = torch.clamp(torch.round(x / a), -INT8_MAX - 1, INT8_MAX) * a
    return x @ w.t()


def fused_reference(
    algo: str, tensors: dict[str, torch.Tensor], prefixes: list[str], x: torch.Tensor
) -> torch.Tensor:
    # [T, in] float32 -> [T, sum(out)] float32: members that share their input, fused as
    # build_linear fuses them (fp8 weights re-rounded to the members' largest scale)
    shared = None
    if algo in ("FP8", "W4A8_AWQ"):
        key = "weights_scaling_factor" if algo == "FP8" else "weights_scaling_factor_2"
        shared = torch.stack([tensors[f"{p}.{key}"].float().reshape(1) for p in prefixes])
        shared = shared.amax(dim=0)
    return torch.cat([reference_forward(algo, tensors, p, x, shared) for p in prefixes], dim=-1)


def random_layer(
    algo: str,
    prefixes: list[str],
    out_sizes: list[int],
    in_features: int,
    shared_input: bool = True,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Random linears fused under `prefixes`; shared_input=False gives each its own prequant
    vector (as AWQ does for mlp.fc and mlp.gate)."""
    g = torch.Generator().manual_seed(seed)
    smooth = torch.rand(in_features, generator=g) + 0.5
    tensors = {}
    for i, (p, n) in enumerate(zip(prefixes, out_sizes, strict=True)):
        member_smooth = smooth if shared_input else smooth * (1 + i)
        weight = torch.randn(n, in_features, generator=g) * 0.05
        tensors |= export_like_modelopt(algo, p, weight, member_smooth, act_amax=3.0)
    return tensors
