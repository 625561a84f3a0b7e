from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class StudyAccuracy:
    """What each cell scores, at its own batch size, on held-out text of the quantize gate's
    evaluation corpus (quant.calib_dataset; the text after quant.calib_size windows)."""

    num_cloze_items: int = 64  # multiple-choice cloze items (the next word among num_choices)
    num_choices: int = 4
    cloze_context_tokens: int = 64  # held-out text before the blank
    num_ppl_windows: int = 8  # perplexity windows
    ppl_window_tokens: int = 256
    num_greedy_prompts: int = 8  # greedy continuations: every requested token must come back
    greedy_prompt_tokens: int = 32
    greedy_max_tokens: int = 32
    # a cell's accuracy differs from its batch-1 cell beyond noise when: its paired cloze answers
    # change with a two-sided exact McNemar p below cloze_alpha, its perplexity moves by more than
    # ppl_rel_tolerance relative, or a greedy request comes back with fewer tokens than asked
    cloze_alpha: float = 0.01
    ppl_rel_tolerance: float = 0.01


@dataclass(frozen=True, slots=True)
class StudyBudget:
    """The latency budget the recommendation meets (p99 over a cell's requests)."""

    ttft_p99_ms: float = 2000.0
    itl_p99_ms: float = 100.0


@dataclass(frozen=True, slots=True)
class StudySpec:
    """`python -m pipeline study`: time, accuracy, communication and memory for every mapping x
    kernel mode x workload x batch size (conf/study/default.yaml)."""

    name: str = "default"
    # tp<N>, pp<N> or tp<N>pp<M>; each is converted and built from the configured model
    mappings: tuple[str, ...] = ("tp1", "tp2", "pp2")
    # fused: the Triton kernels and CUDA graphs (CUDA only); unfused: plain PyTorch ops, eager
    kernels: tuple[str, ...] = ("fused", "unfused")
    workloads: tuple[str, ...] = ("128x128", "1024x256")  # <input tokens>x<output tokens>
    # () = 1, 2, 4, ... up to max_batch_size, stopping at the first size that fails (then
    # bisected); or the sizes to run
    batch_sizes: tuple[int, ...] = ()
    max_batch_size: int = 512  # also the engines' build.max_batch_size
    bisect_steps: int = 2  # sizes tried between the last that fits and the first that fails
    num_waves: int = 1  # requests a cell = batch size x num_waves, batch size in flight
    num_warmup_requests: int = 2
    num_kv_blocks: int = 0  # 0 = the engine's KV budget; > 0 a fixed one (capacity probes)
    sample_rate_hz: float = 6.0  # NVML / process sampler
    # null = the configured model's real weights; llama-8b = that shape with synthetic weights
    # made on the GPUs (pipeline.synthetic.weights), the configured model's tokenizer
    synthetic_shape: str | None = None
    synthetic_dtype: str = "bfloat16"
    # each mapping x kernels x workload runs in a process of its own, restarted after a GPU OOM
    isolate: bool = True
    time_budget_s: float = 0.0  # > 0: start no new series past it (a rerun resumes); 0 = none
    accuracy: StudyAccuracy = field(default_factory=StudyAccuracy)
    budget: StudyBudget = field(default_factory=StudyBudget)
