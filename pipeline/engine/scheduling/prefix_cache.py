"""Prefix caching: full KV blocks outlive their sequence, named by a hash chain over their tokens,
so a request that starts with the same tokens reuses them instead of computing them again.

After vLLM v1's KVCacheManager and BlockPool (vllm/v1/core/kv_cache_manager.py, block_pool.py):
- block i of a sequence is named h_i = H(h_{i-1}, its block_size tokens), h_-1 = H(the KV dtype,
  the block size, seq.kv_extra_key): the name covers everything before it, so equal names mean
  equal K/V (a LoRA adapter changes K/V: kv_extra_key keeps its blocks apart). H is a 128-bit
  blake2b digest, not Python's hash(): a 64-bit name that PYTHONHASHSEED can fix would let a
  prompt be crafted to collide with another's blocks (vLLM moved off hash() for that reason);
- a block is cached once its tokens are all on the host and their K/V computed (written, or
  queued on the device before any step that reads it). Only the first block a sequence computes
  is named then; the blocks it computes after that wait in its Tail, attached to that named
  block, and are named when a lookup reaches the block the tail hangs from (or when the host
  tier needs their names). Most prompts are never shared, and a name costs the engine thread
  a hash a block (the block manager's added work for 512 unique 128/128 requests: 28.7 us a
  request with every block named, 13.5 named on demand, on a 2-core host,
  scripts/bench_prefix_bookkeeping.py). Two sequences that computed the same block keep the
  first's name; the second's block stays unnamed and is freed as usual;
- blocks are reference-counted; one whose last holder ends stays named but free ("evictable"),
  least recently freed first (a sequence's last blocks before its first: they are the least
  likely shared). A new block is taken from the unnamed free blocks first and only then by
  evicting the least recently used named one;
- a new request takes its longest named prefix, never its last prompt token (a step must
  compute it to sample), so a shared block is never written again.

Host tier (num_host_blocks > 0): a named block's bytes are copied to a host pool slot
(HostBlockPool, LRU too) when its last holder frees it, so its eviction later needs no copy
(unless the pool dropped it meanwhile); a request whose prefix continues there gets those blocks
copied back into new GPU blocks, and runs from the step after the copy (swaps_in); SwapCosts
decides whether copying back pays at all. The copies are (source, destination) pairs, a host
slot k written -1 - k, in the order decided; the scheduler hands them to the runner in
SchedulerOutput.blocks_to_copy, which performs them as if in that order before the step's
forward (so a block evicted and reloaded in one step, or a slot reused, reads what the order
says).
"""

import hashlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.engine.scheduling.sequence import Sequence


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


class TokenChain:
    """What names a freed sequence's tail: its tokens and hash chain (lists it only ever
    appends to), without the rest of the request (its sampler state, grammar, outputs)."""

    __slots__ = ("token_ids", "block_hashes", "kv_extra_key", "kv_tail")

    def __init__(self, seq: Sequence):
        self.token_ids = seq.token_ids
        self.block_hashes = seq.block_hashes
        self.kv_extra_key = seq.kv_extra_key
        self.kv_tail = None


class Tail:
    """A sequence's cached blocks past its last named one: blocks[j] is its block start + j,
    named from the sequence's tokens when a lookup reaches head (the named GPU block before
    them). A freed sequence's tail blocks stay evictable; evicting one cuts the tail there."""

    __slots__ = ("seq", "start", "head", "blocks")

    def __init__(self, seq: Sequence, start: int, head: int):
        self.seq: Sequence | TokenChain = seq  # a TokenChain once the sequence is freed
        self.start = start
        self.head = head
        self.blocks: list[int] = []


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
        swap_costs: SwapCosts | None = None,
    ):
        super().__init__(num_blocks, block_size, max_seqs, max_blocks_per_seq)
        self._root = hashlib.blake2b(f"{kv_dtype}/{block_size}".encode(), digest_size=16)
        self._root_digest = self._root.digest()
        self.ref_counts = [0] * num_blocks
        self.block_hashes: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}  # name -> GPU block
        # unheld blocks, named or in a freed sequence's tail; least recently freed first
        self.evictable: OrderedDict[int, None] = OrderedDict()
        self._tails: dict[int, list[Tail]] = {}  # named GPU block -> the tails that hang from it
        # a freed sequence's tail block -> its tail and its index there
        self._tail_of: dict[int, tuple[Tail, int]] = {}
        self._num_tail_blocks = 0
        self.host = HostBlockPool(num_host_blocks) if num_host_blocks else None
        self.swap_costs = swap_costs  # None: every host hit is loaded
        # a block whose copy costs more than its tokens' prefill is never worth keeping
        self._offloads = swap_costs is None or swap_costs.could_pay
        self._copies: list[tuple[int, int]] = []
        self._loading: set[int] = set()  # GPU blocks whose loads go with the next launch
        # names of the blocks this step's prompt chunks complete -> the sequence computing them
        self._computing: dict[bytes, Sequence] = {}
        self.num_queried_tokens = self.num_hit_tokens = 0
        self.num_host_hit_blocks = self.num_offloaded_blocks = self.num_evicted_blocks = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids) + len(self.evictable)

    def _hash(self, seq: Sequence | TokenChain, index: int) -> bytes:
        """Name of the sequence's block `index` (its tokens must be known)."""
        hashes = seq.block_hashes
        if index < len(hashes):
            return hashes[index]
        if hashes:
            parent = hashes[-1]
        elif seq.kv_extra_key is None:
            parent = self._root_digest
        else:
            root = self._root.copy()
            root.update(repr(seq.kv_extra_key).encode())
            parent = root.digest()
        # the new blocks' tokens as bytes in one conversion, then a hash a block
        size, blake2b = self.block_size, hashlib.blake2b
        data = array("q", seq.token_ids[len(hashes) * size : (index + 1) * size]).tobytes()
        step = 8 * size
        for start in range(0, len(data), step):
            parent = blake2b(parent + data[start : start + step], digest_size=16).digest()
            hashes.append(parent)
        return parent

    def find_prefix(self, seq: Sequence) -> PrefixHit:
        """The cached blocks that start this sequence, each on the GPU or else in the host tier
        (no side effects but naming the tails it reaches); never its last known token's."""
        hit = []
        for i in range((len(seq.token_ids) - 1) // self.block_size):
            block_hash = self._hash(seq, i)
            block = self.cached.get(block_hash)
            if block is not None and block in self._tails:
                for tail in self._tails.pop(block):
                    self._name_tail(tail)
            if block is None and self.host is not None:
                slot = self.host.lookup(block_hash)
                block = None if slot is None else host_slot_ref(slot)
            if block is None:
                break
            hit.append(block)
        costs = self.swap_costs
        first_host = next((i for i, block in enumerate(hit) if block < 0), None)
        if costs is not None and first_host is not None:
            if not costs.loads_pay(sum(1 for block in hit if block < 0)):
                return hit[:first_host]  # cheaper to compute them again
        return hit

    def computes(self, seq: Sequence, num_tokens: int) -> None:
        """This step runs num_tokens of the sequence's known tokens: the blocks they complete
        are named after its launch (cache_launched), and a request that continues into them
        meanwhile waits for that rather than computing them too."""
        size = self.block_size
        end = min(seq.num_computed_tokens + num_tokens, len(seq.token_ids)) // size
        start = max(seq.num_computed_tokens // size, seq.num_cached_blocks)
        # a request sharing this chunk's blocks misses first at its first block, so that name
        # alone is registered; known already unless an unnamed tail comes before it (then
        # the rare request admitted beside it computes the blocks too)
        if start < end and (start < len(seq.block_hashes) or seq.kv_tail is None):
            self._computing[self._hash(seq, start)] = seq

    def is_being_computed(self, seq: Sequence, hit: PrefixHit) -> bool:
        """Whether the block after this hit is one that another sequence computes this step
        and this one could take (never its last known token's)."""
        hashes, i = seq.block_hashes, len(hit)
        if not self._computing or i >= min(
            len(hashes), (len(seq.token_ids) - 1) // self.block_size
        ):
            return False
        owner = self._computing.get(hashes[i])
        return owner is not None and owner is not seq and owner.block_row >= 0

    def swaps_in(self, hit: PrefixHit) -> bool:
        """Whether taking this hit loads blocks from the host tier, or reads blocks still being
        loaded: such a request runs from the step after the launch that carries the copies."""
        loading = self._loading
        return any(block < 0 or block in loading for block in hit)

    def grow_from_prefix(self, seq: Sequence, num_tokens: int, hit: PrefixHit) -> bool:
        """grow() for a sequence that holds no blocks, its table starting with the hit's
        blocks (its num_computed_tokens already past them); False (nothing taken) when too few
        blocks are free."""
        if not hit:  # most requests of unique prompts: nothing to take
            if not self.grow(seq, num_tokens):
                return False
            self.num_queried_tokens += len(seq.token_ids)
            return True
        needed = -(-num_tokens // self.block_size)
        on_gpu = [block for block in hit if block >= 0]
        # unheld hit blocks count as free, but taking them frees nothing
        unheld = sum(1 for block in on_gpu if self.ref_counts[block] == 0)
        if needed - len(on_gpu) > self.num_free_blocks - unheld:
            return False
        self.num_queried_tokens += len(seq.token_ids)
        self.num_hit_tokens += len(hit) * self.block_size
        for block in on_gpu:  # held first: loading the others must not evict them
            if self.ref_counts[block] == 0:
                del self.evictable[block]
            self.ref_counts[block] += 1
        blocks = []
        for i, block in enumerate(hit):
            if block < 0:  # a host slot's bytes into a new GPU block
                source, block = block, self._take_block()
                self._copies.append((source, block))
                self._loading.add(block)
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

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """BlockManager.fork with the parent's tail named first: blocks in a tail are the
        parent's alone (a forked beam shares them)."""
        if parent.kv_tail is not None:
            self._name_tail(parent.kv_tail)
            child.block_hashes = list(parent.block_hashes)
        return super().fork(parent, child)

    def ref_count(self, block: int) -> int:
        return self.ref_counts[block]

    def _take_block(self) -> int:
        block = super()._take_block() if self.free_block_ids else self._evict()
        self.ref_counts[block] = 1
        return block

    def _evict(self) -> int:
        block, _ = self.evictable.popitem(last=False)
        self.num_evicted_blocks += 1
        block_hash = self.block_hashes[block]
        if block_hash is None:  # a freed sequence's tail block: its tail ends before it
            in_tail = self._tail_of.pop(block, None)
            if in_tail is not None:  # (the blocks past a cut are plain free ones)
                self._cut_tail(*in_tail)
            return block
        del self.cached[block_hash]
        self.block_hashes[block] = None
        for tail in self._tails.pop(block, ()):  # no lookup can reach them any more
            self._cut_tail(tail, 0)
        self._offload(block, block_hash)  # usually a no-op: copied when it was freed
        return block

    def _cut_tail(self, tail: Tail, index: int) -> None:
        """Drop the tail's blocks from index on: unnamed, they are plain evictable blocks."""
        dropped = tail.blocks[index:]
        for block in dropped:
            self._tail_of.pop(block, None)
        del tail.blocks[index:]
        self._num_tail_blocks -= len(dropped)
        if not tail.blocks:
            self._detach(tail)

    def _detach(self, tail: Tail) -> None:
        tails = self._tails.get(tail.head)
        if tails is not None and tail in tails:
            tails.remove(tail)
            if not tails:
                del self._tails[tail.head]
        if tail.seq.kv_tail is tail:
            tail.seq.kv_tail = None

    def _name_tail(self, tail: Tail) -> None:
        """Name the tail's blocks (detached from its head already, or detached here)."""
        self._detach(tail)
        if not tail.blocks:
            return
        end = tail.start + len(tail.blocks)
        self._hash(tail.seq, end - 1)  # the names in one pass
        names, cached, tail_of = self.block_hashes, self.cached, self._tail_of
        for block, block_hash in zip(
            tail.blocks, tail.seq.block_hashes[tail.start : end], strict=True
        ):
            tail_of.pop(block, None)
            if block_hash not in cached:  # else another block holds the same K/V
                names[block] = block_hash
                cached[block_hash] = block
        self._num_tail_blocks -= len(tail.blocks)
        tail.blocks = []

    def _offload(self, block: int, block_hash: bytes) -> None:
        """Copy a named block to the host tier unless it holds it already."""
        if self.host is not None and self._offloads:
            slot = self.host.store(block_hash)
            if slot is not None:
                self._copies.append((block, host_slot_ref(slot)))
                self.num_offloaded_blocks += 1

    def cache_launched(self, batch: SchedulerOutput) -> None:
        """cache_blocks() for a launch's rows that fed more than one token (prompt chunks,
        verify steps): a decode row's blocks are named when its sequence ends or is preempted,
        so a decode step costs no Python per row here."""
        rows = np.flatnonzero(batch.num_tokens > 1).tolist()
        if rows:
            seqs = batch.seqs
            self.cache_blocks([seqs[row] for row in rows])
        self._computing.clear()

    def cache_blocks(self, seqs) -> None:
        """Name the blocks these sequences have filled since last asked (their tokens on the
        host, their K/V computed; past max_kv_tokens a launch's decode rows write no block)."""
        size, tables = self.block_size, self.tables
        for seq in seqs:
            num_full = min(seq.num_computed_tokens, len(seq.token_ids), seq.max_kv_tokens) // size
            first = seq.num_cached_blocks
            if num_full <= first:
                continue
            blocks = tables[seq.block_row, first:num_full].tolist()
            tail = seq.kv_tail
            if tail is None:  # the first new block is named; the others wait in its tail
                block_hash = self._hash(seq, first)
                head = self.cached.get(block_hash)
                if head is None:
                    head = blocks[0]
                    self._name(head, block_hash)
                del blocks[0]
                if blocks:
                    tail = seq.kv_tail = Tail(seq, first + 1, head)
                    self._tails.setdefault(head, []).append(tail)
            if blocks:
                tail.blocks += blocks
                self._num_tail_blocks += len(blocks)
            seq.num_cached_blocks = num_full

    def free(self, seq: Sequence) -> None:
        """Release the sequence's blocks: its full ones stay named (evictable once unheld)."""
        if seq.block_row < 0:
            return
        self.cache_blocks((seq,))
        ref_counts, names, evictable = self.ref_counts, self.block_hashes, self.evictable
        offloads = self.host is not None and self._offloads
        tail = seq.kv_tail
        if tail is not None and offloads:  # the host tier keeps blocks by name
            self._name_tail(tail)
            tail = None
        # its tail's blocks (held by it alone: unnamed blocks are never shared) stay evictable
        start, end = (tail.start, tail.start + len(tail.blocks)) if tail else (0, 0)
        blocks = self.tables[seq.block_row, : seq.num_blocks].tolist()
        for i in range(len(blocks) - 1, -1, -1):
            block = blocks[i]
            ref_counts[block] -= 1
            if ref_counts[block] == 0:
                if start <= i < end:
                    evictable[block] = None
                    self._tail_of[block] = (tail, i - start)
                elif names[block] is None:
                    self.free_block_ids.append(block)
                else:  # to the host tier now, while no step writes it: its eviction waits not
                    evictable[block] = None
                    if offloads:
                        self._offload(block, names[block])
        self._free_rows.append(seq.block_row)
        seq.block_row, seq.num_blocks, seq.num_cached_blocks = -1, 0, 0
        if tail is not None:
            tail.seq = TokenChain(seq)
        seq.kv_tail = None

    def take_copies(self) -> np.ndarray | None:
        copies = super().take_copies()
        self._loading.clear()
        return copies

    def stats(self) -> dict:
        host = self.host
        values = (
            len(self.cached) + self._num_tail_blocks,
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
