from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AnnealOptions:
    """The simulated-annealing search every `tune` space runs under (pipeline.tune.annealer)."""

    seed: int = 0
    max_trials: int = 40  # candidates measured (or refused by the correctness gate), per item
    max_seconds: float = 600.0  # wall time per item; whichever budget runs out first stops it
    repeats: int = 3  # measurements per trial (>= 2): the noise estimate of each candidate
    # a move that costs `initial_temperature` relative more is taken with probability 1/e at
    # first; the temperature falls by `cooling` a trial down to `min_temperature`
    initial_temperature: float = 0.05
    cooling: float = 0.9
    min_temperature: float = 0.001
    restart_after: int = 12  # trials without a new best: restart, reheated (random, then best)
    # a candidate counts as better (or worse) only when the difference of means clears this
    # one-sided confidence bound (Welch), and by min_gain relative: moves inside noise are refused
    confidence: float = 0.95
    min_gain: float = 0.0


@dataclass(frozen=True, slots=True)
class ServingSearch:
    """Serving knobs: throughput under a latency budget, measured with the bench workload."""

    target: str = "direct"  # direct: the engine in-process; server: deployed to tritonserver
    ttft_p99_ms: float = 2000.0  # latency budget; a candidate over it is penalised
    itl_p99_ms: float = 500.0
    penalty: float = 4.0  # cost x (1 + penalty x relative excess over the budget)
    # values tried per knob ([] = not searched: the configured value stays); each is capped by
    # the engine's build limits
    max_batch_size: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    max_num_tokens: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    num_scheduler_steps: tuple[int, ...] = (1, 2, 4, 8, 16)
    num_kv_blocks: tuple[int, ...] = ()  # e.g. [64, 128, 256]; [] = the deployed budget
    instances: tuple[int, ...] = ()  # target=server only, e.g. [1, 2, 4]
    max_response_rate: tuple[float, ...] = ()  # target=server only, e.g. [500, 1000, 2000, 4000]


@dataclass(frozen=True, slots=True)
class KernelSearch:
    """Triton kernel launch configs per shape class of the built engine's model."""

    kernels: tuple[str, ...] = ()  # [] = every kernel the engine runs for its model
    # one file per GPU and toolchain (a file from another one is refused); builds read it too.
    # The ${workdir} is resolved when the config composes
    cache_path: str = "${workdir}/kernel-tuning-cache.json"
    strategy: str = "anneal"  # anneal | random | autotune_list (same number of measurements)
    decode_batch_sizes: tuple[int, ...] = (1, 8, 64)  # decode steps tuned (batch buckets)
    prompt_tokens: tuple[int, ...] = (512, 4096)  # prompt-step token counts tuned
    context_len: int = 1024  # keys each decode row attends to while timing
    launches_per_sample: int = 20  # kernel launches a CUDA-graph replay times
    flush_l2: bool = True  # clear L2 before each launch: weights come from HBM in a step


@dataclass(frozen=True, slots=True)
class InstructionSearch:
    """SIP-style memory-instruction schedules of one kernel's compiled PTX."""

    kernel: str = "varlen_attention"  # varlen_attention | paged_decode_attention | int8_gemv
    num_tokens: int = 4096


@dataclass(frozen=True, slots=True)
class TuneSpec:
    """`python -m pipeline tune`: one search space under the simulated annealer. Every space
    starts from these defaults and conf/tune/<space>.yaml changes what differs; any key can be
    overridden on the command line, e.g. `tune.anneal.max_trials=80`."""

    name: str = "serving"
    space: str = "serving"  # serving | kernels | instructions
    anneal: AnnealOptions = field(default_factory=AnnealOptions)
    serving: ServingSearch = field(default_factory=ServingSearch)
    kernels: KernelSearch = field(default_factory=KernelSearch)
    instructions: InstructionSearch = field(default_factory=InstructionSearch)
