"""Forked beams' KV blocks: full blocks shared (one more reference each), the partial last block
copied into a new one, a shared block free only once its last holder ends; the device copies
give the destination the source's bytes."""

import numpy as np
import pytest
import torch

from pipeline.engine.execution.block_copies import BlockCopies
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.prefix_cache import PrefixCachingBlockManager
from tests.unit.engine.fake_sequences import make_seq


@pytest.mark.parametrize("manager_type", [BlockManager, PrefixCachingBlockManager])
def test_a_fork_shares_full_blocks_and_copies_the_partial_one(manager_type):
    manager = manager_type(num_blocks=8, block_size=4)
    parent = make_seq("a", 10)
    assert manager.grow(parent, 10)
    parent.num_computed_tokens = 10  # blocks 0, 1 full; 2 holds two tokens
    full, partial = manager.block_table(parent)[:2], manager.block_table(parent)[2]
    children = [make_seq("a", 10) for _ in range(3)]
    for child in children:
        assert manager.fork(parent, child)
        assert manager.block_table(child)[:2] == full
    assert [manager.ref_count(b) for b in full] == [4, 4]
    copies = manager.take_copies()
    assert copies[:, 0].tolist() == [partial] * 3
    assert sorted(copies[:, 1].tolist()) == sorted(manager.block_table(c)[2] for c in children)
    assert manager.take_copies() is None
    assert manager.num_free_blocks == 8 - 3 - 3
    manager.free(parent)  # its partial block is free; the shared ones are still held
    assert manager.num_free_blocks == 8 - 2 - 3
    assert [manager.ref_count(b) for b in full] == [3, 3]
    for child in children:
        manager.free(child)
    assert manager.num_free_blocks == 8


def test_a_fork_without_a_free_block_takes_nothing():
    manager = BlockManager(num_blocks=2, block_size=4)
    parent, child = make_seq("a", 6), make_seq("a", 6)
    assert manager.grow(parent, 6)
    parent.num_computed_tokens = 6
    assert not manager.fork(parent, child)
    assert child.block_row == -1 and manager.ref_count(manager.block_table(parent)[0]) == 1


def test_device_copies_are_bitwise_and_in_order():
    cache = torch.randn(3, 2, 6, 4, 2, 8)
    before = cache.clone()
    # block 1 into 4 and 5, then block 0 into 1 (1 was read first, as the order says)
    BlockCopies(cache, None).copy(np.array([[1, 4], [1, 5], [0, 1]]))
    assert torch.equal(cache[:, :, 4], before[:, :, 1]) and torch.equal(
        cache[:, :, 5], before[:, :, 1]
    )
    assert torch.equal(cache[:, :, 1], before[:, :, 0])
    assert torch.equal(cache[:, :, [0, 2, 3]], before[:, :, [0, 2, 3]])
