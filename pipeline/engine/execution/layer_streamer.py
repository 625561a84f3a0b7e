"""Weight offload: decoder layers beyond the GPU weight budget stream from host memory.

While the model is built, each layer is built on the device as usual (its kernels and packed
layouts are chosen for the device), then a streamed layer's linears are packed into one pinned
host buffer and their device copies freed, so a model larger than the GPU is never whole on it.
At run time two device staging buffers take turns: streamed layer k runs from staging k % 2,
and its bytes are copied there on a copy stream while the layers before it compute. Events
order the two streams: the copy into a staging buffer waits for the layer that used it last,
and a layer waits for its own copy. The copies of streamed layers 0 and 1 start with the
forward, so they overlap the resident layers before them.

The same calls run on the CPU, where "host" and "device" are one memory: the copies are plain
memcpys into the staging buffers, in the same order, so the CPU tests run this code path.

CUDA graphs capture it as it is: the fork to the copy stream and the join back are events
recorded inside the capture, and copies from pinned host memory are graph nodes, so a replayed
step streams its layers too.
"""

import logging

import torch
from torch import nn

from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.execution import weight_store
from pipeline.engine.execution.offload_plan import (
    GB,
    NUM_STAGING,
    PcieBound,
    measure_host_to_device,
    pcie_bound,
    streamed_layers,
)
from pipeline.engine.parallel.mapping import Mapping

logger = logging.getLogger(__name__)


class LayerStreamer:
    """Built by the model runner: `place` goes to the model as it builds its layers, `attach`
    runs once the model is built."""

    def __init__(self, num_layers: int, budget_gb: float, device: torch.device):
        self.num_layers, self.budget_gb, self.device = num_layers, budget_gb, device
        self.is_cuda = device.type == "cuda"
        self.layer_bytes = 0  # one layer's linears (layer 0's; a stage's layers are alike)
        self.streamed: list[int] = []  # stage-local layer indices, in order
        self._layouts: list[list[weight_store.Slot]] = []  # per streamed layer
        self._stores: list[torch.Tensor] = []  # per streamed layer: its host bytes
        self._staging: list[torch.Tensor] = []
        self._copy_stream = torch.cuda.Stream(device) if self.is_cuda else None
        self._ready = [torch.cuda.Event() for _ in range(NUM_STAGING)] if self.is_cuda else []
        self.bound: PcieBound | None = None

    @classmethod
    def for_config(
        cls, config: EngineConfig, mapping: Mapping, device: torch.device
    ) -> "LayerStreamer | None":
        """The streamer of a rank's stage under config.gpu_weight_budget_gb (None: unset)."""
        if config.gpu_weight_budget_gb is None:
            return None
        num_layers = len(mapping.layers(config.model.num_layers))
        return cls(num_layers, config.gpu_weight_budget_gb, device)

    def place(self, index: int, layer: nn.Module) -> nn.Module:
        """Called with each decoder layer as soon as it is built: plans at layer 0, and moves
        a streamed layer's linears to host memory."""
        if index == 0:
            _, self.layer_bytes = weight_store.layout(weight_store.linear_tensors(layer))
            self.streamed = streamed_layers(self.num_layers, self.layer_bytes, self.budget_gb)
        if index in self.streamed:
            slots, num_bytes = weight_store.layout(weight_store.linear_tensors(layer))
            store = weight_store.host_buffer(num_bytes, self.device)
            weight_store.pack(slots, store)
            self._layouts.append(slots)
            self._stores.append(store)
        return layer

    def attach(self, model: nn.Module) -> None:
        """Staging buffers, the streamed layers' views of them, and the hooks that copy."""
        if not self.streamed:
            logger.info(
                "weight offload: all %d decoder layers fit gpu_weight_budget_gb=%g "
                "(%.3f GB a layer); none streamed",
                self.num_layers,
                self.budget_gb,
                self.layer_bytes / GB,
            )
            return
        size = max(store.numel() for store in self._stores)
        self._staging = [
            torch.empty(size, dtype=torch.uint8, device=self.device) for _ in range(NUM_STAGING)
        ]
        for k, slots in enumerate(self._layouts):
            weight_store.rebind(slots, self._staging[k % NUM_STAGING])
        if self.is_cuda:  # hand the streamed layers' freed device copies back to the driver
            torch.cuda.empty_cache()
        model.register_forward_pre_hook(self._begin)
        layers = model.layers
        for k, index in enumerate(self.streamed):
            layers[index].register_forward_pre_hook(self._wait_hook(k))
            layers[index].register_forward_hook(self._next_hook(k))
        gbps = measure_host_to_device(self._stores[0], self._staging[0], self._copy_stream)
        self.bound = pcie_bound(self.streamed_bytes, gbps)
        logger.info(
            "weight offload: gpu_weight_budget_gb=%g streams %d of %d decoder layers %s from "
            "host memory (%.3f GB a layer; resident %.2f GB + staging %.2f GB); PCIe "
            "bound: %s",
            self.budget_gb,
            len(self.streamed),
            self.num_layers,
            self.streamed,
            self.layer_bytes / GB,
            (self.num_layers - len(self.streamed)) * self.layer_bytes / GB,
            NUM_STAGING * size / GB,
            self.bound.describe(),
        )

    @property
    def streamed_bytes(self) -> int:
        return sum(store.numel() for store in self._stores)

    def _copy(self, k: int) -> None:
        # streamed layer k's bytes into its staging buffer, after whatever the compute stream
        # has queued (the layer that used that buffer last among it)
        staging, store = self._staging[k % NUM_STAGING], self._stores[k]
        if not self.is_cuda:
            staging[: store.numel()].copy_(store)
            return
        self._copy_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._copy_stream):
            staging[: store.numel()].copy_(store, non_blocking=True)
            self._ready[k % NUM_STAGING].record(self._copy_stream)

    def _begin(self, module: nn.Module, args: tuple) -> None:
        for k in range(min(NUM_STAGING, len(self.streamed))):
            self._copy(k)

    def _wait_hook(self, k: int):
        def wait(module: nn.Module, args: tuple) -> None:
            if self.is_cuda:
                torch.cuda.current_stream(self.device).wait_event(self._ready[k % NUM_STAGING])

        return wait

    def _next_hook(self, k: int):
        def next_copy(module: nn.Module, args: tuple, output) -> None:
            if k + NUM_STAGING < len(self.streamed):
                self._copy(k + NUM_STAGING)

        return next_copy
