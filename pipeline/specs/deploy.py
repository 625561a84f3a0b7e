from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SpecDecodeOptions:
    """Speculative decoding in the torch engine (docs/guide/speculative.md; the engine checks
    them: pipeline/engine/spec_config.py)."""

    # none | prompt_lookup (drafts copied from the request's own tokens) | draft_model
    method: str = "none"
    num_draft_tokens: int = 4  # k: drafts a request verifies per step at most (1-16)
    # shorten k per request while its drafts are rejected (a draft is kept while its estimated
    # acceptance is at least draft_token_cost, the cost of one more verified token in decode
    # steps); at none, one draft every probe_interval steps measures again
    adaptive: bool = True
    draft_token_cost: float = 0.1
    probe_interval: int = 16
    # no drafts while the engine holds more requests than this, running or waiting to be
    # admitted (0: no limit): large batches are compute-bound and gain nothing
    max_batch_size: int = 32
    max_ngram: int = 3  # prompt_lookup: longest and shortest n-gram looked up
    min_ngram: int = 1
    draft_engine_dir: str = ""  # draft_model: a torch engine dir (same tokenizer), absolute
    draft_num_kv_blocks: int = 0  # draft_model: its KV blocks; 0 = what memory allows


@dataclass(frozen=True, slots=True)
class TorchDeployOptions:
    """Runtime knobs of the torch engine hosted by the `tensorrt_llm` python-backend model; only
    backend=torch reads them."""

    # the engine's torch threads (torch.set_num_threads), in its process or the model's; 0 =
    # torch's default
    num_threads: int = 0
    # 0 = size the paged KV cache: from free GPU memory on CUDA; on the CPU from the build limits,
    # capped by the host's available memory
    num_kv_blocks: int = 0
    # prompts are cut into chunks that share engine steps with decodes
    enable_chunked_prefill: bool = True
    # a stream's tokens that queued while its responses were being sent go out as one response
    coalesce_stream: bool = True
    # responses a second the model sends at most (coalescing on; 0 = no limit): the rest wait
    # and merge
    max_response_rate: float = 2000.0
    # threads that send responses (each send is a round trip to the server); a stream keeps one
    response_lanes: int = 4
    # tensorrt_llm tokenizes text_input itself, and the ensemble sends it there: one python-stub
    # hop (preprocessing) less on each request's way in
    tokenize: bool = True
    # tensorrt_llm returns text_output itself (detokenized in its responder thread), and the
    # ensemble takes it from there: no postprocessing execution per streamed response
    detokenize: bool = True
    # the engine in a child process: responses sent by the model do not hold up engine steps
    engine_process: bool = True
    # instances of the model (stub processes, a GIL each) sharing the engine process; 0 = auto:
    # 4 on a GPU, else 1
    instances: int = 0
    # engine steps a launch (decodes after its first; the engine's num_scheduler_steps); 0 = auto:
    # from the GPU step time (more while the host lags), 1 on CPU
    num_scheduler_steps: int = 0
    # a failed engine is started again at most this many times within restart_window_s; one
    # more failure and it stays down (not ready, requests refused with the cause) until the
    # server is restarted
    max_engine_restarts: int = 3
    restart_window_s: float = 600.0
    # reuse cached prompt-prefix KV blocks across requests; null = the engine's
    # build.torch.enable_prefix_caching (docs/design.md, prefix caching)
    enable_prefix_caching: bool | None = None
    # GiB of pinned host memory (each rank) holding prefix blocks evicted from the GPU; 0 = off
    host_kv_cache_gb: float = 0.0
    spec: SpecDecodeOptions = field(default_factory=SpecDecodeOptions)


@dataclass(frozen=True, slots=True)
class TrtllmSpecOptions:
    """Draft-target speculative decoding served by tensorrt_llm_bls (the torch engine's keys:
    SpecDecodeOptions). The target engine is built with build.trtllm.speculative_decoding_mode=
    draft_tokens_external and max_draft_len >= num_draft_tokens; the draft engine by its own
    `python -m pipeline build backend=trtllm` (docs/guide/speculative.md)."""

    method: str = "none"  # none | draft_model
    num_draft_tokens: int = 4  # drafts a request's BLS asks of the draft model a round, default
    draft_engine_dir: str = ""  # draft_model: a trtllm engine dir (same tokenizer), absolute


@dataclass(frozen=True, slots=True)
class TrtllmDeployOptions:
    """tensorrtllm-backend parameters (names as in its config.pbtxt template); only backend=trtllm
    reads them."""

    batching_strategy: str = "inflight_fused_batching"
    kv_cache_free_gpu_mem_fraction: float = 0.9
    max_tokens_in_paged_kv_cache: int = 0  # 0 = not set (the fraction decides)
    # KV block reuse across requests; null: deploy.enable_prefix_caching decides
    enable_kv_cache_reuse: bool | None = None
    enable_chunked_context: bool = False
    # guided decoding (structured output): "xgrammar" writes upstream's xgrammar tokenizer info
    # into the tensorrt_llm model and names it there; "" leaves it off
    guided_decoding_backend: str = ""
    shm_size: str = "2g"  # docker --shm-size for the TensorRT-LLM image (>= 64 MB a python model)
    spec: TrtllmSpecOptions = field(default_factory=TrtllmSpecOptions)


@dataclass(frozen=True, slots=True)
class DeploySpec:
    """Model repository (deploy) and server (serve) settings; repository keys follow the
    tensorrtllm_backend fill_template names (`deploy.preprocessing_instance_count=4`)."""

    # the generated repository (a copy of the deploy artifact, swapped in atomically)
    repo_dir: str = "model_repo"
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    startup_timeout_s: float = 300.0  # readiness wait before serve/demo give up (model load too)
    # extra tritonserver flags for the local server, e.g. ["--pinned-memory-pool-byte-size=0"]
    server_args: tuple[str, ...] = ()
    # python3 whose env the python-backend stubs use ("" = this one); it needs numpy<2
    stub_python: str = ""
    # 0 = the engine's build_config.max_batch_size (larger is refused)
    triton_max_batch_size: int = 0
    decoupled_mode: bool = True  # needed for streaming and several responses a request
    max_queue_delay_microseconds: int = 0
    max_queue_size: int = 0  # 0 = unbounded; a full queue rejects at once
    preferred_batch_sizes: tuple[int, ...] = ()  # () = (triton_max_batch_size,)
    preprocessing_instance_count: int = 1
    postprocessing_instance_count: int = 1
    bls_instance_count: int = 1  # the BLS serves requests concurrently from one instance
    accumulate_tokens: bool = True  # BLS streaming: detokenize all tokens so far, send the delta
    exclude_input_in_output: bool = True
    add_special_tokens: bool = True
    skip_special_tokens: bool = True
    batch_scheduler_policy: str = "guaranteed_no_evict"  # or max_utilization
    # reuse the KV blocks of a prompt prefix computed before (trtllm: enable_kv_cache_reuse,
    # which needs build.trtllm.use_paged_context_fmha=enable)
    enable_prefix_caching: bool = False
    # GB (10^9 bytes) of host memory for KV blocks evicted from the GPU, reusable from there;
    # 0 = none (trtllm: kv_cache_host_memory_bytes; needs prefix caching)
    host_kv_cache_gb: float = 0.0
    torch: TorchDeployOptions = field(default_factory=TorchDeployOptions)
    trtllm: TrtllmDeployOptions = field(default_factory=TrtllmDeployOptions)
