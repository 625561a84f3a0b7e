"""The host tier's bookkeeping: which cached block (by hash) sits in which slot of the pinned
host pool, least recently used first. The bytes live with the model runner (execution/kv_swap.py);
here only slots are handed out, as the GPU's BlockManager hands out blocks."""

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class SwapCosts:
    """Whether a request's blocks in the host tier are worth copying back, or cheaper to compute
    again: both measured once at start (execution/kv_swap.py's swap_costs). A request whose
    blocks swap in waits one step for them (the copy overlaps the step), so loading n blocks
    costs n copies and a step; recomputing them costs their tokens' prefill."""

    load_s_per_block: float  # a block of a batched host -> device copy
    recompute_s_per_block: float  # a block's tokens in a full prefill step
    step_s: float  # a decode step at the largest batch

    @property
    def could_pay(self) -> bool:
        """Whether a long enough hit would load (else evicted blocks are not even offloaded)."""
        return self.load_s_per_block < self.recompute_s_per_block

    def loads_pay(self, num_blocks: int) -> bool:
        load_s = num_blocks * self.load_s_per_block + self.step_s
        return load_s < num_blocks * self.recompute_s_per_block


class HostBlockPool:
    def __init__(self, num_slots: int):
        assert num_slots > 0
        self.num_slots = num_slots
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # hash -> slot, LRU first
        self._free = list(range(num_slots - 1, -1, -1))  # pop() takes slot 0 first
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self._slots)

    def lookup(self, block_hash: bytes) -> int | None:
        return self._slots.get(block_hash)

    def touch(self, block_hash: bytes) -> None:
        """The block was just used: evicted last."""
        self._slots.move_to_end(block_hash)

    def store(self, block_hash: bytes) -> int | None:
        """A slot for this block's bytes (the least recently used one's when none is free), or
        None when the pool already holds it (nothing to copy)."""
        if block_hash in self._slots:
            self._slots.move_to_end(block_hash)
            return None
        if self._free:
            slot = self._free.pop()
        else:
            _, slot = self._slots.popitem(last=False)
            self.num_evicted += 1
        self._slots[block_hash] = slot
        return slot
