"""A beam request in the scheduler: admitted only with batch rows for all its beams (and, under
guaranteed_no_evict, blocks for their whole length), marked in SchedulerOutput.beam_rows; a
batch without beam requests carries no beam column."""

import numpy as np

from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams
from tests.unit.engine.fake_sequences import EOS, make_seq


def beam_seq(request_id: str, width: int, num_prompt: int = 6) -> Sequence:
    params = SamplingParams(max_tokens=4, beam_width=width)
    return Sequence(request_id, [7] * num_prompt, params, eos_token_ids=(EOS,))


def scheduler(num_blocks=64, max_batch_size=4, policy="max_utilization") -> Scheduler:
    return Scheduler(BlockManager(num_blocks, 4), max_batch_size, 64, policy, True)


def test_a_beam_request_waits_for_rows_for_all_its_beams():
    s = scheduler(max_batch_size=4)
    s.add(make_seq("a", 6))
    s.add(beam_seq("b", 4))
    batch = s.schedule()
    assert [seq.request_id for seq in batch.seqs] == ["a"]  # 1 + 4 rows > 4
    assert batch.beam_rows is not None and not batch.beam_rows.size
    s.finish(s.running[0], "stop")
    batch = s.schedule()
    assert [seq.request_id for seq in batch.seqs] == ["b"] and batch.beam_rows.tolist() == [0]
    assert batch.seqs[0].needs_host_tokens and not batch.seqs[0].params.speculate


def test_under_no_evict_a_beam_request_needs_blocks_for_every_beam():
    # 6 + 4 - 1 = 9 K/V slots: 3 blocks a beam, 12 for four
    s = scheduler(num_blocks=11, max_batch_size=8, policy="guaranteed_no_evict")
    s.add(beam_seq("b", 4))
    assert not s.schedule().seqs
    s = scheduler(num_blocks=12, max_batch_size=8, policy="guaranteed_no_evict")
    s.add(beam_seq("b", 4))
    assert [seq.request_id for seq in s.schedule().seqs] == ["b"]


def test_without_beam_requests_a_batch_has_no_beam_column():
    s = scheduler()
    s.add(make_seq("a", 6))
    assert s.schedule().beam_rows is None


class Candidates:
    """A launch's beam candidates, made up: row i's tokens 10 + i, 20 + i, ... best first."""

    def row(self, i: int, k: int):
        return -np.arange(1, k + 1, dtype=np.float32), 10 * np.arange(1, k + 1) + i


def test_the_prompt_forks_into_beams_that_share_its_full_blocks():
    s = scheduler(max_batch_size=4)
    s.add(beam_seq("b", 2, num_prompt=6))  # 6 tokens: one full block of 4, two in the next
    handle = s.waiting[0]
    batch = s.schedule()
    sampled = SampledTokens(list(batch.seqs), None, None, 1)
    s.update_from_launch(batch, sampled)
    handle.beam.expect(handle, Candidates(), 0)
    assert s.update_from_output(sampled, [0]) == []  # the request goes on
    beams = handle.beam.beams
    assert [b.completion_token_ids for b in beams] == [[10], [20]]
    assert s.running == beams and handle not in s.running
    blocks = s.block_manager
    full = blocks.block_table(handle.beam.beams[0])[0]
    assert all(blocks.block_table(b)[0] == full for b in beams) and blocks.ref_count(full) == 2
    copies = s.schedule().blocks_to_copy  # the prompt's partial block into a new one a beam
    assert len(copies) == 2 and len(set(copies[:, 1].tolist())) == 2
