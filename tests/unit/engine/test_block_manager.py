from pipeline.engine.scheduling.block_manager import BlockManager
from tests.unit.engine.fake_sequences import make_seq


def test_grow_extends_block_table_and_free_returns_blocks():
    manager = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq("a", 6)
    assert manager.grow(seq, 6)
    assert seq.num_blocks == 2 and manager.num_free_blocks == 2
    assert manager.grow(seq, 8)  # still fits in two blocks
    assert seq.num_blocks == 2
    assert not manager.grow(seq, 17)  # needs 5 blocks, 4 exist
    assert seq.num_blocks == 2 and manager.num_free_blocks == 2  # nothing taken
    manager.free(seq)
    assert seq.num_blocks == 0 and seq.block_row == -1 and manager.num_free_blocks == 4


def test_a_decode_token_takes_a_block_only_at_a_block_boundary():
    manager = BlockManager(num_blocks=3, block_size=4)
    seq = make_seq("a", 4)
    manager.grow(seq, 4)
    seq.num_computed_tokens = 3  # next token is position 3: still in block 0
    assert manager.grow(seq, seq.num_computed_tokens + 1)
    assert seq.num_blocks == 1
    seq.num_computed_tokens = 4  # position 4 starts block 1
    assert manager.grow(seq, seq.num_computed_tokens + 1)
    assert seq.num_blocks == 2 and manager.num_free_blocks == 1


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
    assert not set(manager.block_table(a)) & set(manager.block_table(b))
    assert manager.num_free_blocks == 8 - 3 - 2


def test_rows_and_width_grow_past_the_first_size_and_freed_rows_are_reused():
    manager = BlockManager(num_blocks=16, block_size=2, max_seqs=1, max_blocks_per_seq=1)
    seqs = [make_seq(str(i), 5) for i in range(3)]
    for seq in seqs:
        assert manager.grow(seq, 5)  # 3 blocks each: past the first width, and 3 rows
    tables = [manager.block_table(seq) for seq in seqs]
    assert sorted(sum(tables, [])) == list(range(9))  # every block once
    assert len({seq.block_row for seq in seqs}) == 3
    row = seqs[1].block_row
    manager.free(seqs[1])
    assert [manager.block_table(s) for s in (seqs[0], seqs[2])] == [tables[0], tables[2]]
    late = make_seq("late", 3)
    assert manager.grow(late, 3) and late.block_row == row  # the freed row, its blocks back
    assert manager.num_free_blocks == 16 - 6 - 2
