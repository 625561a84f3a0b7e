import pytest

from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.sequence import Sequence, SequenceStatus
from pipeline.request.sampling_params import SamplingParams
from tests.unit.engine.fake_sequences import launch, make_seq, run_to_completion, scheduled, step


def scheduler(
    num_blocks=64,
    block_size=4,
    max_batch_size=8,
    max_num_tokens=64,
    policy="guaranteed_no_evict",
    chunked=True,
) -> Scheduler:
    return Scheduler(
        BlockManager(num_blocks, block_size), max_batch_size, max_num_tokens, policy, chunked
    )


def test_long_prompt_is_chunked_by_the_token_budget():
    s = scheduler(max_num_tokens=8)
    s.add(make_seq("a", 20, max_tokens=2))
    history = run_to_completion(s)
    assert history == [[("a", 8)], [("a", 8)], [("a", 4)], [("a", 1)]]


def test_without_chunking_a_prompt_waits_for_a_step_with_room():
    s = scheduler(max_num_tokens=10, chunked=False)
    s.add(make_seq("a", 6, max_tokens=3))
    s.add(make_seq("b", 6, max_tokens=3))
    assert step(s) == [("a", 6)]
    # the next step decodes a (1 token) and admits b whole (6 tokens)
    assert step(s) == [("a", 1), ("b", 6)]


def test_requests_join_and_leave_between_steps():
    s = scheduler()
    s.add(make_seq("a", 5, max_tokens=3))
    step(s)
    s.add(make_seq("b", 3, max_tokens=1))
    assert step(s) == [("a", 1), ("b", 3)]
    assert [seq.request_id for seq in s.running] == ["a"]  # b finished after one token
    step(s)
    assert not s.has_unfinished()


def test_max_batch_size_caps_running_sequences():
    s = scheduler(max_batch_size=2)
    for i in range(4):
        s.add(make_seq(f"r{i}", 3, max_tokens=2))
    step(s)
    assert len(s.running) == 2 and len(s.waiting) == 2
    history = run_to_completion(s)
    assert all(len(entries) <= 2 for entries in history)


def test_guaranteed_no_evict_reserves_prompt_plus_max_tokens():
    # each request needs 8 + 8 - 1 = 15 K/V slots = 4 blocks of 4; 6 blocks fit only one
    s = scheduler(num_blocks=6, block_size=4)
    s.add(make_seq("a", 8, max_tokens=8))
    s.add(make_seq("b", 8, max_tokens=8))
    step(s)
    assert [seq.request_id for seq in s.running] == ["a"]
    assert s.running[0].num_blocks == 4 and s.block_manager.num_free_blocks == 2
    history = run_to_completion(s)
    assert s.num_preemptions == 0
    assert ("b", 8) in history[-8]  # b is admitted only once a has finished
    assert s.block_manager.num_free_blocks == 6


def test_max_utilization_preempts_the_newest_and_recomputes_it():
    s = scheduler(num_blocks=6, block_size=4, policy="max_utilization")
    a, b = make_seq("a", 8, max_tokens=8), make_seq("b", 8, max_tokens=8)
    s.add(a)
    s.add(b)
    step(s)  # both admitted greedily: 2 blocks each
    assert len(s.running) == 2
    history = run_to_completion(s)
    assert s.num_preemptions >= 1 and b.num_preemptions >= 1 and a.num_preemptions == 0
    # b's recompute prefill covers its prompt and the tokens it had generated
    assert any(rid == "b" and n > 8 for entries in history for rid, n in entries)
    assert a.completion_token_ids == b.completion_token_ids == [5] * 8
    assert s.block_manager.num_free_blocks == 6


def test_preempted_sequence_goes_back_to_the_front_of_the_queue():
    s = scheduler(num_blocks=4, block_size=4, max_batch_size=2, policy="max_utilization")
    a, b, c = make_seq("a", 4, 8), make_seq("b", 4, 8), make_seq("c", 4, 8)
    for seq in (a, b, c):
        s.add(seq)
    while not b.num_preemptions:
        step(s)
    assert b.status == SequenceStatus.WAITING and b.num_computed_tokens == 0
    assert b.num_blocks == 0 and list(s.waiting) == [b, c]


def test_abort_frees_blocks_in_either_queue():
    s = scheduler(max_batch_size=1)
    s.add(make_seq("a", 5))
    s.add(make_seq("b", 5))
    step(s)
    aborted = s.abort("a")
    assert aborted.finish_reason == "cancelled" and aborted.is_finished
    assert s.abort("b").finish_reason == "cancelled"
    assert s.abort("missing") is None
    assert not s.has_unfinished() and s.block_manager.num_free_blocks == 64


@pytest.mark.parametrize("policy", ["guaranteed_no_evict", "max_utilization"])
def test_many_requests_on_a_small_cache_all_finish(policy):
    s = scheduler(num_blocks=10, block_size=4, max_num_tokens=12, policy=policy)
    seqs = [make_seq(f"r{i}", 3 + i % 7, max_tokens=5 + i % 4) for i in range(12)]
    for seq in seqs:
        s.add(seq)
    history = run_to_completion(s)
    assert all(seq.finish_reason == "length" for seq in seqs)
    assert all(sum(n for _, n in entries) <= 12 for entries in history)
    assert s.block_manager.num_free_blocks == 10


def _launch(s: Scheduler) -> list[tuple[str, int]]:
    """Schedule a step and do the engine's launch bookkeeping, its tokens left pending."""
    return scheduled(launch(s)[0])


def test_pending_tokens_run_as_decodes_unless_they_end_the_sequence_or_need_the_host():
    s = scheduler()
    banned_after_7 = SamplingParams(max_tokens=4, bad_sequences=[[7, 9]])
    s.add(make_seq("a", 4, max_tokens=3))
    s.add(make_seq("b", 4, max_tokens=1))
    s.add(Sequence("c", [7] * 4, banned_after_7, eos_token_ids=(2,)))
    assert _launch(s) == [("a", 4), ("b", 4), ("c", 4)]
    # b's pending token is its last whatever it is; c's ban depends on its pending token
    assert _launch(s) == [("a", 1)]
    assert [seq.request_id for seq in s.running] == ["a", "b", "c"]  # none finished yet


def test_finish_takes_a_preempted_sequence_out_of_the_waiting_queue():
    s = scheduler()
    seq = make_seq("a", 4)
    s.add(seq)
    s.schedule()
    s._preempt(seq)  # while its last step was in flight
    s.finish(seq, "stop")
    assert not s.has_unfinished() and seq.is_finished
    assert s.block_manager.num_free_blocks == s.block_manager.num_total_blocks


def test_a_sampling_sequence_gets_blocks_for_the_steps_ahead_up_to_what_it_can_use():
    s = Scheduler(BlockManager(64, 4), 8, 12, "max_utilization", True, num_lookahead_tokens=3)
    s.add(make_seq("a", 4, max_tokens=20))  # the prompt fills one block: 3 more need another
    s.add(make_seq("b", 4, max_tokens=2))  # can use 4 + 2 - 1 = 5 slots: 2 blocks at most
    s.add(make_seq("c", 9, max_tokens=20))  # a chunk of the 12-token budget: samples nothing
    assert _launch(s) == [("a", 4), ("b", 4), ("c", 4)]
    tables = {seq.request_id: seq.num_blocks for seq in s.running}
    assert tables == {"a": 2, "b": 2, "c": 1}


def test_a_preempted_sequence_waits_for_its_pending_tokens():
    s = scheduler(policy="max_utilization")
    seq = make_seq("a", 4, max_tokens=8)
    s.add(seq)
    assert _launch(s) == [("a", 4)]
    seq.num_pending_tokens += 2  # a launch of 3 steps: its tokens are on the device
    seq.num_computed_tokens += 2
    s._preempt(seq)  # recomputing would need all 3 as inputs, only the newest is on the device
    assert not s.schedule()
    seq.num_pending_tokens = 0  # the host appended them
    seq.token_ids += [5, 5, 5]
    assert _launch(s) == [("a", 7)]
