"""Logits from the torch engine running the exported checkpoint: the gate measures what deploys.

The engine's own Llama model and quantized linears load config.json + rank0.safetensors exactly
as `build backend=torch` ships them; each batch of windows runs as one varlen prefill (one KV
block per window), the path a served prompt takes.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from pipeline.errors import ConfigError
from pipeline.quant.perplexity import LogitsFn
from pipeline.quant.recipes import Recipe


def check_engine_gate(recipe: Recipe, kv_cache: str, tp_size: int, pp_size: int) -> None:
    """quant.gate_runtime=engine needs a checkpoint the torch engine runs; refuse before work."""
    from pipeline.engine.layers.linear import check_quantization
    from pipeline.engine.quant.kv_cache import check_kv_cache
    from pipeline.quant.recipes import kv_cache_quant_algo

    problems = []
    if recipe.build_quantizes_bits is not None:
        problems.append(
            f"{recipe.name} for backend=trtllm exports float weights that trtllm-build "
            f"quantizes, a checkpoint the torch engine does not run"
        )
    try:
        check_quantization({"quant_algo": recipe.quant_algo})
    except ConfigError:
        problems.append(f"the torch engine has no {recipe.quant_algo} kernels ({recipe.name})")
    try:
        check_kv_cache({"kv_cache_quant_algo": kv_cache_quant_algo(kv_cache)})
    except ConfigError:
        problems.append(f"it has no {kv_cache} KV cache (quant.kv_cache={kv_cache})")
    if tp_size * pp_size != 1:
        problems.append(f"it runs tp_size=1, pp_size=1 only (got {tp_size}, {pp_size})")
    if problems:
        raise ConfigError(
            f"quantize: quant.gate_runtime=engine: {'; '.join(problems)}; set "
            f"quant.gate_runtime=fake_quant"
        )


def engine_logits_fn(ckpt_dir: Path, device: torch.device) -> LogitsFn:
    from pipeline.engine.engine_config import DTYPES, ModelConfig
    from pipeline.engine.execution.scoring import prompt_logits
    from pipeline.engine.models import MODELS
    from pipeline.engine.quant.kv_cache import kv_cache_dtype

    pretrained = json.loads((ckpt_dir / "config.json").read_text())
    config = ModelConfig.from_pretrained_config(pretrained, f"quantize ({ckpt_dir})")
    dtype = DTYPES[config.dtype]
    model = MODELS[config.architecture](
        config,
        load_file(ckpt_dir / "rank0.safetensors"),
        dtype,
        device,
        pretrained["max_position_embeddings"],
    )

    kv_dtype = kv_cache_dtype(config.quantization, dtype)

    def logits(ids: torch.Tensor) -> torch.Tensor:
        # [B, S] -> [B, S, V]
        return prompt_logits(
            model, ids.to(device), config.num_layers, config.num_kv_heads, config.head_dim, kv_dtype
        )

    return logits
