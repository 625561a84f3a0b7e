from pipeline.engine.block_manager import BlockManager
from tests.unit.engine.fake_sequences import make_seq


def test_grow_extends_block_table_and_free_returns_blocks():
    manager = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq("a", 6)
    assert manager.grow(seq, 6)
    assert len(seq.block_table) == 2 and manager.num_free_blocks == 2
    assert manager.grow(seq, 8)  # still fits in two blocks
    assert len(seq.block_table) == 2
    assert not manager.grow(seq, 17)  # needs 5 blocks, 4 exist
    assert len(seq.block_table) == 2 and manager.num_free_blocks == 2  # nothing taken
    manager.free(seq)
    assert seq.block_table == [] and manager.num_free_blocks == 4


def test_a_decode_token_takes_a_block_only_at_a_block_boundary():
    manager = BlockManager(num_blocks=3, block_size=4)
    seq = make_seq("a", 4)
    manager.grow(seq, 4)
    seq.num_computed_tokens = 3  # next token is position 3: still in block 0
    assert manager.grow(seq, seq.num_computed_tokens + 1)
    assert len(seq.block_table) == 1
    seq.num_computed_tokens = 4  # position 4 starts block 1
    assert manager.grow(seq, seq.num_computed_tokens + 1)
    assert len(seq.block_table) == 2 and manager.num_free_blocks == 1


def test_a_decode_token_cannot_grow_when_no_block_is_free():
    manager = BlockManager(num_blocks=1, block_size=2)
    seq = make_seq("a", 2)
    manager.grow(seq, 2)
    seq.num_computed_tokens = 2
    assert not manager.grow(seq, seq.num_computed_tokens + 1)


def test_blocks_of_two_sequences_never_overlap():
    manager = BlockManager(num_blocks=8, block_size=4)
    a, b = make_seq("a", 9), make_seq("b", 7)
    manager.grow(a, 9)
    manager.grow(b, 7)
    assert not set(a.block_table) & set(b.block_table)
    assert manager.num_free_blocks == 8 - 3 - 2
