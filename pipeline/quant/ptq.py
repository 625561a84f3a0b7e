"""modelopt post-training quantization of an HF model: config from the recipe, calibrate, done.

modelopt is imported inside functions: importing it costs 5-8 s and ~4,800 modules, which
commands that never quantize should not pay.
"""

import copy
import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from pipeline.quant.calibration import batches
from pipeline.quant.recipes import KV_CACHE_FORMATS, Recipe

log = logging.getLogger(__name__)


def _set_block_size(quant_cfg: list, block_size: int) -> None:
    """Set the int4 weight group size (TensorRT-LLM's --awq_block_size does the same)."""
    for entry in quant_cfg:
        cfgs = entry.get("cfg")
        for cfg in cfgs if isinstance(cfgs, list) else [cfgs]:
            if isinstance(cfg, dict) and cfg.get("num_bits") == 4 and cfg.get("block_sizes"):
                cfg["block_sizes"] = {**cfg["block_sizes"], -1: block_size}


def _set_weight_bits(quant_cfg: list, num_bits: int) -> None:
    """Per-channel symmetric weights of num_bits (trtllm-build's W8A16 / W4A16 quantization)."""
    for entry in quant_cfg:
        if entry.get("quantizer_name") == "*weight_quantizer":
            entry["cfg"] = {**entry["cfg"], "num_bits": num_bits, "axis": 0}


def modelopt_config(recipe: Recipe, quant, on_cpu: bool) -> dict:
    """A private copy of the recipe's modelopt config with our settings applied."""
    import modelopt.torch.quantization as mtq

    config = copy.deepcopy(getattr(mtq, recipe.modelopt_config))
    if recipe.build_quantizes_bits is not None:
        _set_weight_bits(config["quant_cfg"], recipe.build_quantizes_bits)
    if recipe.uses_block_size:
        _set_block_size(config["quant_cfg"], quant.block_size)
    if recipe.uses_smoothquant_alpha:
        config["algorithm"] = {"method": "smoothquant", "alpha": quant.smoothquant_alpha}
    if quant.kv_cache in KV_CACHE_FORMATS:
        # modelopt's attention wrapper quantizes K and V with these; the export turns their amax
        # into kv_cache_scaling_factor (what FP8_KV_CFG does, with int8 bits for int8)
        config["quant_cfg"].append(
            {
                "quantizer_name": "*[kv]_bmm_quantizer",
                "cfg": {"num_bits": KV_CACHE_FORMATS[quant.kv_cache].num_bits, "axis": None},
            }
        )
    if recipe.quant_algo == "NVFP4" and on_cpu:
        from pipeline.quant.nvfp4_cpu import use_cpu_backend

        use_cpu_backend(config)
    return config


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(hf_dir: Path, dtype: torch.dtype) -> torch.nn.Module:
    """The HF model in the export dtype: modelopt's exporters do not cast consistently (F6)."""
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype)
    return model.to(device()).eval()


def quantize(
    model: torch.nn.Module, config: dict, calib_windows: torch.Tensor, batch_size: int
) -> torch.nn.Module:
    """Insert modelopt quantizers and calibrate them on [N, S] token windows (in place)."""
    import modelopt.torch.quantization as mtq

    def forward_loop(m: torch.nn.Module) -> None:
        with torch.no_grad():
            for batch in batches(calib_windows, batch_size, "quantize: calibrate"):
                m(input_ids=batch.to(device()), use_cache=False)

    return mtq.quantize(model, config, forward_loop)
