"""The host tier's batched copies (execution/kv_swap.py) against copying each pair in order."""

import numpy as np
import pytest
import torch

from pipeline.engine.execution import kv_swap
from pipeline.engine.execution.kv_swap import HostKVTier, copy_batches, host_blocks, slot_runs
from pipeline.engine.scheduling.prefix_cache import host_slot_ref

NUM_BLOCKS, NUM_SLOTS = 8, 6


def cache_and_tier(dtype: torch.dtype) -> tuple[torch.Tensor, HostKVTier]:
    torch.manual_seed(0)
    cache = torch.randn(3, 2, NUM_BLOCKS, 4, 2, 8).to(dtype)  # [layers, 2, blocks, ...]
    tier = HostKVTier(cache, host_blocks(NUM_SLOTS * cache[:, :, 0].nbytes, cache))
    tier.pool.zero_()
    return cache, tier


def one_by_one(cache: torch.Tensor, pool: torch.Tensor, pairs: np.ndarray) -> None:
    """The copies' meaning: each pair in order, a block at a time."""
    cache = cache.view(torch.uint8)
    for source, dest in pairs.tolist():
        if dest < 0:
            pool[-1 - dest].copy_(cache[:, :, source])
        else:
            cache[:, :, dest].copy_(pool[-1 - source])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_a_set_of_blocks_offloaded_and_loaded_in_one_batch_is_bitwise_equal(dtype):
    cache, tier = cache_and_tier(dtype)
    before = cache.clone()
    blocks, slots = [6, 1, 3, 4], [0, 1, 2, 5]  # slots 0-2 are one run, 5 another
    offload = np.array([[b, host_slot_ref(s)] for b, s in zip(blocks, slots, strict=True)])
    assert len(copy_batches(offload)) == 1
    tier.copy(offload)
    cache.zero_()
    into = [0, 7, 2, 5]
    tier.copy(np.array([[host_slot_ref(s), b] for s, b in zip(slots, into, strict=True)]))
    for source, dest in zip(blocks, into, strict=True):
        assert torch.equal(
            cache[:, :, dest].view(torch.uint8), before[:, :, source].view(torch.uint8)
        )
    assert not cache[:, :, 1].view(torch.uint8).any()
    assert tier.num_copied_bytes == 8 * tier.block_nbytes and tier.num_batches == 2


def test_a_block_evicted_and_refilled_in_one_step_is_read_before_it_is_written():
    cache, tier = cache_and_tier(torch.float32)
    expected_cache, expected_pool = cache.clone(), tier.pool.clone()
    # slot 3 holds an older block; block 2 goes to slot 0 and takes slot 3's bytes
    tier.pool[3].copy_(cache[:, :, 5].view(torch.uint8))
    expected_pool[3].copy_(cache[:, :, 5].view(torch.uint8))
    pairs = np.array([[2, host_slot_ref(0)], [host_slot_ref(3), 2]])
    assert len(copy_batches(pairs)) == 1
    tier.copy(pairs)
    one_by_one(expected_cache, expected_pool, pairs)
    assert torch.equal(cache, expected_cache) and torch.equal(tier.pool, expected_pool)


@pytest.mark.parametrize("staging_blocks", [1, 3, 64])
def test_copies_in_any_order_equal_copying_each_pair_in_turn(monkeypatch, staging_blocks):
    block_nbytes = 3 * 2 * 4 * 2 * 8 * 4  # a float32 block of every layer
    monkeypatch.setattr(kv_swap, "STAGING_BYTES", staging_blocks * block_nbytes)
    rng = np.random.default_rng(staging_blocks)
    for _ in range(20):
        cache, tier = cache_and_tier(torch.float32)
        assert tier.block_nbytes == block_nbytes
        tier.pool.copy_(torch.randint(0, 255, tier.pool.shape, dtype=torch.uint8))
        expected_cache, expected_pool = cache.clone(), tier.pool.clone()
        pairs = []
        for _ in range(int(rng.integers(1, 12))):  # slots reused, blocks loaded twice
            block, slot = int(rng.integers(NUM_BLOCKS)), int(rng.integers(NUM_SLOTS))
            pair = (
                [block, host_slot_ref(slot)] if rng.random() < 0.5 else [host_slot_ref(slot), block]
            )
            pairs.append(pair)
        pairs = np.array(pairs)
        tier.copy(pairs)
        one_by_one(expected_cache, expected_pool, pairs)
        assert torch.equal(cache.view(torch.uint8), expected_cache.view(torch.uint8))
        assert torch.equal(tier.pool, expected_pool)


def test_a_load_whose_slot_a_later_offload_reuses_starts_a_new_batch():
    pairs = np.array([[host_slot_ref(1), 4], [2, host_slot_ref(1)], [host_slot_ref(0), 2]])
    batches = copy_batches(pairs)
    assert [(o.tolist(), loads.tolist()) for o, loads in batches] == [
        ([], [[1, 4]]),
        ([[2, 1]], [[0, 2]]),
    ]


def test_consecutive_slots_copy_as_one_run():
    assert slot_runs(np.array([3, 4, 5, 9, 0, 1])) == [(0, 3, 3), (3, 4, 9), (4, 6, 0)]


class Channel:
    def send(self, command: int, headers: list, body: torch.Tensor) -> None:
        self.body = body.clone()


def test_another_rank_runs_the_copies_it_is_sent():
    cache, tier = cache_and_tier(torch.bfloat16)
    other_cache, other = cache_and_tier(torch.bfloat16)
    pairs = np.array([[1, host_slot_ref(4)], [host_slot_ref(4), 6], [3, host_slot_ref(2)]])
    channel = Channel()
    tier.copy(pairs, channel, reads=np.array([[0, 5]]))
    assert channel.body[0] == 1  # the step touches none of blocks 1, 3, 6: copies run beside it
    other.receive(channel.body)
    assert torch.equal(other_cache, cache) and torch.equal(other.pool, tier.pool)
    for touched in ([[6, 7]], [[3, 0]]):  # a block loaded, a block offloaded
        tier.copy(pairs, channel, reads=np.array(touched))
        assert channel.body[0] == 0
