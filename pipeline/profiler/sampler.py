"""A background thread that samples its sources at a fixed rate and records named phases.

The sleep is corrected for the time each query takes (NVML PCIe queries alone take ~20 ms), so
the rate holds; when a query overruns the period the next sample is taken at once, without a
burst to catch up. Times are seconds since `origin_s`, shared with the load generator. A source
that fails is noted in the timeline (its first error) and the others go on being sampled: a
profiler thread that died would leave a run's timeline silently short.
"""

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from pipeline.profiler.process_source import ProcessSource

log = logging.getLogger(__name__)


class Source(Protocol):
    name: str

    def describe(self) -> dict:
        """What is sampled (device names, pids, units)."""

    def sample(self) -> dict[str, dict[str, float | None]]:
        """{device label: {metric: value}} at this instant."""

    def close(self) -> None:
        """Close the handles."""


class Sampler:
    def __init__(
        self, sources: Sequence[Source], rate_hz: float, origin_s: float, notes: Sequence[str] = ()
    ) -> None:
        self.sources = list(sources)
        self.period_s = 1.0 / rate_hz
        self.rate_hz = rate_hz
        self.origin_s = origin_s
        self.notes = list(notes)
        self.samples: list[dict] = []
        self.phases: list[dict] = []
        self._failed: set[str] = set()  # sources whose first error is in the notes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="profiler", daemon=True)

    def now(self) -> float:
        return time.perf_counter() - self.origin_s

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for source in self.sources:
            source.close()

    def watch_process(self, label: str, pid: int) -> None:
        """Sample another process tree from now on (e.g. a server started after the sampler)."""
        for source in self.sources:
            if isinstance(source, ProcessSource):
                source.add_root(label, pid)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.phases.append({"name": name, "start_s": start, "end_s": self.now()})

    def _loop(self) -> None:
        next_s = time.perf_counter()
        while not self._stop.is_set():
            began = time.perf_counter()
            sample: dict = {"t_s": began - self.origin_s}
            for source in self.sources:
                try:
                    sample.update(source.sample())
                except Exception as exc:  # noqa: BLE001 - noted; the other sources go on
                    if source.name not in self._failed:
                        self._failed.add(source.name)
                        log.exception("profiler: source %s failed", source.name)
                        self.notes.append(
                            f"{source.name} source failed at t={sample['t_s']:.2f} s "
                            f"({type(exc).__name__}: {exc}); its later samples may be missing"
                        )
            sample["query_s"] = time.perf_counter() - began
            self.samples.append(sample)
            next_s, delay = next_deadline(next_s, time.perf_counter(), self.period_s)
            self._stop.wait(delay)

    def timeline(self) -> dict:
        """Everything recorded, JSON-ready, with per-device peaks and means."""
        span = self.samples[-1]["t_s"] - self.samples[0]["t_s"] if len(self.samples) > 1 else 0
        return {
            "sources": [s.describe() for s in self.sources],
            "notes": self.notes,
            "rate_hz": self.rate_hz,
            "achieved_rate_hz": (len(self.samples) - 1) / span if span > 0 else 0.0,
            "num_samples": len(self.samples),
            "phases": self.phases,
            "summary": summarize_samples(self.samples),
            "samples": self.samples,
        }


def next_deadline(deadline_s: float, now_s: float, period_s: float) -> tuple[float, float]:
    """(next deadline, sleep until it): one period after the last deadline, so the time a query
    took is subtracted from the sleep; after an overrun the schedule restarts from now."""
    deadline_s += period_s
    if deadline_s < now_s:
        return now_s, 0.0
    return deadline_s, deadline_s - now_s


def devices(samples: Sequence[dict]) -> dict[str, list[str]]:
    """{device label: [metric names]} in first-seen order."""
    out: dict[str, list[str]] = {}
    for sample in samples:
        for key, value in sample.items():
            if isinstance(value, dict):
                names = out.setdefault(key, [])
                names.extend(m for m in value if m not in names)
    return out


def summarize_samples(
    samples: Sequence[dict], start_s: float = float("-inf"), end_s: float = float("inf")
) -> dict[str, dict[str, float]]:
    """{device: {metric_max: .., metric_mean: ..}} over samples taken in [start_s, end_s]."""
    window = [s for s in samples if start_s <= s["t_s"] <= end_s]
    out: dict[str, dict[str, float]] = {}
    for device, metrics in devices(window).items():
        stats = out.setdefault(device, {})
        for metric in metrics:
            values = [
                s[device][metric]
                for s in window
                if device in s and s[device].get(metric) is not None
            ]
            if values:
                stats[f"{metric}_max"] = max(values)
                stats[f"{metric}_mean"] = sum(values) / len(values)
    return out
