"""Sweep sizes 1, 2, 4, ...: at each size, `size * num_waves` requests at concurrency `size`.

direct: the engine in-process, its stats() read after every step; a size fails when its sequences
could not all run at once for lack of KV blocks (they waited, or were preempted), when a request
is refused as never fitting, or on GPU out-of-memory. server: through Triton; a size fails when a
request fails. Either way the failure is a result, never a crash.
"""

import dataclasses
import gc
import logging
from collections.abc import Callable
from pathlib import Path

from pipeline.bench.engine_facts import EngineFacts
from pipeline.bench.session import Workload, add_derived, direct_target, measure
from pipeline.bench.target import Target
from pipeline.bench.threshold_search import (
    CapacityExceeded,
    SweepResult,
    classify_failure,
    find_threshold,
)
from pipeline.bench.workload import PromptMaker
from pipeline.profiler.sampler import Sampler

log = logging.getLogger(__name__)


def _free_gpu_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _size_bench(bench, size: int):
    return dataclasses.replace(
        bench, mode="concurrency", concurrency=size, num_requests=size * bench.sweep.num_waves
    )


def _measure_size(target: Target, bench, maker, sampler, origin_s, size, facts) -> dict:
    sized = _size_bench(bench, size)
    result, records = measure(
        target, sized, Workload.from_spec(sized, maker), sampler, origin_s, label=f"size{size}:"
    )
    summary = result["summary"]
    add_derived(summary, facts.weights_bytes)
    summary.pop("resources", None)
    summary.update(result["engine_stats"])
    if summary["num_errors"]:
        first = next(r.error for r in records if r.error)
        raise CapacityExceeded(
            classify_failure(RuntimeError(first)),
            f"{summary['num_errors']} of {size * bench.sweep.num_waves} requests failed: {first}",
            summary,
        )
    return summary


def _direct_run_one(
    target, bench, maker, sampler, origin_s, facts: EngineFacts
) -> Callable[[int], dict]:
    import torch

    def run_one(size: int) -> dict:
        if size > facts.max_batch_size:
            raise CapacityExceeded(
                "batch_limit",
                f"size {size} > the engine's max_batch_size="
                f"{facts.max_batch_size}; rebuild with build.max_batch_size="
                f"{size} to sweep further",
            )
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        metrics = _measure_size(target, bench, maker, sampler, origin_s, size, facts)
        total = metrics["num_total_blocks"]
        metrics["kv_used_gib"] = (
            (total - metrics["min_free_blocks"]) * facts.kv_bytes_per_block / 2**30
        )
        if torch.cuda.is_available():
            metrics["torch_max_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        kv = (
            f"KV cache of {total} blocks x {facts.tokens_per_block} tokens, "
            f"{bench.input_len}+{bench.output_len} tokens per sequence"
        )
        if metrics["num_preemptions"]:
            raise CapacityExceeded(
                "kv_capacity",
                f"{metrics['num_preemptions']} preemptions at {size} concurrent sequences ({kv})",
                metrics,
            )
        if metrics["peak_running"] < size:
            raise CapacityExceeded(
                "kv_capacity",
                f"only {metrics['peak_running']} of {size} sequences could run at once ({kv})",
                metrics,
            )
        return metrics

    return run_one


def sweep(
    spec,
    engine_dir: Path,
    maker: PromptMaker,
    sampler: Sampler | None,
    origin_s: float,
    deployed: Path | None = None,
) -> SweepResult:
    """Sizes up to the first failure, against the engine in-process or a server (launched on
    the deploy artifact `deployed` unless bench.server_url is set)."""
    from pipeline.bench.server_target import server_target

    bench, options = spec.bench, spec.bench.sweep
    facts = EngineFacts.read(engine_dir)
    if options.target == "direct":
        context = direct_target(spec, engine_dir, sampler, options.num_kv_blocks)
    else:
        context = server_target(spec, sampler, deployed)
    with context as target:
        if options.target == "direct":
            run_one = _direct_run_one(target, bench, maker, sampler, origin_s, facts)
        else:

            def run_one(size: int) -> dict:
                return _measure_size(target, bench, maker, sampler, origin_s, size, facts)

        return find_threshold(
            options.sizes, run_one, _free_gpu_memory, options.stop_at_first_failure
        )
