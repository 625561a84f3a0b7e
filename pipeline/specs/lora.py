from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LoraSpec:
    # name -> source: a local PEFT adapter dir (adapter_config.json + adapter_model.safetensors),
    # or a hub id pinned to a revision, "org/name@<commit sha>"; deployed into the repository
    adapters: dict[str, str] = field(default_factory=dict)
    max_rank: int = 64  # the largest adapter rank served (TensorRT-LLM's --max_lora_rank)
    max_loras: int = 8  # adapters held on the GPU at once (an LRU cache over host copies)
    # HF module names adapted (q_proj k_proj v_proj o_proj gate_proj up_proj down_proj); empty:
    # all seven. An adapter of another module is refused at deploy
    target_modules: tuple[str, ...] = ()
    # trtllm: the tensorrt_llm model's LoRA cache (config.pbtxt parameters; 0: the backend's
    # default). GPU memory fraction for adapters, host bytes, and the adapter size in layer
    # modules x rank the cache's pages are cut for
    cache_gpu_memory_fraction: float = 0.0
    cache_host_memory_bytes: int = 0
    cache_optimal_adapter_size: int = 0
    cache_max_adapter_size: int = 0
