"""The study's sampler: NVML per GPU (utilisation, memory, PCIe, NVLink where the driver has
it) and each rank's CPU% and RSS; without NVML the process metrics alone, and its notes say so."""

import logging
import os

from pipeline.profiler.process_source import ProcessSource
from pipeline.profiler.sampler import Sampler

log = logging.getLogger(__name__)


def study_sampler(rate_hz: float, origin_s: float) -> Sampler:
    sources, notes = [], []
    try:
        from pipeline.study.nvlink import GpuSource

        sources.append(GpuSource())
    except Exception as exc:  # pynvml raises NVMLError_* subclasses or fails to load the library
        notes.append(
            f"NVML unavailable ({type(exc).__name__}: {exc}); sampled process CPU% and RSS only"
        )
        log.info("study: %s", notes[-1])
    sources.append(ProcessSource({"rank0": os.getpid()}))
    return Sampler(sources, rate_hz, origin_s, notes)


def nvlink_method(sources: list[dict]) -> str:
    """What sampled NVLink, from a timeline's source descriptions."""
    for source in sources:
        if source.get("source") == "nvml":
            return source.get("nvlink_method", "not available")
    return "not available: no NVML (no GPU driver)"
