"""Per-GPU NVLink TX/RX through NVML, beside the profiler's utilisation, memory and PCIe.

Two ways, the first that this driver answers: the field values NVML_FI_DEV_NVLINK_THROUGHPUT_
DATA_TX / _RX (cumulative KiB of payload over all links, scope UINT_MAX; rates are the
difference between samples), else the NVLink utilisation counters (per link, cumulative bytes,
counter 0 as configured on the host). Without either (no NVLink, or a CPU host) the metrics are
not sampled and the method says why; the report then shows "not available", never a number."""

import logging
import time

import pynvml

from pipeline.profiler.nvml_source import NvmlSource

log = logging.getLogger(__name__)
ALL_LINKS = 0xFFFFFFFF
FIELDS = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")
MAX_LINKS = 18


def _fields(handle, scope: int) -> tuple[int, int] | None:
    values = pynvml.nvmlDeviceGetFieldValues(handle, [(getattr(pynvml, f), scope) for f in FIELDS])
    if any(v.nvmlReturn != pynvml.NVML_SUCCESS for v in values):
        return None
    return values[0].value.ullVal * 1024, values[1].value.ullVal * 1024  # KiB -> bytes


def _field_counters(handle) -> tuple[int, int] | None:
    """All links at once (scope UINT_MAX), else the sum of the links that answer."""
    total = _fields(handle, ALL_LINKS)
    if total is not None:
        return total
    links = [c for c in (_fields(handle, link) for link in range(MAX_LINKS)) if c is not None]
    return (sum(c[0] for c in links), sum(c[1] for c in links)) if links else None


def _utilization_counters(handle) -> tuple[int, int] | None:
    tx = rx = 0
    num_active = 0
    for link in range(MAX_LINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
            rx_link, tx_link = pynvml.nvmlDeviceGetNvLinkUtilizationCounter(handle, link, 0)
        except pynvml.NVMLError:
            continue
        num_active += 1
        tx, rx = tx + tx_link, rx + rx_link
    return (tx, rx) if num_active else None


METHODS = (
    ("nvml field values NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX", _field_counters),
    ("nvml NVLink utilization counters (counter 0)", _utilization_counters),
)


def pick_method(handles: list) -> tuple[str, object | None]:
    """(what is used, its reader) or (why none, None)."""
    if not handles:
        return "not available: no GPU", None
    errors = []
    for name, read in METHODS:
        try:
            if read(handles[0]) is not None:
                return name, read
            errors.append(f"{name}: not supported")
        except pynvml.NVMLError as exc:
            errors.append(f"{name}: {exc}")
    return "not available: " + "; ".join(errors), None


class GpuSource(NvmlSource):
    """The profiler's NVML source with nvlink_tx_bytes_s / nvlink_rx_bytes_s per GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.nvlink_method, self._read = pick_method(self.handles)
        self._last: dict[int, tuple[float, int, int]] = {}
        log.info("study: NVLink counters: %s", self.nvlink_method)

    def describe(self) -> dict:
        out = super().describe()
        out["nvlink_method"] = self.nvlink_method
        if self._read is not None:
            out["metrics"] |= {"nvlink_tx_bytes_s": "bytes/s", "nvlink_rx_bytes_s": "bytes/s"}
        return out

    def sample(self) -> dict[str, dict[str, float | None]]:
        out = super().sample()
        if self._read is None:
            return out
        for i, handle in enumerate(self.handles):
            now = time.perf_counter()
            counters = self._read(handle)
            if counters is None:
                continue
            last = self._last.get(i)
            self._last[i] = (now, *counters)
            if last is not None and now > last[0]:
                dt = now - last[0]
                out[f"gpu{i}"]["nvlink_tx_bytes_s"] = (counters[0] - last[1]) / dt
                out[f"gpu{i}"]["nvlink_rx_bytes_s"] = (counters[1] - last[2]) / dt
        return out
