"""Pure-torch NVFP4 fake quantization, so NVFP4 models run (and get a perplexity) on CPU.

modelopt 0.47's NVFP4 fake-quant forward needs CUDA ("amax must be a CUDA tensor for dynamic
block quantization"); calibration (max) and export do not. Registered through modelopt's public
`register_quant_backend`, it quantizes with the exporter's own NVFP4QTensor and dequantizes
again, so the forward sees exactly the values the export stores.
"""

import torch
from modelopt.torch.quantization.nn.modules.tensor_quantizer import (
    is_registered_quant_backend,
    register_quant_backend,
)
from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

BACKEND_NAME = "nvfp4_cpu"
E2M1_MAX = 6.0
E4M3_MAX = 448.0


def nvfp4_fake_quant(inputs: torch.Tensor, quantizer) -> torch.Tensor:
    """[..., K] -> [..., K]: e2m1 values x fp8 scale per `block` values x fp32 global scale."""
    block = quantizer.block_sizes[-1]
    amax = quantizer._get_amax(inputs)  # calibrated per-tensor amax (or the input's, if none)
    global_scale = amax.float() / (E2M1_MAX * E4M3_MAX)
    packed, block_scale, global_scale = NVFP4QTensor.quantize(
        inputs, block, weights_scaling_factor_2=global_scale
    )
    return packed.dequantize(
        dtype=inputs.dtype, scale=block_scale, double_scale=global_scale, block_sizes={-1: block}
    )


def ensure_registered() -> None:
    if not is_registered_quant_backend(BACKEND_NAME):
        register_quant_backend(BACKEND_NAME, nvfp4_fake_quant)


def use_cpu_backend(modelopt_config: dict) -> dict:
    """Route every FP4 (e2m1) quantizer of a modelopt config through the pure-torch backend."""
    ensure_registered()
    for entry in modelopt_config["quant_cfg"]:
        cfg = entry.get("cfg")
        if isinstance(cfg, dict) and cfg.get("num_bits") in ((2, 1), [2, 1]):
            cfg["backend"] = BACKEND_NAME
    return modelopt_config
