"""The torch engine on the real SmolLM2 (fp32, CPU): parity with transformers, in-flight batching
with chunked prefill, and a KV cache too small for the load under both scheduler policies.

Every engine here runs with overlap scheduling (step N+1 launched before step N's tokens are
read, as on CUDA), so preemption and chunking are checked with tokens pending on the device; the
other engine tests run the CPU's default, one step at a time."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.core.engine_times import request_ms
from tests.conftest import hf_greedy_tokens

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village at the edge of a dark and ancient forest, there lived",
    "List three primary colors:",
    "Water boils at a temperature of",
    "The quick brown fox",
    "Translate to French: Good morning, how are you today?",
    "In machine learning, overfitting means",
]
NUM_NEW_TOKENS = 32


@pytest.fixture(scope="module")
def engine(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", overlap_scheduling=True)


@pytest.fixture(scope="module")
def prompt_ids(engine) -> list[list[int]]:
    return [engine.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_greedy(smollm_hf_dir, prompt_ids, engine) -> list[list[int]]:
    """transformers' greedy tokens, one prompt at a time, cut before eos (the engine drops it)."""
    return hf_greedy_tokens(smollm_hf_dir, prompt_ids, engine.eos_token_ids, NUM_NEW_TOKENS)


def test_greedy_tokens_equal_transformers(engine, prompt_ids, hf_greedy):
    before = engine.stats()
    outputs = engine.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in outputs] == hf_greedy
    for out, ids, ref in zip(outputs, prompt_ids, hf_greedy, strict=True):
        assert out.prompt_token_ids == ids
        assert out.finish_reason == ("length" if len(ref) == NUM_NEW_TOKENS else "stop")
        assert out.text == engine.tokenizer.decode(ref, skip_special_tokens=True)
        assert out.arrival_time_s <= out.first_token_time_s <= out.finish_time_s
    stats = engine.stats()
    assert stats["num_free_blocks"] == stats["num_total_blocks"]
    assert stats["num_running"] == stats["num_waiting"] == 0
    assert stats["num_finished_requests"] - before["num_finished_requests"] == len(prompt_ids)
    times = request_ms(stats, before)  # these requests' means, in the engine's order of events
    slowest = max(1e3 * (o.finish_time_s - o.arrival_time_s) for o in outputs)
    assert 0 <= times["request_queue_ms"] <= times["request_first_token_ms"]
    assert times["request_first_token_ms"] < times["request_final_ms"] <= slowest


def test_multistep_greedy_tokens_equal_transformers(smollm_engine_dir, prompt_ids, hf_greedy):
    # 3 steps a launch: 32 tokens end inside a launch, whose last rows are padding
    multistep = LLMEngine.from_engine_dir(
        smollm_engine_dir, device="cpu", overlap_scheduling=True, num_scheduler_steps=3
    )
    outputs = multistep.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in outputs] == hf_greedy
    stats = multistep.stats()
    assert stats["num_free_blocks"] == stats["num_total_blocks"]
    # every launch is 3 steps, the prompt step's too
    assert stats["num_steps"] == 3 * -(-NUM_NEW_TOKENS // 3)


def test_string_prompts_are_tokenized(engine, hf_greedy):
    (out,) = engine.generate(PROMPTS[:1], SamplingParams(max_tokens=4))
    assert out.token_ids == hf_greedy[0][:4]


@pytest.mark.parametrize("steps_per_launch", [1, 3], ids=["one-step", "multistep"])
def test_inflight_chunked_batching_equals_one_at_a_time(
    engine, smollm_engine_dir, prompt_ids, steps_per_launch
):
    params = SamplingParams(max_tokens=10)
    alone = [engine.generate([ids], params)[0].token_ids for ids in prompt_ids]
    # a 16-token budget per step: the 20+ token prompt can only run in chunks, decodes share
    # steps with prompt chunks, and half the requests arrive while the others are decoding
    assert max(len(ids) for ids in prompt_ids) > 16
    inflight = LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        max_num_tokens=16,
        overlap_scheduling=True,
        num_scheduler_steps=steps_per_launch,
    )
    ids_by_request, tokens = {}, {}
    for ids in prompt_ids[:4]:
        ids_by_request[inflight.add_request(ids, params)] = ids
    num_steps = 0
    while inflight.has_unfinished():
        if num_steps == 3:
            for ids in prompt_ids[4:]:
                ids_by_request[inflight.add_request(ids, params)] = ids
        for delta in inflight.step():
            tokens.setdefault(delta.request_id, []).extend(delta.token_ids)
        num_steps += 1
        assert inflight.stats()["num_scheduled_tokens"] <= 16 * num_steps * steps_per_launch
    order = {tuple(ids): i for i, ids in enumerate(prompt_ids)}
    got = [None] * len(prompt_ids)
    for request_id, ids in ids_by_request.items():
        got[order[tuple(ids)]] = tokens[request_id]
    assert got == alone


@pytest.mark.parametrize("num_steps", [1, 3], ids=["one-step", "multistep"])
@pytest.mark.parametrize("policy", ["guaranteed_no_evict", "max_utilization"])
def test_small_kv_cache_queues_or_preempts_and_stays_correct(
    smollm_engine_dir, prompt_ids, hf_greedy, policy, num_steps
):
    # 5 blocks of 16 tokens; each request needs 2-3 blocks for prompt + 20 new tokens
    small = LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        num_kv_blocks=5,
        scheduler_policy=policy,
        overlap_scheduling=True,
        num_scheduler_steps=num_steps,
    )
    chosen = [0, 2, 3, 6]
    for i in chosen:
        small.add_request(prompt_ids[i], SamplingParams(max_tokens=20), request_id=str(i))
    tokens, max_waiting = {}, 0
    while small.has_unfinished():
        for delta in small.step():
            tokens.setdefault(delta.request_id, []).extend(delta.token_ids)
        max_waiting = max(max_waiting, small.stats()["num_waiting"])
    assert {int(k): v for k, v in tokens.items()} == {i: hf_greedy[i][:20] for i in chosen}
    stats = small.stats()
    assert max_waiting > 0  # the cache could not hold every request at once
    if policy == "max_utilization":
        assert stats["num_preemptions"] > 0
    else:
        assert stats["num_preemptions"] == 0
    assert stats["num_free_blocks"] == stats["num_total_blocks"] == 5
    with pytest.raises(ValueError, match="can never fit"):
        small.add_request(prompt_ids[0], SamplingParams(max_tokens=100))


def test_prompt_logits_equal_transformers_while_requests_run(
    engine, smollm_hf_dir, prompt_ids, hf_greedy
):
    ids = prompt_ids[2][:16]
    model = AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        expected = model(torch.tensor([ids])).logits[0]  # [S, V]
    running = engine.add_request(prompt_ids[0], SamplingParams(max_tokens=4))
    tokens = [t for d in engine.step() if d.request_id == running for t in d.token_ids]
    logits = engine.prompt_logits([ids, ids])  # [2, S, V], while `running` owns KV blocks
    torch.testing.assert_close(logits[0], expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(logits[1], logits[0])
    while engine.has_unfinished():
        tokens += [t for d in engine.step() if d.request_id == running for t in d.token_ids]
    assert tokens == hf_greedy[0][:4]  # scoring did not disturb the running request
