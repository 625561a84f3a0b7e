"""Quantized side of scripts.bench_engine: the bench's BF16 checkpoint rewritten per format.

modelopt is not on the GPU machine and random weights have nothing worth calibrating for AWQ,
so each format's checkpoint is written from the BF16 one with the same tensors modelopt's
TensorRT-LLM export writes (pipeline.engine.quant.synthetic: round to nearest, unit AWQ scales).
FP8's static activation scales come from a max calibration on the HF model (modelopt's default
algorithm for FP8), so its greedy tokens say something about the format, not the scale guess.
"""

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from pipeline.engine.quant.kv_cache import SCALE_SUFFIX
from pipeline.engine.quant.primitives import FP8_MAX
from pipeline.engine.quant.synthetic import QUANTIZATION, export_like_modelopt

FORMATS = {  # --quant name -> TensorRT-LLM quant_algo (pipeline/quant/recipes.py)
    "int8_wo": "W8A16",
    "int4_wo": "W4A16_AWQ",  # blockwise weight-only: no prequant scale
    "int4_awq": "W4A16_AWQ",
    "fp8": "FP8",
    "fp8_kv": "FP8",  # and an FP8 KV cache (kv_cache_scaling_factor from K/V amax / 448)
}
LINEAR = re.compile(
    r"transformer\.layers\.\d+\.(attention\.(qkv|dense)|mlp\.(fc|gate|proj))\.weight"
)
QUANT_FORMAT_ESTIMATE_S = 60  # an 8B format: write the checkpoint, build, load, graphs, decode
CALIBRATED = {  # HF module -> the checkpoint linears that see the same input
    "self_attn.q_proj": ("attention.qkv",),
    "self_attn.o_proj": ("attention.dense",),
    "mlp.gate_proj": ("mlp.fc", "mlp.gate"),
    "mlp.down_proj": ("mlp.proj",),
}


@dataclass(frozen=True)
class QuantPlan:
    formats: tuple[str, ...] = ()  # FORMATS names, in run order
    models: tuple[str, ...] = ()  # bench_engine model names that run them
    is_decode_only: bool = False
    throughput_cap_s: float = 60  # the 8B BF16 offline run takes ~30 s

    def runs(self, model: str) -> bool:
        return bool(self.formats) and model in self.models

    def reserve_s(self) -> float:
        """Run time one model's formats need after its HF baselines."""
        per_format = QUANT_FORMAT_ESTIMATE_S + (0 if self.is_decode_only else self.throughput_cap_s)
        return len(self.formats) * per_format


def add_quant_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quant",
        default="",
        help=f"comma-separated formats to run after BF16 ({', '.join(FORMATS)}); default none",
    )
    parser.add_argument(
        "--quant-models",
        help="comma-separated model names that run --quant (default: the first, the 8B shape)",
    )
    parser.add_argument(
        "--quant-decode-only",
        action="store_true",
        help="quantized formats: batch-1 decode only, no offline throughput",
    )
    parser.add_argument(
        "--quant-throughput-cap-s",
        type=float,
        default=QuantPlan.throughput_cap_s,
        help="a quantized format's offline run stops here and reports no rate",
    )


def quant_plan(args: argparse.Namespace, model_names: list[str]) -> QuantPlan:
    """The --quant* options, checked against FORMATS and this run's models (ValueError)."""
    formats = tuple(f for f in args.quant.split(",") if f)
    models = tuple(args.quant_models.split(",")) if args.quant_models else tuple(model_names[:1])
    problems = [f"unknown --quant format {f!r}" for f in formats if f not in FORMATS]
    problems += [f"--quant-models {m!r} is not in this run" for m in models if m not in model_names]
    if problems:
        raise ValueError(
            f"{'; '.join(problems)} (formats: {', '.join(FORMATS)}; models: {model_names})"
        )
    return QuantPlan(formats, models, args.quant_decode_only, args.quant_throughput_cap_s)


def group_size_for(config: dict) -> int:
    """modelopt's default int4 block (128) where it divides every linear's input width, else the
    largest that does (SmolLM2's 576 and the tiny model's 64 take 64)."""
    widths = (config["hidden_size"], config["intermediate_size"])
    for group in (128, 64, 32):
        if all(width % group == 0 for width in widths):
            return group
    raise ValueError(f"no int4 group size in 128/64/32 divides the linear widths {widths}")


def quantization_block(fmt: str, group_size: int) -> dict:
    """config.json "quantization" as modelopt's TensorRT-LLM export writes it: lm_head excluded
    (the embedding is not a linear, so it stays in the model dtype too)."""
    block = {
        **QUANTIZATION[FORMATS[fmt]],
        "kv_cache_quant_algo": "FP8" if fmt.endswith("_kv") else None,
        "exclude_modules": ["lm_head"],
    }
    if "group_size" in block:
        block |= {"group_size": group_size, "pre_quant_scale": fmt == "int4_awq"}
    return block


@torch.inference_mode()
def activation_amax(model, prompts: list[list[int]]) -> dict[str, float]:
    """Max |input| of every checkpoint linear (by prefix) over one forward of the prompts, and
    max |K|, |V| of each layer's attention (its prefix + ".kv": k_proj and v_proj outputs, before
    RoPE, which keeps each rotated pair's norm)."""
    amax, hooks = {}, []

    def keep(prefixes: list[str], x: torch.Tensor) -> None:
        value = x.abs().amax().item()
        amax.update({p: max(amax.get(p, 0.0), value) for p in prefixes})

    for i, layer in enumerate(model.model.layers):
        for module_name, linears in CALIBRATED.items():
            prefixes = [f"transformer.layers.{i}.{p}" for p in linears]
            module = layer.get_submodule(module_name)
            hooks.append(module.register_forward_pre_hook(lambda m, a, p=prefixes: keep(p, a[0])))
        for proj in ("k_proj", "v_proj"):
            prefixes = [f"transformer.layers.{i}.attention.kv"]
            module = layer.get_submodule(f"self_attn.{proj}")
            hooks.append(module.register_forward_hook(lambda m, a, y, p=prefixes: keep(p, y)))
    try:
        model(torch.tensor(prompts, device=model.device))
    finally:
        for hook in hooks:
            hook.remove()
    return amax


def write_quantized_checkpoint(
    src_dir: Path, fmt: str, act_amax: dict[str, float], out_dir: Path, device: torch.device
) -> Path:
    """src_dir's checkpoint with every decoder linear replaced by fmt's export tensors (quantized
    on `device`: 2 CPU cores take ~100 s for the 8B); embeddings, norms and lm_head unchanged."""
    config = json.loads((src_dir / "config.json").read_text())
    group_size = group_size_for(config)
    tensors = {}
    with safe_open(src_dir / "rank0.safetensors", "pt") as f:
        for name in f.keys():
            tensor = f.get_tensor(name)
            if not LINEAR.fullmatch(name):
                tensors[name] = tensor
                continue
            prefix = name.removesuffix(".weight")
            smooth = torch.ones(tensor.shape[1]) if fmt == "int4_awq" else None
            exported = export_like_modelopt(
                FORMATS[fmt], prefix, tensor.to(device), smooth, act_amax[prefix], group_size
            )
            tensors |= {k: v.cpu() for k, v in exported.items()}
            if fmt.endswith("_kv") and name.endswith("attention.qkv.weight"):
                attention = prefix.removesuffix(".qkv")
                tensors[f"{attention}.{SCALE_SUFFIX}"] = torch.tensor(
                    [act_amax[f"{attention}.kv"] / FP8_MAX], dtype=torch.float32
                )
    out_dir.mkdir(parents=True)
    save_file(tensors, out_dir / "rank0.safetensors", metadata={"format": "pt"})
    config["quantization"] = quantization_block(fmt, group_size)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir
