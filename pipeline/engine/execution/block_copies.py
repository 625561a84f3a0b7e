"""A step's block copies (SchedulerOutput.blocks_to_copy), run before its forward in the order
the scheduler decided: (source, destination) pairs of two kinds,
- both >= 0: a KV block into another on the device, every layer's K and V (a forked beam's copy
  of its parent's partial last block, scheduling/beam_search.py);
- one < 0: to or from a host-tier slot (prefix caching's, kv_swap.py), which the host tier runs.
A run of device pairs is one gather and one scatter on the current stream: the same ops on CPU
and CUDA, queued behind the work before (which may still write a source) and ahead of the
forward. Within a run no destination is read by a later pair: a destination is a block just
taken, never a live beam's block."""

import numpy as np
import torch

from pipeline.engine.execution.kv_swap import HostKVTier
from pipeline.engine.execution.launch_channel import LaunchChannel


class BlockCopies:
    """The runner's KV cache and its host tier, which the copies read and write."""

    def __init__(self, kv_cache: torch.Tensor, host_tier: HostKVTier | None):
        self.kv_cache = kv_cache  # [layers, 2, blocks, ...]
        self.host_tier = host_tier

    def copy(
        self,
        pairs: np.ndarray,
        channel: LaunchChannel | None = None,
        reads: np.ndarray | None = None,
    ) -> None:
        """Run the copies in order. reads: the launch's block tables, which decide whether the
        host tier's copies may run beside its forward (HostKVTier.copy)."""
        on_device = (pairs >= 0).all(axis=1)
        if on_device.all():
            _device_copies(self.kv_cache, pairs)
            return
        # runs of one kind, in order
        edges = np.flatnonzero(np.diff(on_device.astype(np.int8))) + 1
        for run in np.split(np.arange(len(pairs)), edges):
            if on_device[run[0]]:
                _device_copies(self.kv_cache, pairs[run])
            else:
                self.host_tier.copy(pairs[run], channel, reads)


def _device_copies(kv_cache: torch.Tensor, pairs: np.ndarray) -> None:
    index = torch.tensor(pairs.T, dtype=torch.int64, device=kv_cache.device)
    kv_cache.index_copy_(2, index[1], kv_cache.index_select(2, index[0]))
