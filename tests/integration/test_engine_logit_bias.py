"""logit_bias and min_p on real SmolLM2: neutral values change nothing (greedy and seeded
sampling), a bias forces or bans a token, and a batch mixes rows with and without them."""

import pytest

from pipeline.engine import LLMEngine, SamplingParams

PROMPT = "My favourite animal is the cat. My favourite"
NUM_TOKENS = 8


@pytest.fixture(scope="module")
def engine(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


@pytest.fixture(scope="module")
def prompt(engine) -> list[int]:
    return engine.tokenizer.encode(PROMPT)


def params(**knobs) -> SamplingParams:
    return SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True, **knobs)


def test_neutral_values_change_nothing(engine, prompt):
    plain = engine.generate([prompt], params())[0].token_ids
    neutral = params(min_p=0.0, logit_bias=((int(plain[0]), 0.0),))
    assert engine.generate([prompt], neutral)[0].token_ids == plain
    sampled = dict(temperature=0.8, seed=5)
    off = engine.generate([prompt], params(**sampled))[0].token_ids
    assert engine.generate([prompt], params(min_p=0.0, **sampled))[0].token_ids == off


def test_bias_forces_and_bans_within_a_mixed_batch(engine, prompt):
    plain = list(engine.generate([prompt], params())[0].token_ids)
    forced_token = engine.tokenizer.encode(" dog")[0]
    requests = [
        params(logit_bias=((forced_token, 100.0),)),
        params(logit_bias=((plain[0], -100.0),)),
        params(),
        params(temperature=1.0, seed=3, min_p=1.0),  # only the likeliest token survives
    ]
    out = engine.generate([prompt] * len(requests), requests)
    assert list(out[0].token_ids) == [forced_token] * NUM_TOKENS
    assert out[1].token_ids[0] != plain[0]
    assert list(out[2].token_ids) == plain
    assert list(out[3].token_ids) == plain  # min_p=1: greedy's token at temperature 1
