import dataclasses

import numpy as np
import pytest
import torch

from pipeline.engine.execution.step_inputs import micro_batch, pack_step, part_sizes, unpack_step
from pipeline.engine.execution.step_types import HEADER_LEN, StepHeader
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.scheduler import Scheduler
from tests.unit.engine.fake_sequences import launch, make_seq

BLOCK_SIZE = 4


def mixed_batch():
    """a decodes its pending token (sampled by the launch before); b's 6-token prompt joins."""
    s = Scheduler(BlockManager(64, BLOCK_SIZE), 8, 64, "max_utilization", True)
    s.add(make_seq("a", 5, max_tokens=8))
    launch(s)  # a's prompt; its first token is left on the device
    s.add(make_seq("b", 6, max_tokens=8))
    return s, s.schedule()


def test_the_scheduler_output_is_the_batch_as_read_only_columns():
    s, batch = mixed_batch()
    assert [seq.request_id for seq in batch.seqs] == ["a", "b"]
    assert batch.num_tokens.tolist() == [1, 6]
    assert batch.num_computed_tokens.tolist() == [5, 0]
    assert batch.num_pending_tokens.tolist() == [1, 0]
    assert batch.query_start.tolist() == [0, 1, 7] and batch.total_num_tokens == 7
    assert batch.input_ids.tolist() == [0] + [7] * 6  # a's input is still on the device
    assert batch.samples.tolist() == [True, True]
    tables = s.block_manager.tables
    assert batch.block_tables[1, :2].tolist() == tables[batch.seqs[1].block_row, :2].tolist()
    for array in (batch.num_tokens, batch.block_tables, batch.input_ids, batch.samples):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.num_tokens = np.ones(2, np.int64)


def test_a_micro_batch_of_rows_is_a_batch_of_its_own():
    _, batch = mixed_batch()
    b = micro_batch(batch, slice(1, 2))
    assert [seq.request_id for seq in b.seqs] == ["b"]
    assert b.query_start.tolist() == [0, 6] and b.input_ids.tolist() == [7] * 6
    assert b.num_computed_tokens.tolist() == [0] and b.block_tables.shape[0] == 1
    assert micro_batch(batch, slice(0, 2)) is batch


def test_the_step_header_is_its_fields_in_order():
    header = StepHeader(3, 7, 2, 1, False, False, -1, 1, 2, True)
    packed = np.array(header, np.int64)
    assert len(packed) == HEADER_LEN == len(StepHeader._fields)
    assert StepHeader._make(packed.tolist()) == header
    sizes = part_sizes(header)
    assert sizes.input_ids == sizes.positions == 7 and sizes.query_start == 4
    assert sizes.block_tables == 6 and sizes.pending_at == sizes.pending_from == 1
    assert sizes.ahead_rows == 6 and sizes.ahead_tables == 4  # 1 step ahead of 2 sequences


def test_a_packed_step_unpacks_to_its_positions_slots_and_tables():
    _, batch = mixed_batch()
    packed = pack_step(batch, 2, BLOCK_SIZE, scratch_slot=256, num_last_sampled=1)
    header = StepHeader._make(np.array(packed.header, np.int64).tolist())
    body = torch.from_numpy(np.concatenate(packed.parts, dtype=np.int64, casting="unsafe"))
    assert body.numel() == sum(part_sizes(header))
    last_sampled = torch.tensor([42])  # a's token from the launch before
    step = unpack_step(body, header, last_sampled, embeds=True)
    assert step.input_ids.tolist() == [42] + [7] * 6
    assert step.meta.positions.tolist() == [5, 0, 1, 2, 3, 4, 5]
    assert step.meta.context_lens.tolist() == [6, 6]
    tables = batch.block_tables
    a_slot = tables[0, 1] * BLOCK_SIZE + 1  # position 5: block 1, offset 1
    assert step.meta.slot_mapping[0].item() == a_slot
    assert [seq.request_id for seq in packed.seqs] == ["a", "b"]
    assert step.logits_rows.tolist() == [0, 6] and step.num_sampled == 2
    (ahead,) = step.ahead  # both sample: one decode step after, at positions 6 and 6
    assert ahead.positions.tolist() == [6, 6] and ahead.context_lens.tolist() == [7, 7]
