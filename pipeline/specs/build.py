from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TorchBuildOptions:
    """Options only backend=torch reads (owned by the torch engine)."""

    use_cuda_graph: bool = True
    compile: bool = False
    # false: plain PyTorch ops on CUDA too, none of the engine's Triton kernels (the study's
    # unfused mode); the CPU always runs them
    triton_kernels: bool = True
    # reuse the KV blocks of a prompt prefix an earlier request computed (the runtime option
    # enable_prefix_caching, deploy.torch.enable_prefix_caching, overrides it)
    enable_prefix_caching: bool = True


@dataclass(frozen=True, slots=True)
class TrtllmBuildOptions:
    """trtllm-build 1.2.x flags beyond the shared limits; only backend=trtllm reads them.

    Field names are the trtllm-build flag names; feature flags take "enable"/"disable" and plugin
    flags a dtype or "disable", exactly as on its command line. There is no `strongly_typed`: 1.2's
    build.py hard-codes BuildConfig(strongly_typed=True) and has had no such flag since 0.11.
    """

    gpt_attention_plugin: str = "auto"  # plugins: a dtype (auto = the checkpoint's) or disable
    # "disable" = flag omitted (trtllm-build's default: no plugin; NVFP4 checkpoints pick nvfp4)
    gemm_plugin: str = "disable"
    gemm_swiglu_plugin: str = "disable"  # "fp8" needs use_fused_mlp + an FP8 checkpoint + Hopper
    context_fmha: str = "enable"  # features: enable | disable
    # needed for deploy.trtllm.enable_kv_cache_reuse and chunked context
    use_paged_context_fmha: str = "enable"
    use_fused_mlp: str = "enable"
    remove_input_padding: str = "enable"  # required by in-flight batching
    multiple_profiles: str = "disable"
    reduce_fusion: str = "disable"  # only takes effect with tp > 1 on Llama/Gemma2
    user_buffer: str = "disable"  # needs reduce_fusion
    opt_num_tokens: int | None = None  # None = min(max_batch_size * max_beam_width, max_num_tokens)
    weight_streaming: bool = False  # lets the runtime keep part of the weights on the host
    gather_context_logits: bool = False
    # draft_tokens_external | lookahead_decoding | medusa | explicit_draft_tokens | eagle
    speculative_decoding_mode: str | None = None
    max_draft_len: int = 0
    lora_plugin: str = "disable"
    lora_dir: tuple[str, ...] = ()  # the first dir provides the LoRA config
    lora_target_modules: tuple[str, ...] = ()  # e.g. attn_q attn_k attn_v
    max_lora_rank: int = 64
    workers: int = 1  # parallel per-rank builds (capped by trtllm-build at the GPU count)
    log_level: str = "info"
    timing_cache: bool = True  # reuse TensorRT tactic timings across builds (same GPU + TensorRT)
    timing_cache_dir: str = "${workdir}/trtllm-timing-cache"  # resolved when the config composes
    # the image DOCKER=1 stages and `serve` run in (pipeline.trtllm.image.LOCAL_IMAGE: built from
    # tensorrtllm_backend's r26.04 recipe, since NGC's 25.12-trtllm-python-py3 holds 1.1.0; `make
    # trtllm-image-check` checks it) and the TensorRT-LLM version it holds: engines must be built
    # and served by exactly this one
    container_image: str = "llm-pipeline/tritonserver:25.12-trtllm-1.2.1"
    trtllm_version: str = "1.2.1"


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """Engine limits shared by both backends (same names as trtllm-build's flags)."""

    max_batch_size: int = 8
    max_input_len: int = 1024
    max_seq_len: int = 2048
    max_num_tokens: int = 8192
    max_beam_width: int = 1  # beam search up to this width (backend=torch: 1 to 64)
    tokens_per_block: int = 32
    kv_cache_type: str = "paged"
    # GB (10^9 bytes) of weights a GPU keeps resident; the rest stream from host memory each
    # step. null: everything resident. torch: the decoder layers past it stream from pinned
    # host memory, double-buffered (docs/design.md, "Weight offload"); trtllm: the engine is
    # built with --weight_streaming and deploy writes gpu_weights_percent (docs/guide/trtllm.md)
    gpu_weight_budget_gb: float | None = None
    torch: TorchBuildOptions = field(default_factory=TorchBuildOptions)
    trtllm: TrtllmBuildOptions = field(default_factory=TrtllmBuildOptions)
