"""What preflight knows about a build: limits, options, runtime features, checkpoint and GPU.

Before the checkpoint exists (check_available), dtype, quantization and parallelism are predicted
from the config; once it exists (build), they are read from its config.json, which wins.
"""

from dataclasses import dataclass
from pathlib import Path

from pipeline.checkpoint.trtllm_config import read_checkpoint_config
from pipeline.quant.recipes import KV_CACHE_FORMATS, RECIPES, for_backend
from pipeline.specs.build import BuildSpec
from pipeline.specs.deploy import TrtllmSpecOptions
from pipeline.specs.pipeline import PipelineSpec
from pipeline.trtllm.memory_settings import kv_cache_reuse

# quant.name / quant.kv_cache -> the quant_algo a backend=trtllm checkpoint will carry
QFORMAT_ALGOS = {
    "none": None,
    **{name: for_backend(recipe, "trtllm").quant_algo for name, recipe in RECIPES.items()},
}
KV_CACHE_ALGOS = {
    "none": None,
    **{name: kv.kv_cache_quant_algo for name, kv in KV_CACHE_FORMATS.items()},
}


@dataclass(frozen=True, slots=True)
class BuildFacts:
    build: BuildSpec
    enable_kv_cache_reuse: bool  # deploy.trtllm.*: runtime features the engine must support
    enable_chunked_context: bool
    dtype: str | None  # None = not known yet (a quantized export picks its own dtype)
    quant_algo: str | None
    kv_cache_quant_algo: str | None
    tp_size: int
    pp_size: int
    sm: int | None  # target GPU; None = unknown (precision rules are skipped)
    checkpoint: dict | None = None  # the checkpoint's config.json, once it exists
    checkpoint_dir: Path | None = None
    spec: TrtllmSpecOptions = TrtllmSpecOptions()  # deploy.trtllm.spec: what deploy will serve


def facts_from_spec(spec: PipelineSpec, sm: int | None) -> BuildFacts:
    """Facts before the checkpoint exists: predicted from model/quant/parallel config."""
    return BuildFacts(
        build=spec.build,
        enable_kv_cache_reuse=kv_cache_reuse(spec.deploy),
        enable_chunked_context=spec.deploy.trtllm.enable_chunked_context,
        dtype=spec.model.dtype if spec.quant.name == "none" else None,
        quant_algo=QFORMAT_ALGOS.get(spec.quant.name),
        kv_cache_quant_algo=KV_CACHE_ALGOS.get(spec.quant.kv_cache),
        tp_size=spec.parallel.tp_size,
        pp_size=spec.parallel.pp_size,
        sm=sm,
        spec=spec.deploy.trtllm.spec,
    )


def facts_from_checkpoint(spec: PipelineSpec, checkpoint_dir: Path, sm: int | None) -> BuildFacts:
    """Facts for the real build: the checkpoint's config.json decides dtype, quant and mapping."""
    config = read_checkpoint_config(checkpoint_dir, "build")
    quant = config.get("quantization") or {}
    mapping = config.get("mapping") or {}
    return BuildFacts(
        build=spec.build,
        enable_kv_cache_reuse=kv_cache_reuse(spec.deploy),
        enable_chunked_context=spec.deploy.trtllm.enable_chunked_context,
        dtype=config.get("dtype"),
        quant_algo=quant.get("quant_algo"),
        kv_cache_quant_algo=quant.get("kv_cache_quant_algo"),
        tp_size=int(mapping.get("tp_size", 1)),
        pp_size=int(mapping.get("pp_size", 1)),
        sm=sm,
        checkpoint=config,
        checkpoint_dir=Path(checkpoint_dir),
        spec=spec.deploy.trtllm.spec,
    )
