"""Speculative decoding in the torch engine on the real SmolLM2 (fp32, CPU): greedy tokens equal
the engine without it and transformers', for prompt lookup and draft models (the target itself:
every draft accepted; its first 2 layers: some rejected), in mixed batches and under preemption.
"""

import json
import shutil
from pathlib import Path

import pytest

from pipeline.engine import LLMEngine, SamplingParams
from tests.conftest import hf_greedy_tokens

PASSAGE = (
    "The committee met on Tuesday to review the budget. The budget covers roads, schools and "
    "parks. The committee approved the budget for roads, schools and parks."
)
PROMPTS = [
    f"Copy this text exactly.\nText: {PASSAGE}\nCopy: {PASSAGE[:40]}",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The capital of France is",
    "Once upon a time, in a small village,",
]
NUM_NEW_TOKENS = 24


def cut_engine_dir(engine_dir: Path, out: Path, num_layers: int) -> Path:
    """The engine with its first num_layers decoder layers only (same weights file)."""
    out.mkdir()
    config = json.loads((engine_dir / "config.json").read_text())
    config["pretrained_config"]["num_hidden_layers"] = num_layers
    (out / "config.json").write_text(json.dumps(config))
    (out / "rank0.safetensors").symlink_to(engine_dir / "rank0.safetensors")
    shutil.copytree(engine_dir / "tokenizer", out / "tokenizer")
    return out


@pytest.fixture(scope="module")
def baseline(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


@pytest.fixture(scope="module")
def prompt_ids(baseline) -> list[list[int]]:
    return [baseline.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_greedy(smollm_hf_dir, prompt_ids, baseline) -> list[list[int]]:
    return hf_greedy_tokens(smollm_hf_dir, prompt_ids, baseline.eos_token_ids, NUM_NEW_TOKENS)


@pytest.fixture(scope="module")
def baseline_greedy(baseline, prompt_ids) -> list[list[int]]:
    params = SamplingParams(max_tokens=NUM_NEW_TOKENS)
    return [o.token_ids for o in baseline.generate(prompt_ids, params)]


def spec_engine(engine_dir: Path, **speculation) -> LLMEngine:
    return LLMEngine.from_engine_dir(
        engine_dir, device="cpu", speculation={"adaptive": False, **speculation}
    )


def test_baseline_equals_transformers(baseline_greedy, hf_greedy):
    assert baseline_greedy == hf_greedy


def test_prompt_lookup_greedy_equals_without(smollm_engine_dir, prompt_ids, baseline_greedy):
    engine = spec_engine(smollm_engine_dir, method="prompt_lookup", num_draft_tokens=4)
    # one at a time, then all in one batch: rows that accept different lengths share steps
    alone = [
        engine.generate([ids], SamplingParams(max_tokens=NUM_NEW_TOKENS))[0].token_ids
        for ids in prompt_ids
    ]
    assert alone == baseline_greedy
    stats = engine.stats()
    assert stats["spec_num_accepted_tokens"] > 0  # the copy prompt's drafts are taken
    assert stats["num_steps"] < sum(len(t) for t in baseline_greedy)
    batched = engine.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in batched] == baseline_greedy
    after = engine.stats()
    assert after["num_free_blocks"] == after["num_total_blocks"]
    assert 0 < after["spec_acceptance_rate"] < 1


def test_overlap_and_several_steps_a_launch_between_verify_steps(
    smollm_engine_dir, prompt_ids, baseline_greedy
):
    # steps without drafts keep overlap scheduling and 3 steps a launch; a step with drafts
    # reads the launch in flight first and runs alone (adaptive: drafts come and go)
    engine = LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        overlap_scheduling=True,
        num_scheduler_steps=3,
        speculation={"method": "prompt_lookup", "num_draft_tokens": 4},
    )
    outputs = engine.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in outputs] == baseline_greedy
    stats = engine.stats()
    assert stats["spec_num_accepted_tokens"] > 0
    assert stats["num_free_blocks"] == stats["num_total_blocks"]


def test_draft_equal_to_target_accepts_every_draft(smollm_engine_dir, prompt_ids, baseline_greedy):
    engine = spec_engine(
        smollm_engine_dir,
        method="draft_model",
        num_draft_tokens=3,
        draft_engine_dir=str(smollm_engine_dir),
    )
    outputs = engine.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in outputs] == baseline_greedy
    stats = engine.stats()
    assert stats["spec_num_drafted_tokens"] > 0
    assert stats["spec_acceptance_rate"] == 1.0
    assert stats["spec_mean_accepted_tokens"] > 2


def test_weaker_draft_is_rejected_sometimes(
    smollm_engine_dir, tmp_path, prompt_ids, baseline_greedy
):
    draft_dir = cut_engine_dir(smollm_engine_dir, tmp_path / "draft", 2)
    engine = spec_engine(
        smollm_engine_dir, method="draft_model", num_draft_tokens=4, draft_engine_dir=str(draft_dir)
    )
    outputs = engine.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in outputs] == baseline_greedy
    stats = engine.stats()
    assert 0 < stats["spec_num_accepted_tokens"] < stats["spec_num_drafted_tokens"]


def test_mixed_batch_with_requests_that_do_not_speculate(
    smollm_engine_dir, prompt_ids, baseline_greedy
):
    engine = spec_engine(smollm_engine_dir, method="prompt_lookup", num_draft_tokens=5)
    params = [
        SamplingParams(max_tokens=NUM_NEW_TOKENS, speculate=i % 2 == 0)
        for i in range(len(prompt_ids))
    ]
    outputs = engine.generate(prompt_ids, params)
    assert [o.token_ids for o in outputs] == baseline_greedy


def test_preemption_mid_speculation(smollm_engine_dir, prompt_ids, baseline_greedy):
    # 6 blocks of 16 tokens for 4 requests of ~40-60 tokens each: verify steps that need k + 1
    # slots preempt the newest request, which recomputes and goes on speculating
    engine = LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        num_kv_blocks=6,
        scheduler_policy="max_utilization",
        speculation={"method": "prompt_lookup", "num_draft_tokens": 4, "adaptive": False},
    )
    outputs = engine.generate(prompt_ids, SamplingParams(max_tokens=NUM_NEW_TOKENS))
    assert [o.token_ids for o in outputs] == baseline_greedy
    stats = engine.stats()
    assert stats["num_preemptions"] > 0
    assert stats["spec_num_accepted_tokens"] > 0
    assert stats["num_free_blocks"] == stats["num_total_blocks"]


def test_adaptive_mode_stops_drafting_what_is_rejected(smollm_engine_dir, tmp_path, prompt_ids):
    # a 1-layer draft is mostly wrong: the adaptive mode cuts its drafts down
    draft_dir = cut_engine_dir(smollm_engine_dir, tmp_path / "draft1", 1)
    fixed, adaptive = (
        LLMEngine.from_engine_dir(
            smollm_engine_dir,
            device="cpu",
            speculation={
                "method": "draft_model",
                "num_draft_tokens": 6,
                "draft_engine_dir": str(draft_dir),
                "adaptive": is_adaptive,
                "draft_token_cost": 0.3,
            },
        )
        for is_adaptive in (False, True)
    )
    params = SamplingParams(max_tokens=NUM_NEW_TOKENS)
    assert [o.token_ids for o in adaptive.generate(prompt_ids[2:], params)] == [
        o.token_ids for o in fixed.generate(prompt_ids[2:], params)
    ]
    fixed_stats, adaptive_stats = fixed.stats(), adaptive.stats()
    assert adaptive_stats["spec_num_drafted_tokens"] < fixed_stats["spec_num_drafted_tokens"]
    assert adaptive_stats["spec_acceptance_rate"] > fixed_stats["spec_acceptance_rate"]


def test_penalties_and_log_probabilities_share_verify_steps(
    smollm_engine_dir, baseline, prompt_ids
):
    # these requests do not draft, but their rows sample among the verify steps' rows
    params = [
        SamplingParams(max_tokens=NUM_NEW_TOKENS),
        SamplingParams(max_tokens=NUM_NEW_TOKENS, repetition_penalty=1.3, logprobs=0),
        SamplingParams(max_tokens=NUM_NEW_TOKENS, temperature=0.8, seed=11, logprobs=0),
        SamplingParams(max_tokens=NUM_NEW_TOKENS, min_tokens=NUM_NEW_TOKENS),
    ]
    want = baseline.generate(prompt_ids, params)
    engine = spec_engine(smollm_engine_dir, method="prompt_lookup", num_draft_tokens=4)
    got = engine.generate(prompt_ids, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    for a, b in zip(got[1:3], want[1:3], strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert engine.stats()["spec_num_accepted_tokens"] > 0


def test_no_drafts_while_more_requests_than_the_limit_are_in_the_engine(
    smollm_engine_dir, prompt_ids, baseline_greedy
):
    # 16-token budget: the prompts are admitted in chunks over several steps, the copy prompt
    # last, so it decodes alone at the end; until then 3-4 requests run or wait (limit 2)
    engine = LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        max_num_tokens=16,
        speculation={"method": "prompt_lookup", "max_batch_size": 2, "adaptive": False},
    )
    order = [1, 2, 3, 0]
    params = SamplingParams(max_tokens=NUM_NEW_TOKENS)
    ids = {engine.add_request(prompt_ids[i], params): i for i in order}
    tokens = {i: [] for i in order}
    observed = []
    engine.launch_policy.pacer.observe = lambda *args: observed.append(args)
    num_verify_steps = num_plain_reads = 0
    while engine.has_unfinished():
        in_engine = len(engine.scheduler.running) + len(engine.scheduler.waiting)
        rows = engine.stats()["spec_num_verify_rows"]
        for delta in engine.step():
            tokens[ids[delta.request_id]] += delta.token_ids
        if engine.stats()["spec_num_verify_rows"] > rows:
            assert in_engine <= 2
            num_verify_steps += 1
        else:
            num_plain_reads += 1
    assert [tokens[i] for i in range(len(order))] == baseline_greedy
    assert num_verify_steps > 0
    # the pacer learns from plain launches only: a verify step's tokens are read at once
    assert len(observed) == num_plain_reads
