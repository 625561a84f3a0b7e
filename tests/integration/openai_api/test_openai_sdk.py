"""The official `openai` SDK, sync and async, streamed and not, against the frontend: the gRPC
client's greedy text, the tokenizer's counts, stop strings, seeded choices, and the engine's own
penalties and log probabilities."""

import asyncio

import openai
import pytest

from tests.integration.openai_api.conftest import (
    API_KEY,
    MAX_TOKENS,
    PROMPTS,
    QUESTION,
    chat_text,
    finish_reason,
    grpc_answer,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_sync_completions_equal_the_grpc_client_with_tokenizer_counts(
    sdk, grpc, tokenizer, model_name
):
    for prompt in PROMPTS:
        text, num_tokens = grpc_answer(grpc, prompt)
        out = sdk.completions.create(
            model=model_name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0
        )
        assert out.choices[0].text == text
        assert out.choices[0].finish_reason == finish_reason(num_tokens)
        assert out.usage.prompt_tokens == len(tokenizer(prompt).input_ids)
        assert out.usage.completion_tokens == num_tokens
        assert out.usage.total_tokens == out.usage.prompt_tokens + num_tokens


def test_sync_chat_stream_equals_the_grpc_client_with_usage_last(sdk, grpc, tokenizer, model_name):
    text, num_tokens = grpc_answer(grpc, chat_text(tokenizer, QUESTION))
    chunks = list(
        sdk.chat.completions.create(
            model=model_name,
            messages=QUESTION,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == text
    assert len([d for d in deltas if d.content]) > 1  # streamed, not one piece
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == finish_reason(
        num_tokens
    )
    assert not chunks[-1].choices and all(c.usage is None for c in chunks[:-1])
    template_ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
    assert chunks[-1].usage.prompt_tokens == len(template_ids["input_ids"])
    assert chunks[-1].usage.completion_tokens == num_tokens


def test_async_sdk_streamed_and_whole_at_once(api, grpc, tokenizer, model_name):
    expected_chat = grpc_answer(grpc, chat_text(tokenizer, QUESTION))
    expected = [grpc_answer(grpc, p) for p in PROMPTS]

    async def run():
        async with openai.AsyncOpenAI(
            base_url=f"{api.url}/v1", api_key=API_KEY, max_retries=0, timeout=300
        ) as client:

            async def streamed(prompt: str) -> str:
                stream = await client.completions.create(
                    model=model_name,
                    prompt=prompt,
                    max_tokens=MAX_TOKENS,
                    temperature=0,
                    stream=True,
                )
                return "".join([c.choices[0].text async for c in stream if c.choices])

            chat = client.chat.completions.create(
                model=model_name,
                messages=QUESTION,
                max_completion_tokens=MAX_TOKENS,
                temperature=0,
            )
            return await asyncio.gather(chat, *(streamed(p) for p in PROMPTS))

    chat, *texts = asyncio.run(run())
    assert chat.choices[0].message.content == expected_chat[0]
    assert chat.usage.completion_tokens == expected_chat[1]
    assert texts == [text for text, _ in expected]


def test_stop_string_ends_the_text_before_it(sdk, grpc, model_name):
    text, _ = grpc_answer(grpc, PROMPTS[0])
    stop = text.split()[1]  # a word inside the greedy answer
    out = sdk.completions.create(
        model=model_name, prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, stop=[stop]
    )
    assert out.choices[0].text == text[: text.index(stop)]
    assert out.choices[0].finish_reason == "stop"


def test_n_sampled_choices_are_reproducible_with_a_seed(sdk, model_name):
    def sample():
        out = sdk.completions.create(
            model=model_name, prompt=PROMPTS[1], max_tokens=8, temperature=1.0, n=2, seed=7
        )
        assert [c.index for c in out.choices] == [0, 1]
        return [c.text for c in out.choices], out.usage.completion_tokens

    first = sample()
    assert sample() == first
    assert 2 <= first[1] <= 2 * 8  # usage counts every choice's tokens


def test_penalties_and_log_probabilities_are_the_engines(sdk, engine, tokenizer, model_name):
    from pipeline.engine import SamplingParams

    prompt = "List the colours: red, blue, red, blue, red,"
    ids = tokenizer(prompt).input_ids
    penalties = {"frequency_penalty": 1.5, "presence_penalty": 0.5}
    penalized, plain = engine.generate(
        [ids, ids],
        [
            # OpenAI's penalties count generated tokens only: the prompt is skipped
            SamplingParams(max_tokens=MAX_TOKENS, prompt_ignore_length=len(ids), **penalties),
            SamplingParams(max_tokens=MAX_TOKENS, logprobs=0),
        ],
    )
    assert penalized.token_ids != plain.token_ids  # the penalties change this greedy answer
    out = sdk.completions.create(
        model=model_name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, **penalties
    )
    assert out.choices[0].text == penalized.text

    out = sdk.completions.create(
        model=model_name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, logprobs=0
    )
    logprobs = out.choices[0].logprobs
    assert out.choices[0].text == plain.text == "".join(logprobs.tokens)
    assert len(logprobs.token_logprobs) == out.usage.completion_tokens == len(plain.token_ids)
    assert logprobs.token_logprobs == pytest.approx(plain.logprobs, abs=1e-3)

    chunks = list(
        sdk.chat.completions.create(
            model=model_name,
            messages=QUESTION,
            max_tokens=MAX_TOKENS,
            temperature=0,
            logprobs=True,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    entries = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert len(entries) == chunks[-1].usage.completion_tokens
    assert all(e.logprob <= 0 and e.top_logprobs == [] for e in entries)
