"""The quantized KV cache (checkpoint `kv_cache_quant_algo`: FP8).

modelopt's export writes one scale a layer, `transformer.layers.N.attention.kv_cache_scaling_factor`
F32 [1] (K and V amax / 448 from calibration, after RoPE), as TensorRT-LLM reads it. The cache
holds K / scale and V / scale as e4m3 codes (kernels.reference.quantize_fp8); attention reads
the codes as they are and folds the scale into its softmax scale (for K) and its output (for V:
kernels.reference.fold_kv_scale), so no dequantized copy is made. The cache takes half the bytes
of a 16-bit one: twice the blocks in the same memory, half the reads a decode step makes of it.
"""

import torch

from pipeline.errors import ConfigError

KV_CACHE_DTYPES = {"FP8": torch.float8_e4m3fn}
SCALE_SUFFIX = "kv_cache_scaling_factor"


def kv_cache_dtype(quantization: dict, dtype: torch.dtype) -> torch.dtype:
    """The cache's dtype for a checkpoint's quantization block: dtype when it has no KV quant."""
    check_kv_cache(quantization)
    algo = quantization.get("kv_cache_quant_algo")
    return dtype if algo is None else KV_CACHE_DTYPES[algo]


def check_kv_cache(quantization: dict) -> None:
    """Raise ConfigError for a KV cache format the engine cannot hold."""
    algo = quantization.get("kv_cache_quant_algo")
    if algo is not None and algo not in KV_CACHE_DTYPES:
        raise ConfigError(
            f"build: backend=torch keeps the KV cache in {sorted(KV_CACHE_DTYPES)} or the model "
            f"dtype; kv_cache_quant_algo={algo} is not supported: quantize with quant.kv_cache=fp8 "
            f"or none, or use backend=trtllm"
        )
