"""The host tier's bytes: a pool of KV blocks in pinned host memory, and the copies between it
and the device's KV cache that the scheduler decides (scheduling/prefix_cache.py).

A launch's copies run before its forward, in the order given: (source, destination) pairs, a
GPU block >= 0, a host slot k as -1 - k. On CUDA they run on a copy stream that first waits for
the work queued before them (the blocks' K/V may still be being written) and that the compute
stream then waits for (the forward reads what they load); the host never touches the pool's
bytes, so nothing waits on the host. On the CPU they are plain copies.

Each slot holds one block of every layer this rank serves, contiguous: [layers, 2, block_size,
kv_heads, head_dim] as raw bytes (an FP8 cache's codes copy as they are)."""

import math

import numpy as np
import torch

from pipeline.engine.execution.launch_channel import SWAP, LaunchChannel
from pipeline.errors import ConfigError


def host_blocks(host_bytes: int, kv_cache: torch.Tensor) -> int:
    """How many blocks of this cache ([layers, 2, blocks, ...]) host_bytes hold."""
    return int(host_bytes // (kv_cache.nbytes // kv_cache.shape[2]))


class HostKVTier:
    def __init__(self, kv_cache: torch.Tensor, num_slots: int):
        layers, kv, _, *block = kv_cache.shape
        self._cache = kv_cache.view(torch.uint8)  # the last dim in bytes
        self.is_cuda = kv_cache.device.type == "cuda"
        shape = (num_slots, layers, kv, *block[:-1], self._cache.shape[-1])
        try:
            self.pool = torch.empty(shape, dtype=torch.uint8, pin_memory=self.is_cuda)
        except RuntimeError as exc:
            raise ConfigError(
                f"engine: host_kv_cache_gb asks for {math.prod(shape) / 2**30:.1f} GiB of "
                f"{'pinned ' if self.is_cuda else ''}host memory, which failed ({exc}); lower "
                f"host_kv_cache_gb"
            ) from exc
        self._stream = torch.cuda.Stream(kv_cache.device) if self.is_cuda else None
        self.num_copied_bytes = 0

    @property
    def block_nbytes(self) -> int:
        return self.pool[0].nbytes

    def copy(self, pairs: np.ndarray, channel: LaunchChannel | None = None) -> None:
        """Run the (source, destination) copies in order, before anything queued after; the
        driver of several ranks first sends them to the others (their follow() runs them)."""
        if channel is not None:
            channel.send(SWAP, [], torch.from_numpy(pairs.reshape(-1).copy()))
        if self._stream is None:
            self._copy(pairs)
            return
        current = torch.cuda.current_stream(self._cache.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            self._copy(pairs)
        current.wait_stream(self._stream)

    def _copy(self, pairs: np.ndarray) -> None:
        cache, pool = self._cache, self.pool
        for source, dest in pairs.tolist():
            if dest < 0:  # device -> host: the block's layers gathered on the device, then one
                pool[-1 - dest].copy_(cache[:, :, source], non_blocking=True)  # async copy
            else:
                cache[:, :, dest].copy_(pool[-1 - source], non_blocking=True)
        self.num_copied_bytes += len(pairs) * self.block_nbytes
