"""What the GPUs did during a benchmark run: NVML busy share of every visible GPU, and rank 0's
torch.profiler tables (where its host waited on other ranks)."""

import statistics
import threading
import time
from pathlib import Path

import torch

from pipeline.engine import LLMEngine
from scripts.engine_run import Workload, offline_throughput, prompts_for


class GpuBusy:
    """NVML utilisation (% of time a kernel ran) of every visible GPU, sampled at 10 Hz on a
    thread while the block runs: do both GPUs of a TP / PP engine work?"""

    def __init__(self, device: torch.device):
        self.count = torch.cuda.device_count() if device.type == "cuda" else 0
        self.samples: list[list[int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.samples.append([torch.cuda.utilization(i) for i in range(self.count)])
            except Exception as exc:  # noqa: BLE001 - no NVML: said in the result
                self.samples = [[f"unavailable: {exc!r}"]]
                return

    def __enter__(self) -> "GpuBusy":
        if self.count:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.count:
            self._thread.join()

    def means(self) -> list | None:
        if not self.samples or isinstance(self.samples[0][0], str):
            return self.samples[0] if self.samples else None
        return [round(statistics.mean(col), 1) for col in zip(*self.samples, strict=True)]


def rank0_trace(engine: LLMEngine, vocab_size: int, work: Workload, out: Path) -> dict:
    """torch.profiler over an offline run of 64 requests on rank 0: its GPU's busy share and the
    host calls it spent longest in (where rank 0 waits on the other ranks)."""
    from torch.profiler import ProfilerActivity, profile

    small = Workload(
        num_requests=64,
        input_len=work.input_len,
        output_len=work.output_len,
        max_batch_size=work.max_batch_size,
    )
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
