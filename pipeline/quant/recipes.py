"""The one table: recipe -> modelopt config -> TensorRT-LLM quant_algo, plus target-GPU rules.

quant_algo values are what modelopt 0.47's export_tensorrt_llm_checkpoint writes for that config
(checked on SmolLM2); TensorRT-LLM reads them as QuantAlgo names. SM rules follow TensorRT-LLM's
support matrix: FP8 activations need SM >= 89, FP4 needs SM >= 100, and builder.py refuses
int8/int4 weight-only modes (which per-group AWQ is, W4A8 included), SmoothQuant and INT8 KV on
SM 100-119 (docs/trtllm_reference.md, sections 2.3, 3.2 and 3.3).

The weight-only recipes export one format per backend (for_backend):

| recipe  | backend=torch                                | backend=trtllm                          |
|---------|----------------------------------------------|-----------------------------------------|
| int8_wo | W8A16: int8 weights + per-channel scales     | W8A16: float weights; trtllm-build      |
|         | (modelopt INT8_WEIGHT_ONLY_CFG)              | quantizes them per channel to int8      |
| int4_wo | W4A16_AWQ: group-wise int4 (quant.block_size)| W4A16: float weights; trtllm-build      |
|         | without pre-quant scale (INT4_BLOCKWISE_...) | quantizes them per channel to int4      |

TensorRT-LLM's W8A16 / W4A16 layers want `per_channel_scale` and a weight in its mixed-GEMM
layout, which its loader makes only from weights that are not int8 yet (reference 3.4); the torch
engine reads the already-quantized format. The trtllm variant calibrates the same per-channel
int8 / int4 fake quant, so the accuracy gate measures what the build will compute.
"""

import logging
from dataclasses import dataclass, replace

from pipeline.errors import ConfigError, StageError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    modelopt_config: str  # attribute of modelopt.torch.quantization
    quant_algo: str
    min_sm: int  # oldest GPU generation that runs it
    runs_on_sm100_119: bool
    uses_block_size: bool  # int4 group size, set from quant.block_size
    fixed_block_size: int | None = None  # format-defined block (NVFP4: 16 values per fp8 scale)
    uses_smoothquant_alpha: bool = False
    # weight-only on TensorRT-LLM: (its quant_algo for float weights, bits it quantizes them to)
    trtllm_weight_only: tuple[str, int] | None = None
    # set by for_backend: the exported linears stay float and trtllm-build quantizes them to
    # this many bits per output channel (the fake quant that calibrates uses the same)
    build_quantizes_bits: int | None = None


RECIPES = {
    r.name: r
    for r in (
        Recipe("fp8", "FP8_DEFAULT_CFG", "FP8", 89, True, False),
        Recipe(
            "int8_sq",
            "INT8_SMOOTHQUANT_CFG",
            "W8A8_SQ_PER_CHANNEL",
            80,
            False,
            False,
            uses_smoothquant_alpha=True,
        ),
        Recipe("int4_awq", "INT4_AWQ_CFG", "W4A16_AWQ", 80, False, True),
        Recipe("w4a8_awq", "W4A8_AWQ_BETA_CFG", "W4A8_AWQ", 89, False, True),
        Recipe(
            "int8_wo",
            "INT8_WEIGHT_ONLY_CFG",
            "W8A16",
            80,
            False,
            False,
            trtllm_weight_only=("W8A16", 8),
        ),
        # modelopt labels blockwise int4 weight-only W4A16_AWQ (group-wise int4, no pre-quant scale)
        Recipe(
            "int4_wo",
            "INT4_BLOCKWISE_WEIGHT_ONLY_CFG",
            "W4A16_AWQ",
            80,
            False,
            True,
            trtllm_weight_only=("W4A16", 4),
        ),
        Recipe("nvfp4", "NVFP4_DEFAULT_CFG", "NVFP4", 100, True, False, fixed_block_size=16),
    )
}


@dataclass(frozen=True, slots=True)
class KvCacheFormat:
    name: str
    num_bits: int | tuple[int, int]  # modelopt num_bits of the k/v bmm quantizers
    kv_cache_quant_algo: str
    min_sm: int
    runs_on_sm100_119: bool


KV_CACHE_FORMATS = {
    k.name: k
    for k in (
        KvCacheFormat("fp8", (4, 3), "FP8", 89, True),
        KvCacheFormat("int8", 8, "INT8", 80, False),
    )
}
ALL_RECIPES = ("none", *RECIPES)
EXPORT_DTYPES = ("float16", "bfloat16")


def for_backend(recipe: Recipe, backend: str) -> Recipe:
    """The recipe as `backend` needs its checkpoint (only weight-only recipes differ)."""
    if backend != "trtllm" or recipe.trtllm_weight_only is None:
        return recipe
    quant_algo, bits = recipe.trtllm_weight_only
    return replace(
        recipe,
        modelopt_config="INT8_WEIGHT_ONLY_CFG",  # per-channel weight quantizers; bits set by ptq
        quant_algo=quant_algo,
        uses_block_size=False,
        build_quantizes_bits=bits,
    )


def recipe_for(quant, backend: str = "torch") -> Recipe:
    """The recipe for a QuantSpec and backend, after checking every recipe-specific key.

    All problems are reported at once. quant.block_size is checked against the recipe's own
    (torch) format, so int4_wo's option file works for both backends; TensorRT-LLM's per-channel
    W4A16 has no groups and leaves it unused.
    """
    if quant.name not in RECIPES:
        raise ConfigError(
            f"quantize: quant.name={quant.name!r} is not a recipe; use one of "
            f"{', '.join(ALL_RECIPES)} (conf/quant/<recipe>.yaml)"
        )
    recipe = RECIPES[quant.name]
    problems = []
    if quant.kv_cache != "none" and quant.kv_cache not in KV_CACHE_FORMATS:
        problems.append(
            f"quant.kv_cache={quant.kv_cache!r} is not one of none, {', '.join(KV_CACHE_FORMATS)}"
        )
    if recipe.uses_block_size and (quant.block_size is None or quant.block_size < 1):
        problems.append(f"{recipe.name} needs quant.block_size >= 1 (got {quant.block_size})")
    if not recipe.uses_block_size and quant.block_size is not None:
        problems.append(
            f"quant.block_size={quant.block_size} does not apply to {recipe.name}; "
            f"remove it (only int4_awq, w4a8_awq, int4_wo use it)"
        )
    alpha = quant.smoothquant_alpha
    if recipe.uses_smoothquant_alpha and (alpha is None or not 0.0 <= alpha <= 1.0):
        problems.append(f"int8_sq needs quant.smoothquant_alpha in [0, 1] (got {alpha})")
    if not recipe.uses_smoothquant_alpha and alpha is not None:
        problems.append(f"quant.smoothquant_alpha={alpha} applies to int8_sq only; remove it")
    if quant.export_dtype not in EXPORT_DTYPES:
        problems.append(
            f"quant.export_dtype={quant.export_dtype!r} is not one of "
            f"{', '.join(EXPORT_DTYPES)} (quantized checkpoints keep their "
            f"unquantized tensors in 16 bits)"
        )
    if problems:
        raise ConfigError("quantize: " + "; ".join(problems))
    resolved = for_backend(recipe, backend)
    if recipe.uses_block_size and not resolved.uses_block_size:
        log.info(
            "quantize: %s on backend=%s exports float weights that trtllm-build quantizes per "
            "channel (%s); quant.block_size=%s is not used",
            recipe.name,
            backend,
            resolved.quant_algo,
            quant.block_size,
        )
    return resolved


def kv_cache_quant_algo(kv_cache: str) -> str | None:
    """The checkpoint's kv_cache_quant_algo for a checked quant.kv_cache ("none": None)."""
    return KV_CACHE_FORMATS[kv_cache].kv_cache_quant_algo if kv_cache != "none" else None


def check_export_labels(recipe: Recipe, kv_cache: str, quantization: dict) -> None:
    """The exported quantization block must say what this table promises (modelopt upgrades)."""
    kv_algo = kv_cache_quant_algo(kv_cache)
    got = (quantization.get("quant_algo"), quantization.get("kv_cache_quant_algo"))
    if got != (recipe.quant_algo, kv_algo):
        raise StageError(
            f"quantize: modelopt exported quant_algo/kv_cache_quant_algo {got} for "
            f"{recipe.name} + kv_cache {kv_cache}, expected "
            f"{(recipe.quant_algo, kv_algo)}; update pipeline/quant/recipes.py "
            f"for this modelopt version"
        )


def check_target(recipe: Recipe, kv_cache: str, sm: int, hardware: str) -> None:
    """Refuse formats the target GPU cannot run (TensorRT-LLM backend), before any work."""
    formats = [
        (f"quant={recipe.name} ({recipe.quant_algo})", recipe.min_sm, recipe.runs_on_sm100_119)
    ]
    if kv_cache in KV_CACHE_FORMATS:
        kv = KV_CACHE_FORMATS[kv_cache]
        formats.append((f"quant.kv_cache={kv.name}", kv.min_sm, kv.runs_on_sm100_119))
    problems = []
    for what, min_sm, runs_on_blackwell in formats:
        if sm < min_sm:
            problems.append(f"{what} needs SM >= {min_sm}")
        elif 100 <= sm <= 119 and not runs_on_blackwell:
            problems.append(f"{what} is not supported by TensorRT-LLM on SM 100-119")
    if problems:
        usable = [
            r.name
            for r in RECIPES.values()
            if r.min_sm <= sm and (r.runs_on_sm100_119 or not 100 <= sm <= 119)
        ]
        raise ConfigError(
            f"quantize: hardware={hardware} (SM {sm}): {'; '.join(problems)}; "
            f"recipes this GPU runs: {', '.join(usable) or 'none'} (set quant=..., "
            f"quant.kv_cache=..., or hardware=<target GPU>)"
        )
