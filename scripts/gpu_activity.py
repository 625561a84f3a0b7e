"""What the GPUs did during a benchmark run: NVML utilisation of every visible GPU, and rank 0's
torch.profiler tables (where its host waited on other ranks)."""

import dataclasses
import time
from pathlib import Path

import torch

from pipeline.engine import LLMEngine
from pipeline.profiler.sampler import Sampler, summarize_samples
from scripts.engine_run import Workload, offline_throughput, prompts_for


def gpu_sampler(device: torch.device) -> Sampler | None:
    """pipeline.profiler's NVML sampler at 10 Hz for a CUDA run (None on the CPU): do both GPUs
    of a TP / PP engine work?"""
    if device.type != "cuda":
        return None
    from pipeline.profiler.nvml_source import NvmlSource

    return Sampler([NvmlSource()], 10.0, time.perf_counter())


def util_means(sampler: Sampler | None) -> list[float] | None:
    """Each GPU's mean NVML utilisation (% of time a kernel ran) over the sampled run."""
    if sampler is None:
        return None
    summary = summarize_samples(sampler.samples)
    return [round(summary[d]["util_pct_mean"], 1) for d in sorted(summary) if d.startswith("gpu")]


def rank0_trace(engine: LLMEngine, vocab_size: int, work: Workload, out: Path) -> dict:
    """torch.profiler over an offline run of 64 requests on rank 0: its GPU's busy share and the
    host calls it spent longest in (where rank 0 waits on the other ranks)."""
    from torch.profiler import ProfilerActivity, profile

    small = dataclasses.replace(work, num_requests=64)
    prompts = prompts_for(vocab_size, small, small.num_requests, seed=3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        offline_throughput(engine, prompts, small, None)
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - start) * 1e6
    events = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rank0_ops.txt").write_text(
        events.table(sort_by="self_cpu_time_total", row_limit=30)
        + "\n"
        + events.table(sort_by="self_device_time_total", row_limit=30)
    )
    return {"wall_ms": round(wall_us / 1e3, 1), "gpu_busy_share": round(gpu_us / wall_us, 3)}
