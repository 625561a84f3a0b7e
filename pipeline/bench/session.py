"""One benchmark session: the same requests against the engine in-process and/or the served
ensemble, warm-up excluded, each phase marked on the profiler's timeline."""

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.bench import served_path
from pipeline.bench.direct_target import DirectTarget
from pipeline.bench.load_generator import MODES
from pipeline.bench.metrics import achieved_bandwidth_gb_s, summarize
from pipeline.bench.openai_target import openai_overhead
from pipeline.bench.records import RequestRecord
from pipeline.bench.report import triton_overhead
from pipeline.bench.target import Target
from pipeline.bench.workload import BenchRequest, PromptMaker
from pipeline.errors import ConfigError
from pipeline.profiler.sampler import Sampler, summarize_samples
from pipeline.specs.pipeline import PipelineSpec
from pipeline.triton_models.engine_runtime import engine_runtime

log = logging.getLogger(__name__)
# openai: the OpenAI-compatible frontend in front of the bench's server; all: direct, the gRPC
# server path and the OpenAI path, the last two on one server
TARGETS = ("server", "direct", "both", "openai", "all")


def check_bench_spec(bench) -> None:
    """Every problem with the bench settings at once, before anything is loaded."""
    problems = []
    if bench.target not in TARGETS:
        problems.append(f"bench.target={bench.target!r} (use one of {TARGETS})")
    if bench.mode not in MODES:
        problems.append(f"bench.mode={bench.mode!r} (use one of {MODES})")
    if bench.workload not in ("synthetic", "corpus"):
        problems.append(f"bench.workload={bench.workload!r} (use synthetic or corpus)")
    for key in ("input_len", "output_len", "num_requests", "concurrency"):
        if getattr(bench, key) < 1:
            problems.append(f"bench.{key}={getattr(bench, key)} (must be >= 1)")
    for key in ("num_warmup_requests", "trace_rate"):
        if getattr(bench, key) < 0:
            problems.append(f"bench.{key}={getattr(bench, key)} (must be >= 0)")
    if bench.sweep.target not in ("server", "direct"):
        problems.append(f"bench.sweep.target={bench.sweep.target!r} (use server or direct)")
    if not bench.sweep.sizes or min(bench.sweep.sizes) < 1:
        problems.append(f"bench.sweep.sizes={list(bench.sweep.sizes)} (positive sizes)")
    if problems:
        raise ConfigError("bench: " + "; ".join(problems) + " (fix conf/bench or the override)")


@dataclass(frozen=True, slots=True)
class Workload:
    warmup: list[BenchRequest]
    measured: list[BenchRequest]

    @classmethod
    def from_spec(cls, bench, maker: PromptMaker) -> "Workload":
        def make(n: int, seed: int, prefix: str) -> list[BenchRequest]:
            return maker.make(
                bench.workload,
                bench.corpus_path,
                n,
                bench.input_len,
                bench.output_len,
                seed,
                prefix,
            )

        # warm-up prompts come from another seed: they must not pre-fill any cache the measured
        # requests could hit
        return cls(
            make(bench.num_warmup_requests, bench.seed + 10_000, "warmup"),
            make(bench.num_requests, bench.seed, "req"),
        )


def settings(bench) -> dict:
    """The settings bench numbers depend on (a baseline must match them)."""
    keys = (
        "target",
        "workload",
        "input_len",
        "output_len",
        "num_requests",
        "num_warmup_requests",
        "mode",
        "concurrency",
        "request_rate",
        "temperature",
        "seed",
    )
    return {k: getattr(bench, k) for k in keys}


def phase(sampler: Sampler | None, name: str):
    return sampler.phase(name) if sampler else contextlib.nullcontext()


def measure(
    target: Target,
    bench,
    workload: Workload,
    sampler: Sampler | None,
    origin_s: float,
    label: str = "",
) -> tuple[dict, list[RequestRecord]]:
    """Warm-up, then the measured requests; returns ({summary, warmup}, measured records).
    Phases are named `<target>:<label>warmup` and `<target>:<label>measure`."""
    gen = target.generator(bench, origin_s)
    with phase(sampler, f"{target.name}:{label}warmup"):
        warm = gen.run(workload.warmup, "warmup")
    start_s = gen.now()
    with phase(sampler, f"{target.name}:{label}measure"):
        records = gen.run(workload.measured, "measure")
    summary = summarize(records)
    if sampler is not None:
        summary["resources"] = summarize_samples(sampler.samples, start_s, gen.now())
    warm_summary = summarize(warm)
    result = {
        "summary": summary,
        "engine_stats": gen.engine_stats,
        "warmup": {
            "num_requests": len(warm),
            "num_errors": warm_summary["num_errors"],
            "duration_s": warm_summary["duration_s"],
        },
    }
    log.info(
        "%s: %.1f output tok/s, TTFT p50 %.1f ms, ITL p50 %.1f ms, %d errors",
        target.name,
        summary["output_tok_s"],
        summary["ttft_ms_p50"],
        summary["itl_ms_p50"],
        summary["num_errors"],
    )
    return result, records


def peak_memory_gib(summary: dict) -> float | None:
    """Largest GPU memory used (NVML) if sampled, else the largest RSS of a sampled process."""
    resources = summary.get("resources", {})
    gpu = [
        v["mem_used_bytes_max"]
        for k, v in resources.items()
        if k.startswith("gpu") and "mem_used_bytes_max" in v
    ]
    rss = [v["rss_bytes_max"] for v in resources.values() if "rss_bytes_max" in v]
    values = gpu or rss
    return max(values) / 2**30 if values else None


def add_derived(summary: dict, weights_bytes: int) -> None:
    summary["achieved_weight_bw_gb_s"] = achieved_bandwidth_gb_s(
        weights_bytes, summary["itl_ms_mean"]
    )
    summary["peak_memory_gib"] = peak_memory_gib(summary)


@contextlib.contextmanager
def direct_target(
    spec, engine_dir: Path, sampler: Sampler | None = None, num_kv_blocks: int = 0
) -> Iterator[DirectTarget]:
    with phase(sampler, "direct:load"):
        target = DirectTarget(
            engine_dir,
            spec.backend.device,
            engine_runtime(spec.deploy, num_kv_blocks),
            spec.deploy.torch.num_threads,
        )
    try:
        yield target
    finally:
        target.close()


def run_targets(
    spec,
    engine_dir: Path,
    maker: PromptMaker,
    weights_bytes: int,
    sampler: Sampler | None,
    origin_s: float | None = None,
    deployed: Path | None = None,
) -> tuple[dict, dict]:
    """Direct first (then freed), then the server (launched on the deploy artifact `deployed`
    unless bench.server_url is set): ({target: result}, {target: records})."""
    from pipeline.bench.openai_target import openai_target
    from pipeline.bench.server_target import server_target

    bench = spec.bench
    origin_s = time.perf_counter() if origin_s is None else origin_s
    workload = Workload.from_spec(bench, maker)
    results, records = {}, {}
    if bench.target in ("direct", "both", "all"):
        with direct_target(spec, engine_dir, sampler) as target:
            results["direct"], records["direct"] = measure(
                target, bench, workload, sampler, origin_s
            )
            results["direct"]["torch_num_threads"] = target.num_threads
    if bench.target in ("server", "both", "openai", "all"):
        with server_target(spec, sampler, deployed) as target:
            if bench.target != "openai":
                results["server"], records["server"] = measure(
                    target, bench, workload, sampler, origin_s
                )
            if bench.target in ("openai", "all"):
                with openai_target(spec, target.url, deployed) as api:
                    results["openai"], records["openai"] = measure(
                        api, bench, workload, sampler, origin_s
                    )
        if target.trace_file is not None and "server" in records:  # complete once stopped
            traces = served_path.read_trace(target.trace_file)
            results["server"]["served_path"] = served_path.split(
                records["server"], traces, origin_s
            )
    for result in results.values():
        add_derived(result["summary"], weights_bytes)
    return results, records


def report_dict(
    spec: PipelineSpec, engine_dir: Path, results: dict, hardware: str, weights_bytes: int
) -> dict:
    return {
        "model": spec.model.name,
        "backend": spec.backend.name,
        "hardware": hardware,
        "engine_dir": str(engine_dir),
        "settings": settings(spec.bench),
        "weights_bytes": weights_bytes,
        "targets": results,
        "triton_vs_direct": triton_overhead(results),
        "openai_vs_server": openai_overhead(results),
    }
