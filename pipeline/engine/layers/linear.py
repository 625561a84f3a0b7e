"""Linear layers built from TensorRT-LLM checkpoint tensors: dense now, quantized formats next.

Interface for the model code:
    build_linear(weights, prefixes, quantization, dtype, device) -> nn.Module
    forward(x: [T, in]) -> [T, sum(outs)]
`prefixes` are checkpoint linear prefixes fused along the output dim into one GEMM (in the
order given); `quantization` is the checkpoint config.json "quantization" block. The module's
`output_sizes` lists each prefix's out features so the caller can split the result.
"""

import fnmatch
import logging

import torch
from torch import nn

from pipeline.errors import ArtifactError

logger = logging.getLogger(__name__)


class DenseLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, output_sizes: list[int]):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [out, in]
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)  # [out]
        self.output_sizes = output_sizes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, in] -> [T, out]
        return nn.functional.linear(x, self.weight, self.bias)


def is_excluded(prefix: str, quantization: dict) -> bool:
    """True when the checkpoint keeps this linear dense (quant_algo None or exclude_modules)."""
    if not quantization or quantization.get("quant_algo") is None:
        return True
    patterns = quantization.get("exclude_modules") or []
    name = prefix.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatch(prefix, p) or fnmatch.fnmatch(name, p) for p in patterns)


def fused_bias(weights: dict[str, torch.Tensor], prefixes: list[str],
               output_sizes: list[int], dtype: torch.dtype) -> torch.Tensor | None:
    """[sum(outs)] bias, zeros for fused members without one; None when no member has a bias."""
    if not any(f"{p}.bias" in weights for p in prefixes):
        return None
    parts = [weights[f"{p}.bias"].to(dtype) if f"{p}.bias" in weights
             else torch.zeros(n, dtype=dtype) for p, n in zip(prefixes, output_sizes, strict=True)]
    return torch.cat(parts)


def build_dense(weights: dict[str, torch.Tensor], prefixes: list[str], dtype: torch.dtype,
                device: torch.device | str) -> DenseLinear:
    parts = [weights[f"{p}.weight"].to(dtype) for p in prefixes]  # each [out_i, in]
    output_sizes = [w.shape[0] for w in parts]
    weight = torch.cat(parts).to(device)
    bias = fused_bias(weights, prefixes, output_sizes, dtype)
    return DenseLinear(weight, None if bias is None else bias.to(device), output_sizes)


def build_linear(weights: dict[str, torch.Tensor], prefixes: list[str], quantization: dict | None,
                 dtype: torch.dtype, device: torch.device | str) -> nn.Module:
    missing = [f"{p}.weight" for p in prefixes if f"{p}.weight" not in weights]
    if missing:
        raise ArtifactError(f"build: checkpoint lacks {missing}; re-run convert/quantize "
                            "(force=true) to rewrite the checkpoint")
    return build_dense(weights, prefixes, dtype, device)
