"""The host tier's bytes: a pool of KV blocks in pinned host memory, and the copies between it
and the device's KV cache that the scheduler decides (scheduling/prefix_cache.py).

A launch's copies are (source, destination) pairs in the order decided, a GPU block >= 0, a host
slot k as -1 - k. They move in batches, one a direction: the offloads' blocks gathered on the
device by one index into a contiguous buffer, then copied to their slots with one copy per run
of consecutive slots; the loads' slots copied into a device buffer the same way, then put into
their blocks by one index. A batch runs its offloads before its loads (a block evicted and
refilled in one step is read before it is written); a pair that would break the order decided
(a load's slot or block that a later offload reuses, a block loaded twice) starts a new batch.

On CUDA the batches run on a copy stream that first waits for the work queued before them (the
blocks' K/V may still be being written). The compute stream waits for them at once when the
launch reads or writes any of their GPU blocks, else only after the launch's forward is queued
(settle()), and they overlap the step's compute: a freed block is offloaded while no step
writes it, and the scheduler runs a request one step after its swap-in. The host never touches
the pool's bytes, so nothing waits on the host. On the CPU the same functions run as plain
copies in order.

Each slot holds one block of every layer this rank serves, contiguous: [layers, 2, block_size,
kv_heads, head_dim] as raw bytes (an FP8 cache's codes copy as they are)."""

import math

import numpy as np
import torch

from pipeline.engine.execution.cuda_graph_runner import CudaGraphRunner
from pipeline.engine.execution.launch_channel import SWAP, LaunchChannel
from pipeline.engine.scheduling.prefix_cache import SwapCosts
from pipeline.errors import ConfigError

# the most a batch's device buffer holds at once (a copy of more blocks goes in pieces): a step
# that swaps in many requests' prefixes must not need GPU memory the KV cache was sized into
STAGING_BYTES = 256 * 2**20
# a batch of copies: (offloads [k, 2] (block, slot), loads [m, 2] (slot, block)), slots as >= 0
CopyBatch = tuple[np.ndarray, np.ndarray]


def host_blocks(host_bytes: int, kv_cache: torch.Tensor) -> int:
    """How many blocks of this cache ([layers, 2, blocks, ...]) host_bytes hold."""
    return int(host_bytes // (kv_cache.nbytes // kv_cache.shape[2]))


def swap_costs(
    tier: "HostKVTier | None", graphs: CudaGraphRunner | None, block_size: int
) -> SwapCosts | None:
    """The host tier's copy-or-recompute costs, timed on this device (None without the tier or
    mixed-step CUDA graphs: every host hit is loaded)."""
    if tier is None or graphs is None or not graphs.token_counts:
        return None
    return SwapCosts(
        load_s_per_block=tier.load_s_per_block(),
        recompute_s_per_block=block_size / graphs.prefill_tokens_per_s(),
        step_s=graphs.decode_ms() / 1e3,
    )


def copy_batches(pairs: np.ndarray) -> list[CopyBatch]:
    """The pairs as batches that keep the order decided when each runs offloads, then loads."""
    batches: list[CopyBatch] = []
    offloads: list[tuple[int, int]] = []
    loads: list[tuple[int, int]] = []
    load_slots: set[int] = set()
    load_blocks: set[int] = set()
    for source, dest in pairs.tolist():
        if dest < 0:  # an offload would run before the batch's loads: it must not touch them
            block, slot = source, -1 - dest
            if block in load_blocks or slot in load_slots:
                batches.append(_batch(offloads, loads))
                offloads, loads, load_slots, load_blocks = [], [], set(), set()
            offloads.append((block, slot))
        else:
            slot, block = -1 - source, dest
            if block in load_blocks:
                batches.append(_batch(offloads, loads))
                offloads, loads, load_slots, load_blocks = [], [], set(), set()
            loads.append((slot, block))
            load_slots.add(slot)
            load_blocks.add(block)
    if offloads or loads:
        batches.append(_batch(offloads, loads))
    return batches


def _batch(offloads: list[tuple[int, int]], loads: list[tuple[int, int]]) -> CopyBatch:
    return np.array(offloads, np.int64).reshape(-1, 2), np.array(loads, np.int64).reshape(-1, 2)


def slot_runs(slots: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, first slot) of each run of consecutive slots: one copy each."""
    breaks = (np.flatnonzero(np.diff(slots) != 1) + 1).tolist()
    starts, ends = [0, *breaks], [*breaks, len(slots)]
    return [(a, b, int(slots[a])) for a, b in zip(starts, ends, strict=True)]


class HostKVTier:
    def __init__(self, kv_cache: torch.Tensor, num_slots: int):
        layers, kv, _, *block = kv_cache.shape
        self._cache = kv_cache.view(torch.uint8)  # the last dim in bytes
        self._blocks = self._cache.movedim(2, 0)  # [blocks, layers, 2, ...]: a block a row
        self.device = kv_cache.device
        self.is_cuda = self.device.type == "cuda"
        shape = (num_slots, layers, kv, *block[:-1], self._cache.shape[-1])
        try:
            self.pool = torch.empty(shape, dtype=torch.uint8, pin_memory=self.is_cuda)
        except RuntimeError as exc:
            raise ConfigError(
                f"engine: host_kv_cache_gb asks for {math.prod(shape) / 2**30:.1f} GiB of "
                f"{'pinned ' if self.is_cuda else ''}host memory, which failed ({exc}); lower "
                f"host_kv_cache_gb"
            ) from exc
        self._stream = torch.cuda.Stream(self.device) if self.is_cuda else None
        self._copied: torch.cuda.Event | None = None  # copies the next launch waits for
        self.num_copied_bytes = 0
        self.num_batches = 0
        # CUDA: (start, end, bytes) of each batch, while timed (the bench's GB/s per batch)
        self.timed = False
        self._timings: list[tuple[torch.cuda.Event, torch.cuda.Event, int]] = []

    @property
    def block_nbytes(self) -> int:
        return self.pool[0].nbytes

    def copy(
        self,
        pairs: np.ndarray,
        channel: LaunchChannel | None = None,
        reads: np.ndarray | None = None,
    ) -> None:
        """Run the (source, destination) copies in order, before anything queued after that
        reads or writes their blocks. reads: the blocks the launch's steps read and write (their
        block tables); copies that touch none of them are waited for only after the launch
        (settle()). The driver of several ranks first sends them to the others (their
        receive() runs them)."""
        gpu_blocks = np.where(pairs[:, 1] < 0, pairs[:, 0], pairs[:, 1])
        defer = reads is not None and not np.isin(gpu_blocks, reads).any()
        if channel is not None:
            body = np.concatenate(([int(defer)], pairs.reshape(-1)))
            channel.send(SWAP, [], torch.from_numpy(body))
        self._run(pairs, defer)

    def receive(self, body: torch.Tensor) -> None:
        """Another rank: run the driver's copies (copy()'s message)."""
        values = body.numpy()
        self._run(values[1:].reshape(-1, 2), bool(values[0]))

    def settle(self) -> None:
        """After a launch's forward is queued: what comes after waits for the copies it let run
        beside it."""
        if self._copied is not None:
            torch.cuda.current_stream(self.device).wait_event(self._copied)
            self._copied = None

    def _run(self, pairs: np.ndarray, defer: bool) -> None:
        batches = copy_batches(pairs)
        if not batches:
            return
        if self._stream is None:
            for offloads, loads in batches:
                self._offload(offloads)
                self._load(loads)
            return
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            for offloads, loads in batches:
                start = self._record()
                self._offload(offloads)
                self._load(loads)
                self._timing(start, len(offloads) + len(loads))
        done = self._stream.record_event()
        if defer:
            self._copied = done
        else:
            current.wait_event(done)

    def _chunks(self, pairs: np.ndarray) -> list[np.ndarray]:
        """The pairs in runs of at most STAGING_BYTES of blocks (the device buffer's size)."""
        step = max(1, STAGING_BYTES // self.block_nbytes)
        return [pairs[i : i + step] for i in range(0, len(pairs), step)]

    def _offload(self, offloads: np.ndarray) -> None:
        for chunk in self._chunks(offloads):
            blocks = torch.from_numpy(np.ascontiguousarray(chunk[:, 0])).to(
                self.device, non_blocking=True
            )
            gathered = self._blocks.index_select(0, blocks)  # [k, layers, 2, ...] contiguous
            for a, b, slot in slot_runs(chunk[:, 1]):
                self.pool[slot : slot + b - a].copy_(gathered[a:b], non_blocking=True)
        self.num_copied_bytes += len(offloads) * self.block_nbytes
        self.num_batches += bool(len(offloads))

    def _load(self, loads: np.ndarray) -> None:
        for chunk in self._chunks(loads):
            staging = torch.empty(
                (len(chunk), *self.pool.shape[1:]), dtype=torch.uint8, device=self.device
            )
            for a, b, slot in slot_runs(chunk[:, 0]):
                staging[a:b].copy_(self.pool[slot : slot + b - a], non_blocking=True)
            blocks = torch.from_numpy(np.ascontiguousarray(chunk[:, 1])).to(
                self.device, non_blocking=True
            )
            self._blocks.index_copy_(0, blocks, staging)
        self.num_copied_bytes += len(loads) * self.block_nbytes
        self.num_batches += bool(len(loads))

    def _record(self) -> torch.cuda.Event | None:
        if not self.timed:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(self._stream)
        return event

    def _timing(self, start: torch.cuda.Event | None, num_blocks: int) -> None:
        if start is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record(self._stream)
            self._timings.append((start, end, num_blocks * self.block_nbytes))

    def load_s_per_block(self, num_blocks: int = 32) -> float:
        """Seconds a block of a batched load takes (CUDA; timed once, at start)."""
        num_blocks = min(num_blocks, self.pool.shape[0])
        staging = torch.empty_like(self.pool[:num_blocks], device=self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        staging.copy_(self.pool[:num_blocks], non_blocking=True)  # warm
        start.record()
        staging.copy_(self.pool[:num_blocks], non_blocking=True)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / num_blocks

    def batch_gb_s(self) -> list[float]:
        """GB/s of each batch timed since last asked (waits for them; CUDA, while timed)."""
        if self._timings:
            self._timings[-1][1].synchronize()
        rates = [n / (s.elapsed_time(e) / 1e3) / 1e9 for s, e, n in self._timings]
        self._timings = []
        return rates
