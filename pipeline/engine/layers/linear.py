"""Linear layers built from TensorRT-LLM checkpoint tensors: dense and modelopt's quantized formats.

Interface for the model code:
    build_linear(weights, prefixes, quantization, dtype, device) -> nn.Module
    forward(x: [T, in]) -> [T, sum(outs)]
`prefixes` are checkpoint linear prefixes fused along the output dim into one GEMM (in the order
given); `quantization` is the checkpoint config.json "quantization" block. Every module has
`output_sizes` (each prefix's out features, to split the result) and `kernel` (which matmul it
runs, with the fallback reason when a built-in op was unavailable; log `kernel_counts(model)`).

Formats (quant_algo): None (dense), W8A16, W4A16_AWQ, W8A8_SQ_PER_CHANNEL, FP8, W4A8_AWQ; see
pipeline/engine/quant/. Runtime packing (int4 tinygemm layouts) happens here, at load, because
it depends on the device: the engine dir keeps the checkpoint's tensors unchanged.
Fused members whose quantized inputs differ (AWQ gives mlp.fc and mlp.gate their own prequant
scales) run as one GEMM each inside a ConcatLinear; the output is the same [T, sum(outs)].
"""

import fnmatch
import logging
from collections import Counter

import torch
from torch import nn

from pipeline.engine.quant.formats import BUILDERS, read_member, share_input_transform
from pipeline.errors import ArtifactError, ConfigError

logger = logging.getLogger(__name__)


class DenseLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, output_sizes: list[int]):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [out, in]
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)  # [out]
        self.output_sizes = output_sizes
        self.kernel = "dense"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, in] -> [T, out]
        return nn.functional.linear(x, self.weight, self.bias)


class ConcatLinear(nn.Module):
    """Members that cannot share one GEMM, run one after another: [T, in] -> [T, sum(outs)]."""

    def __init__(self, parts: list[nn.Module]):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.output_sizes = [n for p in parts for n in p.output_sizes]
        self.kernel = "+".join(sorted({p.kernel for p in parts}))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([p(x) for p in self.parts], dim=-1)


def is_excluded(prefix: str, quantization: dict | None) -> bool:
    """True when the checkpoint keeps this linear dense (quant_algo None or exclude_modules)."""
    if not quantization or quantization.get("quant_algo") is None:
        return True
    patterns = quantization.get("exclude_modules") or []
    name = prefix.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatch(prefix, p) or fnmatch.fnmatch(name, p) for p in patterns)


def check_quantization(quantization: dict | None) -> None:
    """Raise ConfigError for a quantization block this engine cannot run."""
    algo = (quantization or {}).get("quant_algo")
    if algo is not None and algo not in BUILDERS:
        raise ConfigError(
            f"build: backend=torch cannot run quant_algo={algo}; it runs "
            f"{sorted(BUILDERS)} or none; pick another quant=<name> or "
            "backend=trtllm"
        )
    if algo is not None and (quantization or {}).get("has_zero_point"):
        raise ConfigError(
            f"build: backend=torch runs {algo} without zero points only "
            "(has_zero_point=true in the checkpoint); re-quantize with an AWQ "
            "config (quant=<int4_awq name>) or use backend=trtllm"
        )


def kernel_counts(model: nn.Module) -> dict[str, int]:
    """How many linears run each kernel (with fallback reasons), for one INFO line at load."""
    tops = [m for m in model.modules() if hasattr(m, "kernel") and hasattr(m, "output_sizes")]
    inner = {id(p) for m in tops if isinstance(m, ConcatLinear) for p in m.parts}
    return dict(Counter(m.kernel for m in tops if id(m) not in inner))


def build_dense(
    weights: dict[str, torch.Tensor],
    prefixes: list[str],
    dtype: torch.dtype,
    device: torch.device | str,
) -> DenseLinear:
    parts = [weights[f"{p}.weight"].to(dtype) for p in prefixes]  # each [out_i, in]
    output_sizes = [w.shape[0] for w in parts]
    weight = torch.cat(parts).to(device)
    if any(f"{p}.bias" in weights for p in prefixes):
        bias = torch.cat(
            [
                weights[f"{p}.bias"].to(dtype)
                if f"{p}.bias" in weights
                else torch.zeros(n, dtype=dtype)
                for p, n in zip(prefixes, output_sizes, strict=True)
            ]
        ).to(device)
    else:
        bias = None
    return DenseLinear(weight, bias, output_sizes)


def build_linear(
    weights: dict[str, torch.Tensor],
    prefixes: list[str],
    quantization: dict | None,
    dtype: torch.dtype,
    device: torch.device | str,
) -> nn.Module:
    missing = [f"{p}.weight" for p in prefixes if f"{p}.weight" not in weights]
    if missing:
        raise ArtifactError(
            f"build: checkpoint lacks {missing}; re-run convert/quantize "
            "(force=true) to rewrite the checkpoint"
        )
    check_quantization(quantization)
    excluded = [is_excluded(p, quantization) for p in prefixes]
    if all(excluded):
        return build_dense(weights, prefixes, dtype, device)
    if not any(excluded):
        algo = quantization["quant_algo"]
        members = [read_member(weights, p, algo) for p in prefixes]
        if share_input_transform(members):
            return BUILDERS[algo](members, dtype, device)
    return ConcatLinear([build_linear(weights, [p], quantization, dtype, device) for p in prefixes])
