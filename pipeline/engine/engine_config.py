"""Engine dir config.json (read by pipeline.engine_json) + runtime overrides -> one frozen
EngineConfig, checked once, here.

Components copy the fields they need in __init__ and never read config.json themselves.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.checkpoint.sharding import check_mapping
from pipeline.engine.layers.rotary import SUPPORTED_SCALINGS, scaling_type
from pipeline.engine.parallel.tensor_parallel import ALL_REDUCE_CHOICES
from pipeline.engine.scheduling.scheduler import POLICIES
from pipeline.engine.spec_config import SpecConfig, spec_config
from pipeline.engine_json import EngineJson
from pipeline.errors import ArtifactError, ConfigError
from pipeline.lora.options import LoraOptions

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The TensorRT-LLM checkpoint's pretrained_config, as the model code needs it."""

    architecture: str
    dtype: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    norm_epsilon: float
    rotary_base: float
    rotary_scaling: dict | None
    quantization: dict
    tp_size: int = 1
    pp_size: int = 1

    @classmethod
    def from_pretrained_config(cls, cfg: dict, where: str) -> "ModelConfig":
        problems = []
        if cfg.get("architecture") not in ARCHITECTURES:
            problems.append(
                f"architecture={cfg.get('architecture')!r} (supported: {', '.join(ARCHITECTURES)})"
            )
        if cfg.get("dtype") not in DTYPES:
            problems.append(f"dtype={cfg.get('dtype')!r} (supported: {', '.join(DTYPES)})")
        if cfg.get("position_embedding_type", "rope_gpt_neox") != "rope_gpt_neox":
            problems.append(
                f"position_embedding_type={cfg['position_embedding_type']!r} "
                f"(supported: rope_gpt_neox)"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            problems.append(f"hidden_act={cfg['hidden_act']!r} (supported: silu)")
        kind = scaling_type(cfg.get("rotary_scaling"))
        if kind is not None and kind not in SUPPORTED_SCALINGS:
            problems.append(
                f"rotary_scaling type {kind!r} (supported: none, {', '.join(SUPPORTED_SCALINGS)})"
            )
        if problems:
            raise ConfigError(
                f"{where}: the torch engine cannot run this checkpoint: {'; '.join(problems)}"
            )
        mapping = cfg.get("mapping") or {}
        tp_size, pp_size = int(mapping.get("tp_size", 1)), int(mapping.get("pp_size", 1))
        check_mapping(cfg, tp_size, pp_size, f"{where}: mapping")
        heads = cfg["num_attention_heads"]
        return cls(
            architecture=cfg["architecture"],
            dtype=cfg["dtype"],
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_size") or cfg["hidden_size"] // heads,
            intermediate_size=cfg["intermediate_size"],
            norm_epsilon=cfg.get("norm_epsilon", 1e-5),
            rotary_base=cfg.get("rotary_base", 10000.0),
            rotary_scaling=cfg.get("rotary_scaling"),
            quantization=cfg.get("quantization") or {"quant_algo": None},
            tp_size=tp_size,
            pp_size=pp_size,
        )


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """LLMEngine.from_engine_dir(**runtime): each limit may only lower the engine's build value."""

    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    scheduler_policy: str = "guaranteed_no_evict"
    num_kv_blocks: int | None = None  # None: a fraction of free GPU memory / CPU default
    kv_cache_free_mem_fraction: float = 0.9
    enable_chunked_prefill: bool = True
    use_cuda_graph: bool | None = None  # None: the build's torch.use_cuda_graph
    compile: bool | None = None  # None: the build's torch.compile
    triton_kernels: bool | None = None  # None: the build's torch.triton_kernels
    dtype: str | None = None  # None: the checkpoint's dtype
    # launch step N+1 before reading step N's tokens; None: on CUDA (the CPU computes in the
    # host's own time, so there is nothing to overlap)
    overlap_scheduling: bool | None = None
    # steps per launch: after a step, the sequences that sampled decode num_scheduler_steps - 1
    # more before the host schedules again (their tokens reach it together; stop rules act on
    # them then, dropping what follows a stop). Amortizes the host's per-step work. None: auto
    # (ModelRunner: from the GPU time of a decode step, and LaunchPacer adds steps while the
    # host lags the device; 1 on the CPU)
    num_scheduler_steps: int | None = None
    # tensor parallel all-reduce: nccl (captured in the CUDA graphs), auto (PyTorch's
    # symmetric-memory one-shot for messages up to 2 MiB where it passes a check at start, NCCL
    # above), or symm_mem (fail if it does not run). auto by default: on 2x H200 over NVLink the
    # one-shot replayed from a CUDA graph took ~7 us a call at 16-64 KiB against NCCL's ~10 us,
    # and an 8B-shape TP=2 batch-1 decode ran 3% faster (docs/perf/results/multi-gpu)
    all_reduce: str = "auto"
    # a collective between ranks that takes longer fails the engine instead of waiting forever
    collective_timeout_s: float = 600.0
    # "module:function" (engine_dir, rank, device) -> tensors of that rank, instead of
    # rank<N>.safetensors (synthetic weights of a benchmark)
    weights_loader: str | None = None
    # GB of a rank's decoder-layer linears kept on the GPU; the layers past it stream from
    # pinned host memory every step (execution/layer_streamer.py). None: the build's
    # gpu_weight_budget_gb (null there: everything resident)
    gpu_weight_budget_gb: float | None = None
    # reuse the KV blocks of a cached prompt prefix (scheduling/prefix_cache.py); None: the
    # build's torch.enable_prefix_caching
    enable_prefix_caching: bool | None = None
    # GiB of (pinned) host memory each rank keeps evicted prefix blocks in; 0: no host tier
    host_kv_cache_gb: float = 0.0
    # speculative decoding (spec_config.py): a SpecConfig or its fields as a dict; None: off
    speculation: SpecConfig | dict | None = None
    # LoRA adapters (pipeline/engine/lora): a dir of PEFT adapter dirs, one per adapter name
    # (None: no adapters); their largest rank, the device's adapter slots, the HF modules adapted
    lora_dir: str | None = None
    lora_max_rank: int = 64
    lora_max_loras: int = 8
    lora_target_modules: tuple[str, ...] | None = None  # None: all seven linears


@dataclass(frozen=True, slots=True)
class EngineConfig:
    engine_dir: Path
    model: ModelConfig
    device: torch.device
    dtype: torch.dtype  # activations, unquantized weights and the KV cache
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    block_size: int
    scheduler_policy: str
    num_kv_blocks: int | None
    kv_cache_free_mem_fraction: float
    enable_chunked_prefill: bool
    use_cuda_graph: bool
    compile: bool
    overlap_scheduling: bool
    num_scheduler_steps: int | None  # None: the model runner decides
    triton_kernels: bool = True
    all_reduce: str = "auto"
    collective_timeout_s: float = 600.0
    weights_loader: str | None = None
    gpu_weight_budget_gb: float | None = None  # None: every layer resident
    enable_prefix_caching: bool = False
    host_kv_cache_gb: float = 0.0
    speculation: SpecConfig = SpecConfig()
    lora: LoraOptions | None = None
    max_beam_width: int = 1  # the build's: beam search up to this width

    @property
    def max_blocks_per_seq(self) -> int:
        """KV blocks a sequence at max_seq_len holds."""
        return -(-self.max_seq_len // self.block_size)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"engine: device={device!r} but CUDA is not available here; use device='cpu' or 'auto'"
        )
    if resolved.type not in ("cpu", "cuda"):
        raise ConfigError(f"engine: device={device!r} is not supported; use auto, cpu or cuda")
    return resolved


def read_engine_json(engine_dir: Path) -> EngineJson:
    engine = EngineJson.read(engine_dir, "build it with `python -m pipeline build backend=torch`")
    if engine.backend != "torch":
        raise ArtifactError(
            f"{engine.path}: backend={engine.backend or None!r}, not a torch engine; build with "
            f"backend=torch"
        )
    return engine


def _check_runtime(opts: RuntimeOptions, build: dict, where: str) -> None:
    problems = []
    for key in ("max_batch_size", "max_num_tokens"):
        value = getattr(opts, key)
        if value is not None and not 1 <= value <= build[key]:
            problems.append(
                f"{key}={value} must be in [1, {build[key]}] (the build limit; "
                f"rebuild with build.{key}={value} to go higher)"
            )
    if opts.scheduler_policy not in POLICIES:
        problems.append(f"scheduler_policy={opts.scheduler_policy!r} (use {' or '.join(POLICIES)})")
    if opts.num_kv_blocks is not None and opts.num_kv_blocks < 1:
        problems.append(f"num_kv_blocks={opts.num_kv_blocks} must be >= 1")
    if not 0.0 < opts.kv_cache_free_mem_fraction <= 1.0:
        problems.append(
            f"kv_cache_free_mem_fraction={opts.kv_cache_free_mem_fraction} must be in (0, 1]"
        )
    if opts.num_scheduler_steps is not None and opts.num_scheduler_steps < 1:
        problems.append(f"num_scheduler_steps={opts.num_scheduler_steps} must be >= 1")
    if opts.all_reduce not in ALL_REDUCE_CHOICES:
        problems.append(
            f"all_reduce={opts.all_reduce!r} (use one of {', '.join(ALL_REDUCE_CHOICES)})"
        )
    if opts.collective_timeout_s <= 0:
        problems.append(f"collective_timeout_s={opts.collective_timeout_s} must be > 0")
    if opts.weights_loader is not None and ":" not in opts.weights_loader:
        problems.append(f"weights_loader={opts.weights_loader!r} must be 'module:function'")
    if opts.host_kv_cache_gb < 0:
        problems.append(f"host_kv_cache_gb={opts.host_kv_cache_gb} must be >= 0 (0: off)")
    if opts.dtype is not None and opts.dtype not in DTYPES:
        problems.append(f"dtype={opts.dtype!r} (use one of {', '.join(DTYPES)})")
    if opts.gpu_weight_budget_gb is not None and opts.gpu_weight_budget_gb <= 0:
        problems.append(
            f"gpu_weight_budget_gb={opts.gpu_weight_budget_gb} must be > 0 (None: all resident)"
        )
    if problems:
        raise ConfigError(f"{where}: bad runtime options: {'; '.join(problems)}")


def load_engine_config(engine_dir: Path, device: str, runtime: dict) -> EngineConfig:
    where = f"engine {engine_dir}"
    known = [f.name for f in dataclasses.fields(RuntimeOptions)]
    unknown = sorted(set(runtime) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown runtime options {unknown}; known: {', '.join(known)}")
    opts = RuntimeOptions(**runtime)
    engine = read_engine_json(engine_dir)
    try:
        return _engine_config(engine, opts, Path(engine_dir), device, where)
    except KeyError as exc:
        raise ArtifactError(
            f"{where}: config.json lacks {exc}; rebuild the engine with the current pipeline"
        ) from exc


def _engine_config(
    engine: EngineJson, opts: RuntimeOptions, engine_dir: Path, device: str, where: str
) -> EngineConfig:
    build = engine.build
    _check_runtime(opts, build, where)
    model = ModelConfig.from_pretrained_config(engine.pretrained, where)
    torch_opts = build["torch"]
    resolved = resolve_device(device)
    use_compile = torch_opts["compile"] if opts.compile is None else opts.compile
    weight_budget = opts.gpu_weight_budget_gb
    if weight_budget is None:
        weight_budget = build.get("gpu_weight_budget_gb")  # engines built before it: None
    if weight_budget is not None and use_compile:
        raise ConfigError(
            f"{where}: gpu_weight_budget_gb={weight_budget:g} streams layers with hooks that "
            f"torch.compile does not trace; set build.torch.compile=false (or compile=False) "
            f"or gpu_weight_budget_gb=null"
        )
    prefix_caching = (
        torch_opts.get("enable_prefix_caching", True)  # engines built before the option: on
        if opts.enable_prefix_caching is None
        else opts.enable_prefix_caching
    )
    if opts.host_kv_cache_gb > 0 and not prefix_caching:
        raise ConfigError(
            f"{where}: host_kv_cache_gb={opts.host_kv_cache_gb} keeps evicted prefix-cache "
            f"blocks, but prefix caching is off; turn on enable_prefix_caching or set "
            f"host_kv_cache_gb=0"
        )
    return EngineConfig(
        engine_dir=engine_dir,
        model=model,
        device=resolved,
        dtype=DTYPES[opts.dtype or model.dtype],
        max_batch_size=opts.max_batch_size or build["max_batch_size"],
        max_input_len=build["max_input_len"],
        max_seq_len=build["max_seq_len"],
        max_num_tokens=opts.max_num_tokens or build["max_num_tokens"],
        block_size=build["plugin_config"]["tokens_per_block"],
        scheduler_policy=opts.scheduler_policy,
        num_kv_blocks=opts.num_kv_blocks,
        kv_cache_free_mem_fraction=opts.kv_cache_free_mem_fraction,
        enable_chunked_prefill=opts.enable_chunked_prefill,
        use_cuda_graph=(
            torch_opts["use_cuda_graph"] if opts.use_cuda_graph is None else opts.use_cuda_graph
        ),
        compile=use_compile,
        triton_kernels=(
            torch_opts.get("triton_kernels", True)  # engines built before the option: on
            if opts.triton_kernels is None
            else opts.triton_kernels
        ),
        overlap_scheduling=(
            resolved.type == "cuda" if opts.overlap_scheduling is None else opts.overlap_scheduling
        ),
        num_scheduler_steps=opts.num_scheduler_steps,
        all_reduce=opts.all_reduce,
        collective_timeout_s=opts.collective_timeout_s,
        weights_loader=opts.weights_loader,
        gpu_weight_budget_gb=weight_budget,
        enable_prefix_caching=prefix_caching,
        host_kv_cache_gb=opts.host_kv_cache_gb,
        max_beam_width=build.get("max_beam_width", 1),
        speculation=spec_config(opts.speculation, where),
        lora=None
        if opts.lora_dir is None
        else LoraOptions.checked(
            opts.lora_dir,
            opts.lora_max_rank,
            opts.lora_max_loras,
            opts.lora_target_modules,
            where,
        ),
    )
