"""Paged KV cache bookkeeping: which blocks are free, which belong to which sequence."""

from collections import deque

from pipeline.engine.sequence import Sequence


class BlockManager:
    """Owns the free-block list; writes each sequence's block_table. Touches no tensors."""

    def __init__(self, num_blocks: int, block_size: int):
        assert num_blocks > 0 and block_size > 0
        self.num_total_blocks = num_blocks
        self.block_size = block_size
        self.free_block_ids: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def holds(self, seq: Sequence, num_tokens: int) -> bool:
        """Whether the sequence's blocks already hold num_tokens K/V entries."""
        return len(seq.block_table) * self.block_size >= num_tokens

    def _num_missing_blocks(self, seq: Sequence, num_tokens: int) -> int:
        return max(0, self.num_blocks_for(num_tokens) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Whether the sequence's block table can grow to hold num_tokens K/V entries."""
        return self._num_missing_blocks(seq, num_tokens) <= len(self.free_block_ids)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        missing = self._num_missing_blocks(seq, num_tokens)
        assert missing <= len(self.free_block_ids), "allocate() without can_allocate()"
        seq.block_table.extend(self.free_block_ids.popleft() for _ in range(missing))

    def can_append(self, seq: Sequence) -> bool:
        """Room for one more token's K/V (a decode step)."""
        return self.can_allocate(seq, seq.num_computed_tokens + 1)

    def may_append(self, seq: Sequence) -> None:
        """Take a new block when the decode token starts one."""
        self.allocate(seq, seq.num_computed_tokens + 1)

    def free(self, seq: Sequence) -> None:
        self.free_block_ids.extend(seq.block_table)
        seq.block_table = []
