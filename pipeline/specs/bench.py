from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ProfileOptions:
    """The resource sampler (NVML per GPU; process CPU%/RSS always)."""

    sample_rate_hz: float = 6.0


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """Batch size / concurrency sweep up to the first size that fails (OOM or KV capacity)."""

    sizes: tuple[int, ...] = (1, 2, 4, 8)
    target: str = "direct"  # direct: engine in-process (sees KV use, OOM); server: through Triton
    num_waves: int = 1  # requests per size = size * num_waves, at concurrency = size
    # 0 = the deployed KV budget; > 0 = a small budget to probe capacity (e.g. 4 on CPU)
    num_kv_blocks: int = 0
    stop_at_first_failure: bool = True


@dataclass(frozen=True, slots=True)
class RegressOptions:
    """Bench + accuracy vs baselines/<model>-<backend>-<hardware>.json."""

    baseline: str | None = None  # null = baselines/<model>-<backend>-<hardware>.json
    # write this run's numbers as the baseline, keeping its tolerances (`make update-baseline`)
    update_baseline: bool = False
    bench_dir: str | None = None  # a bench/profile artifact to judge; null = measure anew
    # tolerances for metrics a baseline does not have yet (stored ones win)
    speed_tolerance: float = 0.5  # relative drop allowed in tok/s, req/s
    latency_tolerance: float = 1.0  # relative rise allowed in TTFT/ITL/e2e
    ppl_tolerance: float = 0.05  # absolute rise allowed in perplexity
    num_accuracy_prompts: int = 2  # greedy-token prompts (corpus text), compared exactly
    accuracy_max_tokens: int = 8
    ppl_num_tokens: int = 128  # held-out corpus tokens scored for perplexity


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """Load generation against the served ensemble (gRPC streaming) and the engine in-process."""

    name: str = "smoke"
    seed: int = 0
    target: str = "both"  # server | direct | both (both gives the Triton-vs-direct ratio)
    # host:grpc_port of a running server; null = launch one on the deployed repository
    server_url: str | None = None
    workload: str = "synthetic"  # synthetic (token-exact ISL/OSL) | corpus (real text)
    corpus_path: str | None = None  # null = gensim's lee_background.cor
    input_len: int = 32
    output_len: int = 16
    num_requests: int = 16
    num_warmup_requests: int = 2  # run first, excluded from the metrics
    mode: str = "concurrency"  # concurrency (closed loop) | rate (Poisson arrivals)
    concurrency: int = 4  # in mode=rate: the cap on requests in flight
    request_rate: float = 2.0  # req/s, mode=rate
    temperature: float = 0.0
    request_timeout_s: float = 600.0
    # server target: processes the load generator's streams are spread over (the Python client
    # takes a GIL per process); 0 = one per 8 concurrent requests, on at most half the cores
    client_processes: int = 0
    # server target: Triton traces every N-th request, which splits the served path's time into
    # hops, client -> model -> engine -> client (bench.served_path); 0 = off. Only a server the
    # bench launches itself
    trace_rate: int = 0
    profile: ProfileOptions = field(default_factory=ProfileOptions)
    sweep: SweepOptions = field(default_factory=SweepOptions)
    regress: RegressOptions = field(default_factory=RegressOptions)
