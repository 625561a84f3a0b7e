from pipeline.engine.core.launch_policy import LaunchPolicy
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.prefix_cache import PrefixCachingBlockManager
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.scheduler_output import LaunchPlan
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams
from tests.unit.engine.fake_sequences import make_seq, run_to_completion


def batch_of(*seqs: Sequence):
    s = Scheduler(BlockManager(64, 4), 8, 64, "max_utilization", True, num_lookahead_tokens=2)
    for seq in seqs:
        s.add(seq)
    return s.schedule()


def test_a_launch_runs_the_pacers_steps_and_reserve():
    policy = LaunchPolicy(3, 5)
    policy.pacer.num_reserve_steps = 1
    assert policy.plan(batch_of(make_seq("a", 4))) == LaunchPlan(3, 1)
    assert policy.num_steps == 3
    stats = policy.stats()
    assert (stats["num_scheduler_steps"], stats["max_scheduler_steps"]) == (3, 5)
    assert stats["num_reserve_steps"] == 1 and stats["num_launches"] == 0


def test_a_batch_with_a_multi_token_bad_word_runs_one_step():
    banned = SamplingParams(max_tokens=4, bad_sequences=[[7, 9]])
    batch = batch_of(make_seq("a", 4), Sequence("b", [7] * 4, banned, eos_token_ids=(2,)))
    assert LaunchPolicy(3, 3).plan(batch).num_steps == 1


def test_a_steady_step_is_observed_by_the_pacer():
    policy = LaunchPolicy(2, 4)
    observed = []
    policy.pacer.observe = lambda *args: observed.append(args)
    for launched, postprocessed in ((True, False), (True, True), (False, True)):
        policy.start_step(None, will_admit=True)
        policy.queued()
        policy.end_step(launched, postprocessed, in_flight=launched)
    assert len(observed) == 1  # only a step that both launched and read a launch's tokens
    assert policy.stats()["num_launches"] == 2


def test_a_launch_that_loads_a_waiting_requests_prefix_from_the_host_tier_runs_one_step():
    blocks = PrefixCachingBlockManager(10, 4, 8, 16, "float32", num_host_blocks=32)
    s = Scheduler(blocks, 8, 100, "max_utilization", True)
    prefix = list(range(100, 132))
    for tokens in (prefix + [1], [9] * 37):  # the second evicts the first's blocks to the host
        s.add(Sequence("x", tokens, SamplingParams(max_tokens=2), eos_token_ids=(2,)))
        run_to_completion(s)
    s.add(make_seq("decoding", 4))
    s.schedule()  # its prompt; it decodes from the next launch
    s.add(Sequence("again", prefix + [1], SamplingParams(max_tokens=2), eos_token_ids=(2,)))
    batch = s.schedule()
    assert batch.blocks_to_copy is not None and (batch.blocks_to_copy[:, 0] < 0).sum() == 8
    assert LaunchPolicy(3, 3).plan(batch).num_steps == 1
    assert LaunchPolicy(3, 3).plan(batch_of(make_seq("a", 4))).num_steps == 3
