"""Log probabilities and logits on real SmolLM2 (float32) against transformers on the same
weights: each generated token's and its top-N, each prompt token's and its top-N (a chunked
prefill included), context and generation logits; greedy tokens the same with them on or off."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.engine import LLMEngine, SamplingParams

PROMPT = "The capital of France is Paris. The capital of Italy is"
LONG_PROMPT = " ".join(["Cats and dogs live in houses with people who feed them."] * 8)
NUM_TOKENS = 8
TOP = 5
REL = 1e-4


@pytest.fixture(
    scope="module",
    params=[(False, 1, None), (True, 1, None), (True, 3, None), (False, 1, 32)],
    ids=["sync", "overlap", "multistep", "chunked"],
)
def engine(smollm_engine_dir, request) -> LLMEngine:
    overlap, num_steps, max_num_tokens = request.param
    return LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        overlap_scheduling=overlap,
        num_scheduler_steps=num_steps,
        max_num_tokens=max_num_tokens,
    )


@pytest.fixture(scope="module")
def model(smollm_hf_dir):
    return AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()


@torch.inference_mode()
def hf_logprobs(model, tokens: list[int]) -> torch.Tensor:
    """[len(tokens), V]: log_softmax of transformers' logits at each position."""
    return model(torch.tensor([tokens])).logits[0].float().log_softmax(-1)


def assert_close(got, want) -> None:
    # relative 1e-4, with a floor for values near 0 (float32 summation order)
    assert np.allclose(np.asarray(got, np.float64), np.asarray(want), rtol=REL, atol=1e-5), np.max(
        np.abs(np.asarray(got) - np.asarray(want))
    )


def assert_top_equal(got: list, want: torch.Tensor) -> None:
    # got: per position ((id, logprob), ...); want [n, V] log probabilities
    values, ids = want.topk(TOP, dim=-1)
    for position, (entry, top_values, top_ids) in enumerate(zip(got, values, ids, strict=True)):
        assert [t for t, _ in entry] == top_ids.tolist(), position
        assert_close([v for _, v in entry], top_values.tolist())


def test_generated_tokens_top_logprobs_equal_transformers(engine, model):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True, logprobs=TOP)
    plain = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True)
    out, off = engine.generate([prompt, prompt], [params, plain])
    assert out.token_ids == off.token_ids and off.logprobs is None and off.top_logprobs is None
    want = hf_logprobs(model, prompt + out.token_ids)[len(prompt) - 1 : -1]
    assert out.token_ids == want.argmax(-1).tolist()  # greedy: transformers' choices
    assert_close(out.logprobs, want.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0])
    assert_top_equal(out.top_logprobs, want)
    assert [top[0][0] for top in out.top_logprobs] == out.token_ids


def test_sampled_tokens_logprobs_are_of_the_raw_distribution(engine, model):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(
        max_tokens=NUM_TOKENS,
        ignore_eos=True,
        logprobs=2,
        temperature=0.7,
        top_k=20,
        seed=11,
        repetition_penalty=1.3,
    )
    (out,) = engine.generate([prompt], params)
    want = hf_logprobs(model, prompt + out.token_ids)[len(prompt) - 1 : -1]
    assert_close(out.logprobs, want.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0])
    assert [[t for t, _ in top] for top in out.top_logprobs] == want.topk(2).indices.tolist()


@pytest.mark.parametrize("text", [PROMPT, LONG_PROMPT], ids=["short", "long"])
def test_prompt_logprobs_equal_transformers(engine, model, text):
    prompt = engine.tokenizer.encode(text)
    params = SamplingParams(max_tokens=2, prompt_logprobs=TOP, return_context_logits=True)
    beside = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True)
    out, other = engine.generate([prompt, prompt[:5]], [params, beside])
    want = hf_logprobs(model, prompt)
    scores = out.prompt
    assert len(scores.logprobs) == len(prompt) and scores.logprobs[0] is None
    targets = torch.tensor(prompt[1:])[:, None]
    assert_close(scores.logprobs[1:], want[:-1].gather(1, targets)[:, 0])
    assert scores.top_logprobs[0] == ()
    assert_top_equal(scores.top_logprobs[1:], want[:-1])
    logits = model(torch.tensor([prompt])).logits[0].detach()
    assert scores.context_logits.shape == tuple(logits.shape)
    assert np.allclose(scores.context_logits, logits.numpy(), rtol=REL, atol=1e-4)
    assert other.prompt is None and other.token_ids  # its neighbour is unaffected


def test_generation_logits_are_the_models(engine, model):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(max_tokens=4, ignore_eos=True, return_generation_logits=True)
    (out,) = engine.generate([prompt], params)
    logits = model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
    assert out.generation_logits.shape == tuple(logits.shape) and out.logprobs is None
    assert np.allclose(out.generation_logits, logits.detach().numpy(), rtol=REL, atol=1e-4)


def test_stream_deltas_carry_the_scores_once(engine):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True, logprobs=1, prompt_logprobs=0)
    request_id = engine.add_request(prompt, params)
    deltas = []
    while engine.has_unfinished():
        deltas += [d for d in engine.step() if d.request_id == request_id]
    prompts = [d.prompt for d in deltas if d.prompt is not None]
    assert len(prompts) == 1 and deltas[0].prompt is prompts[0]
    assert prompts[0].top_logprobs is None and len(prompts[0].logprobs) == len(prompt)
    tops = [t for d in deltas for t in d.top_logprobs]
    assert len(tops) == sum(len(d.token_ids) for d in deltas) == NUM_TOKENS
    assert all(len(t) == 1 for t in tops)
