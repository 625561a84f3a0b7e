"""Paged KV cache bookkeeping: which blocks are free, which belong to which sequence.

The block tables live in one host array, a row per sequence that holds blocks, so the model
runner packs a step's tables with one fancy index instead of copying each sequence's list (at
batch 64 the per-sequence packing was the largest part of a launch's host work)."""

from collections import deque

import numpy as np

from pipeline.engine.scheduling.sequence import Sequence


class BlockManager:
    """Owns the free-block list and the block-table array (`tables[seq.block_row, :n]` are the
    sequence's blocks, n = seq.num_blocks; entries past n are stale). Touches no tensors."""

    caches_prefixes = False  # PrefixCachingBlockManager: blocks outlive their sequences

    def __init__(
        self, num_blocks: int, block_size: int, max_seqs: int = 1, max_blocks_per_seq: int = 1
    ):
        """max_seqs, max_blocks_per_seq: the array's first size; it grows past them if needed."""
        assert num_blocks > 0 and block_size > 0
        self.num_total_blocks = num_blocks
        self.block_size = block_size
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.tables = np.zeros((max(1, max_seqs), max(1, max_blocks_per_seq)), np.int64)
        self._free_rows = list(range(self.tables.shape[0] - 1, -1, -1))  # pop() takes row 0 first
        # beam search: blocks that forked beams share (block -> holders past the first), and
        # the block copies of their forks, (source, destination) in decision order
        self._extra_holders: dict[int, int] = {}
        self._copies: list[tuple[int, int]] = []

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def block_table(self, seq: Sequence) -> list[int]:
        return self.tables[seq.block_row, : seq.num_blocks].tolist() if seq.num_blocks else []

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Give the sequence's block table room for num_tokens K/V entries; False (and nothing
        taken) when too few blocks are free."""
        num_needed = -(-num_tokens // self.block_size)
        missing = num_needed - seq.num_blocks
        if missing <= 0:  # most calls: a decode token inside its last block, or blocks that
            return True  # guaranteed_no_evict reserved at admission
        if missing > self.num_free_blocks:
            return False
        if seq.block_row < 0:
            seq.block_row = self._take_row()
        if num_needed > self.tables.shape[1]:
            self._resize(self.tables.shape[0], max(num_needed, 2 * self.tables.shape[1]))
        take = self._take_block
        self.tables[seq.block_row, seq.num_blocks : num_needed] = [take() for _ in range(missing)]
        seq.num_blocks = num_needed
        return True

    def free(self, seq: Sequence) -> None:
        if seq.block_row < 0:
            return
        blocks = self.tables[seq.block_row, : seq.num_blocks].tolist()
        if self._extra_holders:  # forked beams: a shared block is free once its last holder ends
            blocks = [block for block in blocks if not self._release_shared(block)]
        self.free_block_ids.extend(blocks)
        self._free_rows.append(seq.block_row)
        seq.block_row, seq.num_blocks = -1, 0

    def hold(self, block: int) -> None:
        """One more sequence holds this block (a forked beam shares its parent's)."""
        self._extra_holders[block] = self._extra_holders.get(block, 0) + 1

    def ref_count(self, block: int) -> int:
        """How many sequences hold this block (blocks held by none: 0 or 1)."""
        return 1 + self._extra_holders.get(block, 0)

    def _release_shared(self, block: int) -> bool:
        """Drop one holder of a shared block: True when others still hold it."""
        extra = self._extra_holders.get(block, 0)
        if extra == 0:
            return False
        if extra == 1:
            del self._extra_holders[block]
        else:
            self._extra_holders[block] = extra - 1
        return True

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """Give child (holding no blocks) the parent's K/V: its full blocks shared, its partial
        last block copied into a new block (queued in the copies, run before the next step);
        False (nothing taken) when no block is free for the copy."""
        num_full, partial = divmod(parent.num_computed_tokens, self.block_size)
        if partial and not self.num_free_blocks:
            return False
        blocks = self.tables[parent.block_row, :num_full].tolist()
        for block in blocks:
            self.hold(block)
        if partial:
            block = self._take_block()
            self._copies.append((int(self.tables[parent.block_row, num_full]), block))
            blocks.append(block)
        child.block_row = self._take_row()
        self.tables[child.block_row, : len(blocks)] = blocks
        child.num_blocks = len(blocks)
        return True

    @property
    def has_copies(self) -> bool:
        """Copies wait for the next step (a beam request's forks, even if it ended since)."""
        return bool(self._copies)

    def take_copies(self) -> np.ndarray | None:
        """The block copies decided since last taken ([N, 2] (source, destination)), or None."""
        if not self._copies:
            return None
        copies = np.array(self._copies, np.int64)
        copies.flags.writeable = False
        self._copies = []
        return copies

    def _take_block(self) -> int:
        return self.free_block_ids.popleft()

    def _take_row(self) -> int:
        if not self._free_rows:
            num_rows = self.tables.shape[0]
            self._resize(2 * num_rows, self.tables.shape[1])
            self._free_rows = list(range(2 * num_rows - 1, num_rows - 1, -1))
        return self._free_rows.pop()

    def _resize(self, num_rows: int, width: int) -> None:
        tables = np.zeros((num_rows, width), np.int64)
        rows, cols = self.tables.shape
        tables[:rows, :cols] = self.tables
        self.tables = tables
