"""Prefix caching and its host tier on the real SmolLM2 (fp32, CPU, 16-token blocks): greedy
tokens equal with caching on and off, and equal transformers', for a shared prompt prefix, a
prefix that ends mid-block, preemption of sequences that share blocks, eviction from a tiny KV
pool, and blocks that went to the host tier and came back. Every engine runs with overlap
scheduling (tokens pending on the device while the next step is scheduled)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.engine import LLMEngine, SamplingParams
from tests.conftest import greedy_tokens_of

SYSTEM = (
    "You are a careful assistant for a small library. Answer in one short sentence, name the "
    "shelf where the book is kept, and never invent titles that the catalogue does not list. "
)
QUESTIONS = [
    "Moby Dick is kept on the shelf",
    "Atlases and maps are found near the",
    "The cookbooks sit on",
]
OTHERS = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch",
    "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n    middle =",
    "Photosynthesis is the process by which green plants turn sunlight, water and air into",
]
NUM_NEW = 12
BLOCK = 16  # the smollm_engine_dir fixture's tokens_per_block


@pytest.fixture(scope="module")
def tokenizer(smollm_engine_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm_engine_dir / "tokenizer")


@pytest.fixture(scope="module")
def hf_model(smollm_hf_dir):
    return AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()


def run_waves(engine: LLMEngine, waves: list[list[list[int]]]):
    """Each wave's prompts together, after the wave before has finished: its outputs."""
    params = SamplingParams(max_tokens=NUM_NEW)
    return [out for wave in waves for out in engine.generate(wave, params)]


def engines(path, **runtime) -> tuple[LLMEngine, LLMEngine]:
    on = LLMEngine.from_engine_dir(path, device="cpu", overlap_scheduling=True, **runtime)
    runtime.pop("host_kv_cache_gb", None)  # the host tier keeps cached blocks: none here
    off = LLMEngine.from_engine_dir(
        path, device="cpu", overlap_scheduling=True, enable_prefix_caching=False, **runtime
    )
    return on, off


def check_equal(smollm_engine_dir, hf_model, waves, **runtime):
    """Greedy tokens with caching on == off == transformers; returns (outputs on, stats on)."""
    on, off = engines(smollm_engine_dir, **runtime)
    got_on, got_off = run_waves(on, waves), run_waves(off, waves)
    prompts = [ids for wave in waves for ids in wave]
    expected = greedy_tokens_of(hf_model, prompts, on.eos_token_ids, NUM_NEW)
    assert [o.token_ids for o in got_on] == expected
    assert [o.token_ids for o in got_off] == expected
    assert all(o.num_cached_tokens == 0 for o in got_off)
    assert off.stats()["num_prefix_hit_tokens"] == 0
    stats = on.stats()
    assert stats["num_free_blocks"] == stats["num_total_blocks"]
    return got_on, stats


def common_len(a: list[int], b: list[int]) -> int:
    pairs = zip(a, b, strict=False)
    return next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))


def test_shared_prefix_is_reused_and_reported(smollm_engine_dir, hf_model, tokenizer):
    prompts = [tokenizer.encode(SYSTEM + q) for q in QUESTIONS]
    first, rest = prompts[0], prompts[1:]
    outputs, stats = check_equal(smollm_engine_dir, hf_model, [[first], rest])
    assert outputs[0].num_cached_tokens == 0
    seen = first + outputs[0].token_ids
    for ids, out in zip(rest, outputs[1:], strict=True):
        # at least the full blocks the first request left cached, never the last prompt token
        floor = min(common_len(ids, seen), len(ids) - 1) // BLOCK * BLOCK
        assert floor >= 2 * BLOCK
        assert floor <= out.num_cached_tokens <= len(ids) - 1
    assert stats["num_prefix_hit_tokens"] == sum(o.num_cached_tokens for o in outputs)
    assert stats["num_prefix_queried_tokens"] == sum(len(ids) for ids in prompts)
    assert stats["num_cached_blocks"] > 0


@pytest.mark.parametrize("length", [40, 48], ids=["mid-block", "block-aligned"])
def test_a_repeated_prompt_computes_its_partial_block_and_last_token(
    smollm_engine_dir, hf_model, tokenizer, length
):
    ids = tokenizer.encode(SYSTEM * 2)[:length]
    longer = ids + tokenizer.encode(" and the maps?")
    outputs, _ = check_equal(smollm_engine_dir, hf_model, [[ids], [ids], [longer]])
    # 40 tokens: 2 full blocks; 48: 3 full blocks, the last holding the last prompt token
    assert [o.num_cached_tokens for o in outputs[:2]] == [0, (length - 1) // BLOCK * BLOCK]
    assert outputs[2].num_cached_tokens >= length // BLOCK * BLOCK


def test_preempted_sequences_sharing_blocks_release_and_rematch(
    smollm_engine_dir, hf_model, tokenizer
):
    prompts = [tokenizer.encode(SYSTEM + q) for q in QUESTIONS + ["Books of poetry are kept in"]]
    # 7 blocks: the last three share the first's two system-prompt blocks, but their own tails
    # and new tokens do not all fit: the newest is preempted while holding shared blocks
    outputs, stats = check_equal(
        smollm_engine_dir,
        hf_model,
        [prompts[:1], prompts[1:]],
        num_kv_blocks=7,
        scheduler_policy="max_utilization",
        num_scheduler_steps=3,
    )
    assert stats["num_preemptions"] > 0
    assert all(o.num_cached_tokens > 0 for o in outputs[1:])


def test_a_tiny_pool_evicts_least_recently_used_and_stays_correct(
    smollm_engine_dir, hf_model, tokenizer
):
    prompts = [tokenizer.encode(text) for text in OTHERS]
    # 4 blocks: each request needs 2; the cached ones of the earlier requests are evicted
    waves = [[ids] for ids in prompts + prompts[:1]]
    outputs, stats = check_equal(smollm_engine_dir, hf_model, waves, num_kv_blocks=4)
    assert stats["num_evicted_blocks"] > 0
    assert stats["num_host_hit_blocks"] == 0


def test_blocks_offloaded_to_the_host_tier_come_back(smollm_engine_dir, hf_model, tokenizer):
    prompts = [tokenizer.encode(SYSTEM + OTHERS[0])] + [tokenizer.encode(t) for t in OTHERS[1:]]
    # 6 blocks: the first request takes 5, the next two evict them to the host
    waves = [[ids] for ids in prompts + prompts[:1]]
    outputs, stats = check_equal(
        smollm_engine_dir, hf_model, waves, num_kv_blocks=6, host_kv_cache_gb=0.05
    )
    assert stats["num_offloaded_blocks"] > 0 and stats["num_host_hit_blocks"] > 0
    assert outputs[-1].num_cached_tokens >= stats["num_host_hit_blocks"] * BLOCK


@pytest.mark.parametrize("num_steps", [1, 3], ids=["one-step", "multistep"])
def test_a_chat_turn_reuses_the_last_turns_completion(smollm_engine_dir, tokenizer, num_steps):
    # the reply ends a block exactly (24 + 8 tokens): a launch's last decode rows past
    # max_tokens write no block, so the block holding the reply's last token is not complete
    ids = tokenizer.encode(SYSTEM)[:24]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    on, off = engines(smollm_engine_dir, num_scheduler_steps=num_steps)
    turns = {}
    for label, engine in (("on", on), ("off", off)):
        (first,) = engine.generate([ids], params)
        follow_up = ids + first.token_ids + tokenizer.encode(" Which shelf?")
        (second,) = engine.generate([follow_up], params)
        turns[label] = (first.token_ids, second.token_ids, second.num_cached_tokens)
    assert turns["on"][:2] == turns["off"][:2]
    # the first block only: the reply's last token has no K/V, so its block is not reused
    assert turns["on"][2] == 16
