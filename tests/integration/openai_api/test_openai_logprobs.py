"""Log probabilities through the frontend, against transformers on the same SmolLM2 weights
(float32): /v1/completions' echo + logprobs + max_tokens=0 (a prompt scored, nothing generated)
through the `openai` SDK, streamed echo with generated tokens, chat's logprobs + top_logprobs
whole and streamed."""

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.engine import SamplingParams
from tests.integration.openai_api.conftest import MAX_TOKENS, QUESTION, chat_text

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The capital of France is Paris, and the capital of Germany is"
TOP = 5
REL = 1e-4


@pytest.fixture(scope="module")
def hf_model(smollm_hf_dir):
    return AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()


@torch.inference_mode()
def hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0].float().log_softmax(-1)


def test_echo_logprobs_of_a_prompt_alone_equal_transformers(sdk, tokenizer, hf_model, model_name):
    ids = tokenizer(PROMPT).input_ids
    out = sdk.completions.create(
        model=model_name, prompt=PROMPT, max_tokens=0, echo=True, logprobs=TOP, temperature=0
    )
    choice = out.choices[0]
    assert choice.text == PROMPT and out.usage.completion_tokens == 0
    assert choice.finish_reason == "length"
    lp = choice.logprobs
    assert lp.tokens == [tokenizer.decode([t]) for t in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    want = hf_logprobs(hf_model, ids)[:-1]
    got = torch.tensor(lp.token_logprobs[1:], dtype=torch.float64)
    expected = want.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].double()
    assert torch.allclose(got, expected, rtol=REL, atol=1e-5)
    top_values, top_ids = want.topk(TOP, dim=-1)
    for position, entry in enumerate(lp.top_logprobs[1:]):
        texts = [tokenizer.decode([t]) for t in top_ids[position].tolist()]
        for text, value in zip(texts, top_values[position].tolist(), strict=True):
            assert entry[text] == pytest.approx(value, rel=REL, abs=1e-5)
    offsets = [sum(len(t) for t in lp.tokens[:i]) for i in range(len(ids))]
    assert lp.text_offset == offsets


def test_streamed_echo_with_tokens_has_the_prompt_first(sdk, engine, tokenizer, model_name):
    ids = tokenizer(PROMPT).input_ids
    (want,) = engine.generate(
        [ids], SamplingParams(max_tokens=MAX_TOKENS, logprobs=2, prompt_logprobs=2)
    )
    chunks = list(
        sdk.completions.create(
            model=model_name,
            prompt=PROMPT,
            max_tokens=MAX_TOKENS,
            echo=True,
            logprobs=2,
            temperature=0,
            stream=True,
        )
    )
    parts = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
    tokens = [t for p in parts for t in p.tokens]
    values = [v for p in parts for v in p.token_logprobs]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == PROMPT + want.text
    assert tokens == [tokenizer.decode([t]) for t in ids + want.token_ids]
    assert values[0] is None
    assert values[1:] == pytest.approx(want.prompt.logprobs[1:] + want.logprobs, abs=1e-4)
    offsets = [o for p in parts for o in p.text_offset]
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_top_logprobs_are_the_engines(sdk, engine, tokenizer, model_name, stream):
    ids = tokenizer(chat_text(tokenizer, QUESTION), add_special_tokens=False).input_ids
    (want,) = engine.generate([ids], SamplingParams(max_tokens=MAX_TOKENS, logprobs=3))
    out = sdk.chat.completions.create(
        model=model_name,
        messages=QUESTION,
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        stream=stream,
    )
    if stream:
        entries = [
            e
            for c in out
            if c.choices and c.choices[0].logprobs
            for e in c.choices[0].logprobs.content
        ]
    else:
        entries = out.choices[0].logprobs.content
    assert [e.token for e in entries] == [tokenizer.decode([t]) for t in want.token_ids]
    assert [e.logprob for e in entries] == pytest.approx(want.logprobs, abs=1e-4)
    for entry, top in zip(entries, want.top_logprobs, strict=True):
        assert [t.token for t in entry.top_logprobs] == [tokenizer.decode([i]) for i, _ in top]
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(
            [v for _, v in top], abs=1e-4
        )
        assert entry.top_logprobs[0].bytes == list(entry.top_logprobs[0].token.encode())


def test_top_logprobs_past_twenty_are_refused(sdk, model_name):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.completions.create(model=model_name, prompt=PROMPT, logprobs=21)
    assert err.value.body["param"] == "logprobs"
