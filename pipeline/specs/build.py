from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TorchBuildOptions:
    """Options only the torch backend reads (owned by the torch engine)."""

    use_cuda_graph: bool = True
    compile: bool = False


@dataclass(frozen=True, slots=True)
class TrtllmBuildOptions:
    """trtllm-build flags beyond the shared limits (owned by the TensorRT-LLM backend)."""

    gpt_attention_plugin: str = "auto"
    gemm_plugin: str = "disable"


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """Engine limits shared by both backends (same names as trtllm-build's flags)."""

    max_batch_size: int = 8
    max_input_len: int = 1024
    max_seq_len: int = 2048
    max_num_tokens: int = 8192
    max_beam_width: int = 1
    tokens_per_block: int = 32
    kv_cache_type: str = "paged"
    torch: TorchBuildOptions = field(default_factory=TorchBuildOptions)
    trtllm: TrtllmBuildOptions = field(default_factory=TrtllmBuildOptions)
