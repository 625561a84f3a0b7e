"""The prefix-caching block manager's bookkeeping and the host tier's bytes."""

import numpy as np
import torch

from pipeline.engine.execution.kv_swap import HostKVTier, host_blocks
from pipeline.engine.scheduling.prefix_cache import (
    PrefixCachingBlockManager,
    TokenChain,
    host_slot_ref,
)
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams


def seq_of(request_id: str, tokens: list[int], max_tokens: int = 4) -> Sequence:
    return Sequence(request_id, tokens, SamplingParams(max_tokens=max_tokens), eos_token_ids=(2,))


def run_and_free(manager: PrefixCachingBlockManager, seq: Sequence) -> list[int]:
    """Admit the sequence with its cached prefix, compute all its tokens, free it: its table."""
    hit = manager.find_prefix(seq)
    seq.num_computed_tokens = len(hit) * manager.block_size
    assert manager.grow_from_prefix(seq, len(seq.token_ids), hit)
    table = manager.block_table(seq)
    seq.num_computed_tokens = len(seq.token_ids)
    manager.free(seq)
    return table


def test_a_shared_prefix_reuses_full_blocks_but_never_the_last_token():
    manager = PrefixCachingBlockManager(8, 4, kv_dtype="float32")
    first = run_and_free(manager, seq_of("a", list(range(10))))  # blocks 0-3, 4-7 full
    assert manager.stats()["num_cached_blocks"] == 2
    same = seq_of("b", list(range(10)))
    assert manager.find_prefix(same) == first[:2]
    aligned = seq_of("c", list(range(8)))  # its last token is in block 1: only block 0
    assert manager.find_prefix(aligned) == first[:1]
    other = seq_of("d", [99] + list(range(1, 10)))
    assert manager.find_prefix(other) == []
    keyed = seq_of("e", list(range(10)))
    keyed.kv_extra_key = "adapter-1"  # another adapter's K/V differ: no match
    assert manager.find_prefix(keyed) == []


def test_shared_blocks_are_counted_and_evicted_least_recently_used_last():
    manager = PrefixCachingBlockManager(4, 2, kv_dtype="float32")
    a, b = seq_of("a", [1, 2, 3, 4, 5]), seq_of("b", [1, 2, 3, 4, 6])
    for seq in (a, b):
        hit = manager.find_prefix(seq)
        seq.num_computed_tokens = 2 * len(hit)
        assert manager.grow_from_prefix(seq, 5, hit)
        seq.num_computed_tokens = 5
        manager.cache_blocks([seq])
    shared = manager.block_table(a)[:2]
    assert manager.block_table(b)[:2] == shared and manager.num_free_blocks == 0
    manager.free(a)  # b still holds the shared blocks: only a's own one is free
    assert manager.num_free_blocks == 1
    manager.free(b)
    assert manager.num_free_blocks == 4 and manager.stats()["num_cached_blocks"] == 2
    # a new sequence takes the two unnamed free blocks first, then evicts the chain's later
    # block before its first (a chain without its head is of no use)
    c = seq_of("c", [9] * 7)
    assert manager.grow(c, 6)
    assert manager.stats()["num_evicted_blocks"] == 1
    assert manager.find_prefix(seq_of("d", [1, 2, 3, 4, 7])) == shared[:1]


def test_a_freed_block_goes_to_the_host_tier_and_comes_back_in_order():
    manager = PrefixCachingBlockManager(3, 2, kv_dtype="float32", num_host_blocks=4)
    table = run_and_free(manager, seq_of("a", [1, 2, 3, 4, 5]))  # 2 full blocks named
    # copied to host slots as they are freed (tail first), while no step writes them
    copies = manager.take_copies()
    assert copies.tolist() == [[table[1], host_slot_ref(0)], [table[0], host_slot_ref(1)]]
    b = seq_of("b", [8, 8, 8, 8, 8])
    assert manager.grow(b, 5)  # evicts a's named blocks: the host tier holds them already
    assert manager.take_copies() is None
    assert manager.stats()["num_evicted_blocks"] == 2
    manager.free(b)  # computed nothing: names nothing, copies nothing
    assert manager.take_copies() is None
    again = seq_of("c", [1, 2, 3, 4, 5])
    hit = manager.find_prefix(again)
    assert hit == [host_slot_ref(1), host_slot_ref(0)]
    again.num_computed_tokens = 4
    assert manager.grow_from_prefix(again, 5, hit)
    loads = manager.take_copies().tolist()
    table = manager.block_table(again)
    assert loads == [[source, dest] for source, dest in zip(hit, table[:2], strict=True)]
    assert manager.stats()["num_host_hit_blocks"] == 2
    assert manager.stats()["num_prefix_hit_tokens"] == 4


def test_host_tier_round_trip_is_bitwise():
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn):
        cache = torch.randn(3, 2, 5, 4, 2, 8).to(dtype)  # [layers, 2, blocks, ...]
        before = cache.clone()
        tier = HostKVTier(cache, host_blocks(3 * cache[:, :, 0].nbytes, cache))
        assert tier.pool.shape[0] == 3
        tier.copy(np.array([[1, host_slot_ref(2)], [3, host_slot_ref(0)]]))
        cache.zero_()
        # back into other blocks, in the order given: block 4 gets block 1's, 0 block 3's
        tier.copy(np.array([[host_slot_ref(2), 4], [host_slot_ref(0), 0]]))
        assert torch.equal(cache[:, :, 4].view(torch.uint8), before[:, :, 1].view(torch.uint8))
        assert torch.equal(cache[:, :, 0].view(torch.uint8), before[:, :, 3].view(torch.uint8))
        assert not cache[:, :, 1].view(torch.uint8).any()


def cached_prefix(manager: PrefixCachingBlockManager, tokens: list[int]) -> list[int]:
    return manager.find_prefix(seq_of("probe", tokens))


def test_only_a_sequences_first_new_block_is_named_until_a_lookup_reaches_it():
    manager = PrefixCachingBlockManager(8, 4, kv_dtype="float32")
    table = run_and_free(manager, seq_of("a", list(range(13))))  # 3 full blocks
    assert len(manager.cached) == 1  # block 0 named; blocks 1, 2 wait in its tail
    [[tail]] = manager._tails.values()
    assert isinstance(tail.seq, TokenChain)  # the freed request itself is not kept
    assert manager.stats()["num_cached_blocks"] == 3
    assert cached_prefix(manager, list(range(13))) == table[:3]  # the lookup names the tail
    assert len(manager.cached) == 3 and manager.stats()["num_cached_blocks"] == 3
    # a sequence that diverges after the shared blocks names its own first new block
    table_b = run_and_free(manager, seq_of("b", [*range(8), 50, 51, 52, 53, 54, 55, 56, 57, 58]))
    assert table_b[:2] == table[:2]
    assert cached_prefix(manager, [*range(8), 50, 51, 52, 53, 54, 55, 56, 57, 58]) == table_b[:4]


def test_evicting_a_tail_block_cuts_the_tail_there_and_evicting_its_head_drops_it():
    manager = PrefixCachingBlockManager(4, 4, kv_dtype="float32")
    tokens = list(range(16))  # 4 full blocks
    table = run_and_free(manager, seq_of("a", tokens))
    assert manager.num_free_blocks == 4 and len(manager.cached) == 1
    # the least recently freed go first: the chain's last blocks, from the tail
    assert manager.grow(seq_of("x", [7] * 8), 8)
    assert manager.stats()["num_evicted_blocks"] == 2 and manager.stats()["num_cached_blocks"] == 2
    assert cached_prefix(manager, tokens) == table[:2]
    manager2 = PrefixCachingBlockManager(4, 4, kv_dtype="float32")
    run_and_free(manager2, seq_of("a", tokens))
    manager2.evictable.move_to_end(next(iter(manager2.cached.values())), last=False)
    assert manager2.grow(seq_of("x", [7] * 4), 4)  # evicts the named head: its tail is lost
    assert manager2.stats()["num_cached_blocks"] == 0
    assert cached_prefix(manager2, tokens) == []


def test_a_running_sequences_tail_named_by_a_lookup_then_grows_a_new_one():
    manager = PrefixCachingBlockManager(16, 4, kv_dtype="float32")
    a = seq_of("a", list(range(12)), max_tokens=16)
    assert manager.grow_from_prefix(a, 12, manager.find_prefix(a))
    a.num_computed_tokens = 12
    manager.cache_blocks([a])  # blocks 0 named, 1-2 in its tail
    assert cached_prefix(manager, list(range(13))) == manager.block_table(a)[:3]
    assert a.kv_tail is None
    a.token_ids += list(range(12, 21))
    assert manager.grow(a, 20)
    a.num_computed_tokens = 20
    manager.cache_blocks([a])  # blocks 3, 4: 3 named, 4 in a new tail
    assert len(manager.cached) == 4 and a.kv_tail is not None
    assert cached_prefix(manager, list(range(21))) == manager.block_table(a)[:5]
    manager.free(a)
    assert manager.stats()["num_cached_blocks"] == 5 and manager.num_free_blocks == 16


def test_a_fork_names_the_parents_tail_before_sharing_it():
    manager = PrefixCachingBlockManager(8, 4, kv_dtype="float32")
    parent = seq_of("a", list(range(10)))
    assert manager.grow_from_prefix(parent, 10, manager.find_prefix(parent))
    parent.num_computed_tokens = 10
    manager.cache_blocks([parent])  # block 0 named, block 1 in its tail
    child = seq_of("a", list(range(10)))
    child.num_cached_blocks = parent.num_cached_blocks
    assert manager.fork(parent, child)
    assert parent.kv_tail is None and len(manager.cached) == 2
    manager.free(parent)
    manager.free(child)
    assert manager.num_free_blocks == 8 and manager.stats()["num_cached_blocks"] == 2
