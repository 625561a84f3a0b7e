"""Guided decoding and tool calls served: SmolLM2 behind tritonserver and the OpenAI frontend.
JSON-schema answers parse and validate, a regex answer matches, free requests beside guided
ones keep their greedy text, a named tool call comes back with valid arguments through the
`openai` SDK (streamed and whole), the ensemble and the BLS take upstream's guided decoding
inputs, and a grammar the engine cannot compile is the request's 400."""

import asyncio
import json
import re

import jsonschema
import numpy as np
import openai
import pytest

from pipeline.client import GenerateRequest, GrpcClient
from tests.integration.openai_api.conftest import (
    API_KEY,
    MAX_IN_FLIGHT,
    PROMPTS,
    grpc_answer,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]

NUM_SCHEMA_REQUESTS = 100
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "level": {"enum": ["low", "mid", "high"]},
        "scores": {"type": "array", "items": {"type": "integer", "maximum": 99}, "maxItems": 2},
        "owner": {
            "type": "object",
            "properties": {"id": {"type": "integer", "maximum": 999}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "level", "scores", "owner"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def async_client(api) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=API_KEY, max_retries=0, timeout=600)


def test_json_schema_answers_all_validate(api, model_name):
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "record", "schema": SCHEMA, "strict": True},
    }

    async def run() -> list:
        gate = asyncio.Semaphore(MAX_IN_FLIGHT)
        async with async_client(api) as client:

            async def one(i: int):
                async with gate:
                    return await client.chat.completions.create(
                        model=model_name,
                        messages=[{"role": "user", "content": f"Describe record number {i}."}],
                        response_format=response_format,
                        max_tokens=80,
                        temperature=0.7,
                        seed=i,
                    )

            return await asyncio.gather(*(one(i) for i in range(NUM_SCHEMA_REQUESTS)))

    for out in asyncio.run(run()):
        choice = out.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_regex_answer_matches(sdk, model_name):
    regex = r"(19|20)[0-9]{2}-[01][0-9]"
    out = sdk.completions.create(
        model=model_name,
        prompt="The date of the event was",
        max_tokens=12,
        temperature=0,
        extra_body={"guided_regex": regex},
    )
    assert re.fullmatch(regex, out.choices[0].text), out.choices[0].text
    assert out.choices[0].finish_reason == "stop"


def test_free_requests_beside_guided_ones_keep_their_greedy_text(api, grpc, model_name):
    expected = [grpc_answer(grpc, prompt)[0] for prompt in PROMPTS]

    async def run() -> list[str]:
        async with async_client(api) as client:

            async def free(prompt: str) -> str:
                out = await client.completions.create(
                    model=model_name, prompt=prompt, max_tokens=12, temperature=0
                )
                return out.choices[0].text

            async def guided(prompt: str) -> str:
                out = await client.completions.create(
                    model=model_name,
                    prompt=prompt,
                    max_tokens=24,
                    temperature=0,
                    extra_body={"guided_json": SCHEMA},
                )
                return out.choices[0].text

            texts = await asyncio.gather(
                free(PROMPTS[0]), guided(PROMPTS[0]), free(PROMPTS[1]), guided(PROMPTS[1])
            )
            return [texts[0], texts[2]]

    assert asyncio.run(run()) == expected


def test_a_named_tool_call_whole_and_streamed(sdk, model_name):
    whole = sdk.chat.completions.create(
        model=model_name, messages=ASK, tools=[WEATHER], tool_choice=NAMED, max_tokens=60
    )
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])

    stream = sdk.chat.completions.create(
        model=model_name,
        messages=ASK,
        tools=[WEATHER],
        tool_choice=NAMED,
        max_tokens=60,
        stream=True,
    )
    calls, reasons = {}, []
    for chunk in stream:
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta_call.index, {"name": "", "arguments": ""})
            entry["name"] += delta_call.function.name or ""
            entry["arguments"] += delta_call.function.arguments or ""
        reasons.append(chunk.choices[0].finish_reason)
    assert reasons[-1] == "tool_calls"
    # the second request reads its prompt's K/V from the prefix cache: a near-tie argument
    # ("celsius" / "fahrenheit") may round either way, so each call is checked on its own
    assert list(calls) == [0] and calls[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER["function"]["parameters"])


def test_a_tool_conversation_renders(sdk, model_name):
    tool = {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    out = sdk.chat.completions.create(
        model=model_name, messages=messages, tools=[tool], max_tokens=8, temperature=0
    )
    assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert out.usage.prompt_tokens > 0


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_the_ensemble_and_bls_take_upstreams_guided_decoding_inputs(triton, model):
    client = GrpcClient(triton.endpoints.grpc_url, model=model, timeout_s=120)
    arrays = GenerateRequest("The year after 2024 is", max_tokens=8).arrays(stream=True)
    arrays["guided_decoding_guide_type"] = np.array([[b"regex"]], object)
    arrays["guided_decoding_guide"] = np.array([[rb"\d+"]], object)
    text = "".join(r.text or "" for r in client.responses(arrays, count_tokens=True))
    assert re.fullmatch(r"\d+", text), text


def test_a_grammar_the_engine_cannot_compile_is_a_400_naming_it(sdk, model_name):
    with pytest.raises(openai.BadRequestError, match="guided_decoding_guide"):
        sdk.completions.create(
            model=model_name,
            prompt="x",
            max_tokens=4,
            extra_body={"guided_grammar": "root ::= undefined_rule"},
        )
