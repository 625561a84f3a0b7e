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

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Give the sequence's block table room for num_tokens K/V entries; False (and nothing
        taken) when too few blocks are free."""
        missing = -(-num_tokens // self.block_size) - len(seq.block_table)
        if missing <= 0:  # most calls: a decode token inside its last block, or blocks that
            return True  # guaranteed_no_evict reserved at admission
        if missing > len(self.free_block_ids):
            return False
        seq.block_table.extend(self.free_block_ids.popleft() for _ in range(missing))
        return True

    def free(self, seq: Sequence) -> None:
        self.free_block_ids.extend(seq.block_table)
        seq.block_table = []
