from pipeline.engine.block_manager import BlockManager
from tests.unit.engine.fake_sequences import make_seq


def test_allocate_grows_block_table_and_free_returns_blocks():
    manager = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq("a", 6)
    assert manager.can_allocate(seq, 6)
    manager.allocate(seq, 6)
    assert len(seq.block_table) == 2 and manager.num_free_blocks == 2
    manager.allocate(seq, 8)  # still fits in two blocks
    assert len(seq.block_table) == 2
    assert not manager.can_allocate(seq, 17)  # needs 5 blocks, 4 exist
    manager.free(seq)
    assert seq.block_table == [] and manager.num_free_blocks == 4


def test_may_append_takes_a_block_only_at_a_block_boundary():
    manager = BlockManager(num_blocks=3, block_size=4)
    seq = make_seq("a", 4)
    manager.allocate(seq, 4)
    seq.num_computed_tokens = 3  # next token is position 3: still in block 0
    manager.may_append(seq)
    assert len(seq.block_table) == 1
    seq.num_computed_tokens = 4  # position 4 starts block 1
    assert manager.can_append(seq)
    manager.may_append(seq)
    assert len(seq.block_table) == 2 and manager.num_free_blocks == 1


def test_can_append_is_false_when_no_block_is_free():
    manager = BlockManager(num_blocks=1, block_size=2)
    seq = make_seq("a", 2)
    manager.allocate(seq, 2)
    seq.num_computed_tokens = 2
    assert not manager.can_append(seq)


def test_blocks_of_two_sequences_never_overlap():
    manager = BlockManager(num_blocks=8, block_size=4)
    a, b = make_seq("a", 9), make_seq("b", 7)
    manager.allocate(a, 9)
    manager.allocate(b, 7)
    assert not set(a.block_table) & set(b.block_table)
    assert manager.num_free_blocks == 8 - 3 - 2
