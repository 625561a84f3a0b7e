"""Which decoder layers a GPU weight budget streams, and the PCIe bound that implies.

The budget covers this rank's decoder-layer linears: the resident layers plus, once any layer
streams, two staging buffers of one layer each. The streamed layers are spread evenly over the
stage, so each copy overlaps the compute of the resident layers between two streamed ones.
"""

import time
from dataclasses import dataclass

import torch

from pipeline.errors import ConfigError

GB = 1e9  # gpu_weight_budget_gb counts 10^9 bytes, as GPU memory sizes are quoted
NUM_STAGING = 2  # layer i+1's copy overlaps layer i's compute


def streamed_layers(num_layers: int, layer_bytes: int, budget_gb: float) -> list[int]:
    """The stage-local indices of the layers that stream; [] when every layer fits."""
    budget = budget_gb * GB
    if num_layers * layer_bytes <= budget:
        return []
    if budget < NUM_STAGING * layer_bytes:
        need = NUM_STAGING * layer_bytes / GB
        raise ConfigError(
            f"build.gpu_weight_budget_gb={budget_gb:g}: below the {NUM_STAGING} staging "
            f"buffers a streamed model needs ({NUM_STAGING} x {layer_bytes / GB:.3f} GB, one "
            f"decoder layer's linears each); raise it to at least {need:.3f} or null (all "
            f"resident)"
        )
    resident = min(num_layers, int(budget // layer_bytes)) - NUM_STAGING
    num_streamed = num_layers - max(resident, 0)
    step = num_layers / num_streamed
    return [int((j + 0.5) * step) for j in range(num_streamed)]


@dataclass(frozen=True, slots=True)
class PcieBound:
    streamed_bytes: int  # copied to the device every forward
    host_to_device_gbps: float  # measured on a streamed layer's copy
    max_steps_per_s: float  # forwards a second the copies allow

    def describe(self) -> str:
        return (
            f"{self.streamed_bytes / GB:.2f} GB a step at {self.host_to_device_gbps:.1f} GB/s "
            f"host-to-device -> at most {self.max_steps_per_s:.2f} steps/s"
        )


def measure_host_to_device(
    source: torch.Tensor, target: torch.Tensor, stream: torch.cuda.Stream | None, reps: int = 3
) -> float:
    """GB/s of copying source (host) into target (device), as the streamer copies."""
    num_bytes = source.numel()
    if stream is None:  # the CPU: a memcpy
        target[:num_bytes].copy_(source)
        start = time.perf_counter()
        for _ in range(reps):
            target[:num_bytes].copy_(source)
        return reps * num_bytes / (time.perf_counter() - start) / GB
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        target[:num_bytes].copy_(source, non_blocking=True)  # warm
        start.record(stream)
        for _ in range(reps):
            target[:num_bytes].copy_(source, non_blocking=True)
        end.record(stream)
    end.synchronize()
    return reps * num_bytes / (start.elapsed_time(end) / 1e3) / GB


def pcie_bound(streamed_bytes: int, gbps: float) -> PcieBound:
    steps = gbps * GB / streamed_bytes if streamed_bytes else float("inf")
    return PcieBound(streamed_bytes, gbps, steps)
