"""The scheduler with prefix caching: what a step admits under its token budget, requests that
share a prefix computed in the same step, and requests whose blocks swap in from the host tier,
asserted on the scheduler's output."""

from pipeline.engine.scheduling.prefix_cache import PrefixCachingBlockManager, SwapCosts
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams
from tests.unit.engine.fake_sequences import launch, run_to_completion, scheduled, step

BLOCK = 4
PREFIX = list(range(100, 132))  # 8 full blocks


def seq_of(request_id: str, tokens: list[int], max_tokens: int = 2) -> Sequence:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return Sequence(request_id, tokens, params, eos_token_ids=(2,))


def caching_scheduler(num_blocks: int, max_num_tokens: int, **manager) -> Scheduler:
    blocks = PrefixCachingBlockManager(num_blocks, BLOCK, 8, 16, "float32", **manager)
    return Scheduler(blocks, 8, max_num_tokens, "guaranteed_no_evict", True)


def test_a_step_charges_only_the_uncached_tokens_so_it_admits_more_cached_requests():
    s = caching_scheduler(64, max_num_tokens=40)
    s.add(seq_of("warm", PREFIX + [1, 2]))
    run_to_completion(s)
    for i in range(4):
        s.add(seq_of(f"r{i}", PREFIX + [10 + i, 20 + i]))
    # 34 tokens each, 32 cached: all four admitted in one 40-token step (without the cache:
    # one request's 34, then the next step)
    first = step(s)
    assert first == [(f"r{i}", 2) for i in range(4)]
    assert all(seq.num_cached_tokens == 32 for seq in s.running)


def test_requests_admitted_together_compute_a_shared_prefix_once():
    s = caching_scheduler(64, max_num_tokens=200)
    a, b, c = (seq_of(name, PREFIX + [i, i + 1], 4) for i, name in enumerate("abc"))
    for seq in (a, b, c):
        s.add(seq)
    # a computes the prefix; b and c would compute it too: they wait a step and take it
    assert step(s) == [("a", 34)]
    assert step(s) == [("a", 1), ("b", 2), ("c", 2)]
    assert b.num_cached_tokens == c.num_cached_tokens == 32
    assert s.block_manager.block_table(b)[:8] == s.block_manager.block_table(a)[:8]
    run_to_completion(s)
    assert s.block_manager.num_free_blocks == 64


def test_a_shared_prefix_longer_than_a_step_is_followed_chunk_by_chunk():
    s = caching_scheduler(64, max_num_tokens=16)
    for name in "ab":
        s.add(seq_of(name, PREFIX + [7]))
    # a's chunks of 16 name 4 blocks a step; b waits until the rest of its prompt is its own
    assert step(s) == [("a", 16)]
    assert step(s) == [("a", 16)]
    assert step(s) == [("a", 1), ("b", 1)]
    assert s.running[1].num_cached_tokens == 32


def test_a_request_whose_blocks_swap_in_runs_from_the_next_step():
    s = caching_scheduler(10, max_num_tokens=100, num_host_blocks=32)
    s.add(seq_of("a", PREFIX + [1]))
    run_to_completion(s)  # a's 8 named blocks stay on the GPU
    s.add(seq_of("b", [9] * 37))
    run_to_completion(s)  # takes all 10 blocks: a's go to the host tier
    manager = s.block_manager
    hit = manager.find_prefix(seq_of("x", PREFIX + [1]))
    assert len(hit) == 8 and all(block < 0 for block in hit)  # all in the host tier
    s.add(seq_of("c", [5]))
    s.add(seq_of("again", PREFIX + [1]))
    batch, sampled = launch(s)
    s.update_from_output(sampled, [5] * len(sampled.seqs))
    # "again" is admitted with its loads in this step's copies, but runs from the next step
    assert scheduled(batch) == [("c", 1)]
    assert [seq.request_id for seq in s.running] == ["c", "again"]
    loads = batch.blocks_to_copy[batch.blocks_to_copy[:, 1] >= 0]
    assert len(loads) == 8
    again = s.running[1]
    assert manager.block_table(again)[:8] == loads[:, 1].tolist()
    assert step(s) == [("c", 1), ("again", 1)]
    run_to_completion(s)
    assert again.num_cached_tokens == 32 and again.num_completion_tokens == 2


def evicted_to_host(costs: SwapCosts) -> Scheduler:
    """A scheduler whose PREFIX blocks were computed, then evicted by another request."""
    s = caching_scheduler(10, max_num_tokens=100, num_host_blocks=16, swap_costs=costs)
    for tokens in (PREFIX + [1], [9] * 37):
        s.add(seq_of("x", tokens))
        run_to_completion(s)
    return s


def test_a_short_host_hit_is_recomputed_when_its_copy_and_wait_cost_more():
    s = evicted_to_host(SwapCosts(load_s_per_block=1e-4, recompute_s_per_block=5e-4, step_s=2e-3))
    assert s.block_manager.stats()["num_offloaded_blocks"] >= 8
    s.add(seq_of("short", PREFIX[:16] + [1]))  # 4 blocks: 0.4 + 2 ms to load, 2 ms to compute
    batch = s.schedule()
    assert scheduled(batch) == [("short", 17)]
    assert batch.blocks_to_copy is None or (batch.blocks_to_copy[:, 1] < 0).all()
    assert s.block_manager.stats()["num_host_hit_blocks"] == 0


def test_blocks_are_not_offloaded_when_no_hit_could_pay_for_its_copy():
    s = evicted_to_host(SwapCosts(load_s_per_block=1e-3, recompute_s_per_block=1e-4, step_s=0))
    stats = s.block_manager.stats()
    assert stats["num_evicted_blocks"] >= 8 and stats["num_offloaded_blocks"] == 0


def test_swap_costs_pay_for_a_copy_only_past_the_steps_wait():
    costs = SwapCosts(load_s_per_block=1e-4, recompute_s_per_block=5e-4, step_s=2e-3)
    assert not costs.loads_pay(4)  # 0.4 + 2 ms against 2 ms
    assert costs.loads_pay(6)  # 0.6 + 2 ms against 3 ms


def test_a_request_does_not_wait_for_a_block_it_could_not_take():
    s = caching_scheduler(64, max_num_tokens=100)
    s.add(seq_of("warm", PREFIX[:4] + [1, 2]))
    run_to_completion(s)
    # the same 8 tokens twice: block 0 cached, block 1 holds each one's last token, which a
    # step must compute anyway: both run at once
    for name in "ab":
        s.add(seq_of(name, PREFIX[:8]))
    assert step(s) == [("a", 4), ("b", 4)]
