"""Per-GPU utilisation, memory used and PCIe TX/RX throughput through NVML (nvidia-ml-py)."""

import logging

import pynvml

log = logging.getLogger(__name__)


class NvmlSource:
    name = "nvml"

    def __init__(self) -> None:
        pynvml.nvmlInit()  # raises pynvml.NVMLError without a driver; make_sampler falls back
        self.handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        # read now: describe() runs after close(), and NVML is shut down then unless someone
        # else in the process (torch) still holds it
        self.driver = pynvml.nvmlSystemGetDriverVersion()
        self.devices = [
            {
                "index": i,
                "name": pynvml.nvmlDeviceGetName(h),
                "memory_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
            }
            for i, h in enumerate(self.handles)
        ]
        self.has_pcie = True

    def describe(self) -> dict:
        return {
            "source": "nvml",
            "driver": self.driver,
            "devices": self.devices,
            "metrics": {
                "util_pct": "%",
                "mem_used_bytes": "bytes",
                "pcie_tx_bytes_s": "bytes/s",
                "pcie_rx_bytes_s": "bytes/s",
            },
        }

    def _pcie(self, handle, counter) -> float | None:
        if not self.has_pcie:
            return None
        try:
            return pynvml.nvmlDeviceGetPcieThroughput(handle, counter) * 1024.0  # KB/s -> B/s
        except pynvml.NVMLError as exc:
            # e.g. NotSupported on some virtualised GPUs: stop asking, keep the other metrics
            log.warning("NVML PCIe throughput unavailable (%s); not sampled", exc)
            self.has_pcie = False
            return None

    def sample(self) -> dict[str, dict[str, float | None]]:
        out = {}
        for i, handle in enumerate(self.handles):
            out[f"gpu{i}"] = {
                "util_pct": float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "mem_used_bytes": float(pynvml.nvmlDeviceGetMemoryInfo(handle).used),
                "pcie_tx_bytes_s": self._pcie(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES),
                "pcie_rx_bytes_s": self._pcie(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES),
            }
        return out

    def close(self) -> None:
        pynvml.nvmlShutdown()
