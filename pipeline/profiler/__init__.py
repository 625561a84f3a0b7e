"""Resource sampling during benchmarks: NVML per GPU when a driver is present, and process CPU%
and RSS (psutil) always; see sampler.Sampler. `make_sampler` picks the sources."""

import logging
import os
import time

from pipeline.profiler.process_source import ProcessSource
from pipeline.profiler.sampler import Sampler

log = logging.getLogger(__name__)


def make_sampler(
    rate_hz: float = 6.0, process_roots: dict[str, int] | None = None, origin_s: float | None = None
) -> Sampler:
    """NVML + process sources; without NVML (no driver, no GPU) process sources only, and the
    timeline's notes say so."""
    sources, notes = [], []
    try:
        from pipeline.profiler.nvml_source import NvmlSource

        sources.append(NvmlSource())
    except Exception as exc:  # pynvml raises NVMLError_* subclasses or fails to import libnvidia-ml
        notes.append(
            f"NVML unavailable ({type(exc).__name__}: {exc}); sampled process CPU% and RSS only"
        )
        log.warning("profiler: %s", notes[-1])
    sources.append(ProcessSource(process_roots or {"bench": os.getpid()}))
    return Sampler(sources, rate_hz, time.perf_counter() if origin_s is None else origin_s, notes)
