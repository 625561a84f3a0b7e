"""Prefix caching: full KV blocks outlive their sequence, named by a hash chain over their tokens,
so a request that starts with the same tokens reuses them instead of computing them again.

After vLLM v1's KVCacheManager and BlockPool (vllm/v1/core/kv_cache_manager.py, block_pool.py):
- block i of a sequence is named h_i = H(h_{i-1}, its block_size tokens), h_-1 = H(the KV dtype,
  the block size, seq.kv_extra_key): the name covers everything before it, so equal names mean
  equal K/V (a LoRA adapter changes K/V: kv_extra_key keeps its blocks apart);
- a block is named once its tokens are all on the host and their K/V computed (written, or queued
  on the device before any step that reads it); two sequences that computed the same block keep
  the first's name, the second's block stays unnamed and is freed as usual;
- blocks are reference-counted; one whose last holder ends stays named but free ("evictable"),
  least recently freed first (a sequence's last blocks before its first: they are the least
  likely shared). A new block is taken from the unnamed free blocks first and only then by
  evicting the least recently used named one;
- a new request takes its longest named prefix, never its last prompt token (a step must
  compute it to sample), so a shared block is never written again.

Host tier (num_host_blocks > 0): an evicted block's bytes are first copied to a host pool slot
(HostBlockPool, LRU too); a request whose prefix continues there gets those blocks copied back
into new GPU blocks. The copies are (source, destination) pairs, a host slot k written -1 - k,
in the order decided; the scheduler hands them to the runner in SchedulerOutput.blocks_to_copy,
which performs them in that order before the step's forward (so a block evicted and reloaded in
one step, or a slot reused, reads what the order says).
"""

import hashlib
from array import array
from collections import OrderedDict

import numpy as np

from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.host_block_pool import HostBlockPool
from pipeline.engine.scheduling.sequence import Sequence


def host_slot_ref(slot: int) -> int:
    """A host slot as a blocks_to_copy entry or a prefix hit's (GPU blocks are >= 0)."""
    return -1 - slot


# a sequence's first blocks found named: a GPU block, or host_slot_ref of a host-tier slot
PrefixHit = list[int]
STATS = (
    "num_cached_blocks",
    "num_prefix_queried_tokens",
    "num_prefix_hit_tokens",
    "num_evicted_blocks",
    "num_host_blocks",
    "num_host_cached_blocks",
    "num_host_hit_blocks",
    "num_offloaded_blocks",
)


class PrefixCachingBlockManager(BlockManager):
    caches_prefixes = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_seqs: int = 1,
        max_blocks_per_seq: int = 1,
        kv_dtype: str = "",
        num_host_blocks: int = 0,
    ):
        super().__init__(num_blocks, block_size, max_seqs, max_blocks_per_seq)
        self._root = hashlib.blake2b(f"{kv_dtype}/{block_size}".encode(), digest_size=16)
        self.ref_counts = [0] * num_blocks
        self.block_hashes: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}  # name -> GPU block
        self.evictable: OrderedDict[int, None] = OrderedDict()  # named, unheld; LRU first
        self.host = HostBlockPool(num_host_blocks) if num_host_blocks else None
        self._copies: list[tuple[int, int]] = []
        self.num_queried_tokens = self.num_hit_tokens = 0
        self.num_host_hit_blocks = self.num_offloaded_blocks = self.num_evicted_blocks = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids) + len(self.evictable)

    def _hash(self, seq: Sequence, index: int) -> bytes:
        """Name of the sequence's block `index` (its tokens must be known)."""
        hashes = seq.block_hashes
        if index < len(hashes):
            return hashes[index]
        size, tokens = self.block_size, seq.token_ids
        if hashes:
            parent = hashes[-1]
        else:
            root = self._root.copy()
            if seq.kv_extra_key is not None:
                root.update(repr(seq.kv_extra_key).encode())
            parent = root.digest()
        for i in range(len(hashes), index + 1):
            block = array("q", tokens[i * size : (i + 1) * size]).tobytes()
            parent = hashlib.blake2b(parent + block, digest_size=16).digest()
            hashes.append(parent)
        return parent

    def find_prefix(self, seq: Sequence) -> PrefixHit:
        """The named blocks that start this sequence, each on the GPU or else in the host tier
        (no side effects); never its last known token's."""
        hit = []
        for i in range((len(seq.token_ids) - 1) // self.block_size):
            block_hash = self._hash(seq, i)
            block = self.cached.get(block_hash)
            if block is None and self.host is not None:
                slot = self.host.lookup(block_hash)
                block = None if slot is None else host_slot_ref(slot)
            if block is None:
                break
            hit.append(block)
        return hit

    def grow_from_prefix(self, seq: Sequence, num_tokens: int, hit: PrefixHit) -> bool:
        """grow() for a sequence that holds no blocks, its table starting with the hit's
        blocks (its num_computed_tokens already past them); False (nothing taken) when too few
        blocks are free."""
        needed = -(-num_tokens // self.block_size)
        on_gpu = [block for block in hit if block >= 0]
        # unheld hit blocks count as free, but taking them frees nothing
        unheld = sum(1 for block in on_gpu if self.ref_counts[block] == 0)
        if needed - len(on_gpu) > self.num_free_blocks - unheld:
            return False
        self.num_queried_tokens += len(seq.token_ids)
        self.num_hit_tokens += len(hit) * self.block_size
        if hit:
            for block in on_gpu:  # held first: loading the others must not evict them
                if self.ref_counts[block] == 0:
                    del self.evictable[block]
                self.ref_counts[block] += 1
            blocks = []
            for i, block in enumerate(hit):
                if block < 0:  # a host slot's bytes into a new GPU block
                    source, block = block, self._take_block()
                    self._copies.append((source, block))
                    block_hash = self._hash(seq, i)
                    self.host.touch(block_hash)
                    self._name(block, block_hash)
                    self.num_host_hit_blocks += 1
                blocks.append(block)
            seq.block_row = self._take_row()
            if len(hit) > self.tables.shape[1]:
                self._resize(self.tables.shape[0], max(len(hit), 2 * self.tables.shape[1]))
            self.tables[seq.block_row, : len(hit)] = blocks
            seq.num_blocks = seq.num_cached_blocks = len(hit)
        return self.grow(seq, num_tokens)

    def _name(self, block: int, block_hash: bytes) -> None:
        self.block_hashes[block] = block_hash
        self.cached[block_hash] = block

    def hold(self, block: int) -> None:
        self.ref_counts[block] += 1

    def ref_count(self, block: int) -> int:
        return self.ref_counts[block]

    def _take_block(self) -> int:
        block = super()._take_block() if self.free_block_ids else self._evict()
        self.ref_counts[block] = 1
        return block

    def _evict(self) -> int:
        block, _ = self.evictable.popitem(last=False)
        block_hash = self.block_hashes[block]
        del self.cached[block_hash]
        self.block_hashes[block] = None
        self.num_evicted_blocks += 1
        if self.host is not None:
            slot = self.host.store(block_hash)
            if slot is not None:
                self._copies.append((block, host_slot_ref(slot)))
                self.num_offloaded_blocks += 1
        return block

    def cache_blocks(self, seqs) -> None:
        """Name the blocks these sequences have filled since last asked (their tokens on the
        host, their K/V computed; past max_kv_tokens a launch's decode rows write no block)."""
        size, tables = self.block_size, self.tables
        for seq in seqs:
            num_full = min(seq.num_computed_tokens, len(seq.token_ids), seq.max_kv_tokens) // size
            if num_full <= seq.num_cached_blocks:
                continue
            row = tables[seq.block_row]
            for i in range(seq.num_cached_blocks, num_full):
                block, block_hash = int(row[i]), self._hash(seq, i)
                if self.block_hashes[block] is None and block_hash not in self.cached:
                    self._name(block, block_hash)
            seq.num_cached_blocks = num_full

    def free(self, seq: Sequence) -> None:
        """Release the sequence's blocks: its full ones stay named (evictable once unheld)."""
        if seq.block_row < 0:
            return
        self.cache_blocks((seq,))
        for block in reversed(self.tables[seq.block_row, : seq.num_blocks].tolist()):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if self.block_hashes[block] is None:
                    self.free_block_ids.append(block)
                else:
                    self.evictable[block] = None
        self._free_rows.append(seq.block_row)
        seq.block_row, seq.num_blocks, seq.num_cached_blocks = -1, 0, 0

    def take_copies(self) -> np.ndarray | None:
        """The block copies decided since last taken ([N, 2] (source, destination)), or None."""
        if not self._copies:
            return None
        copies = np.array(self._copies, np.int64)
        copies.flags.writeable = False
        self._copies = []
        return copies

    def stats(self) -> dict:
        host = self.host
        values = (
            len(self.cached),
            self.num_queried_tokens,
            self.num_hit_tokens,
            self.num_evicted_blocks,
            0 if host is None else host.num_slots,
            0 if host is None else len(host),
            self.num_host_hit_blocks,
            self.num_offloaded_blocks,
        )
        return dict(zip(STATS, values, strict=True))


def prefix_cache_stats(block_manager: BlockManager) -> dict:
    """The engine's prefix-cache counters (all 0 with caching off)."""
    if isinstance(block_manager, PrefixCachingBlockManager):
        return block_manager.stats()
    return dict.fromkeys(STATS, 0)
