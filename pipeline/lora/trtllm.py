"""LoRA with backend=trtllm: what the engine must have been built with, and the tensorrt_llm
model's LoRA cache parameters (tensorrtllm_backend
all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt: lora_cache_optimal_adapter_size,
lora_cache_max_adapter_size, lora_cache_gpu_memory_fraction, lora_cache_host_memory_bytes;
docs/trtllm_reference.md section 5.2). The build flags are build.trtllm.lora_plugin,
max_lora_rank and lora_target_modules (TensorRT-LLM's module names: TENSORRT_LLM_MODULES)."""

from pipeline.engine_json import EngineJson
from pipeline.lora.adapters import TARGET_MODULES, TENSORRT_LLM_MODULES
from pipeline.specs.lora import LoraSpec


def engine_problems(engine: EngineJson, spec: LoraSpec) -> list[str]:
    """Why this engine cannot serve lora.adapters (none when it has no adapters)."""
    if not spec.adapters:
        return []
    lora = engine.build.get("lora_config") or {}
    modules = [TENSORRT_LLM_MODULES[m] for m in spec.target_modules or TARGET_MODULES]
    fix = (
        f"rebuild with build.trtllm.lora_plugin=auto build.trtllm.max_lora_rank="
        f"{spec.max_rank} 'build.trtllm.lora_target_modules=[{','.join(modules)}]'"
    )
    if not engine.is_plugin_enabled("lora_plugin"):
        return [f"lora.adapters needs an engine built with the LoRA plugin; {fix}"]
    problems = []
    dtype = engine.pretrained.get("dtype")
    if dtype != "float16":
        # upstream's template declares lora_weights TYPE_FP16 and the runtime takes only weights
        # of the engine's dtype (docs/trtllm_reference.md, section 5.6)
        problems.append(
            f"lora.adapters needs a float16 engine (this one is {dtype}): the tensorrt_llm "
            f"model takes lora_weights as FP16 and TensorRT-LLM refuses weights of another "
            f"dtype than the engine's; convert with model.dtype=float16"
        )
    if int(lora.get("max_lora_rank", 0)) < spec.max_rank:
        problems.append(
            f"the engine's max_lora_rank={lora.get('max_lora_rank')} is below lora.max_rank="
            f"{spec.max_rank}; {fix}"
        )
    missing = sorted(set(modules) - set(lora.get("lora_target_modules") or ()))
    if missing:
        problems.append(f"the engine adapts no {missing} (lora.target_modules); {fix}")
    return problems


def cache_parameters(spec: LoraSpec) -> dict[str, str]:
    """The lora_cache_* parameters lora.cache_* sets (0 leaves the backend's default)."""
    values = {
        "lora_cache_optimal_adapter_size": spec.cache_optimal_adapter_size,
        "lora_cache_max_adapter_size": spec.cache_max_adapter_size,
        "lora_cache_gpu_memory_fraction": spec.cache_gpu_memory_fraction,
        "lora_cache_host_memory_bytes": spec.cache_host_memory_bytes,
    }
    return {key: str(value) for key, value in values.items() if value}
