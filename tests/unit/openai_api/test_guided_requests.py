"""Guided decoding and tool calls in the OpenAI request layer: each form becomes its grammar
(or a 400 naming the parameter), tools become a forced call's schema, and calls are read back
out of the model's text, whole and streamed."""

import asyncio
import json

import jsonschema
import pytest

from pipeline.openai_api.errors import APIError
from pipeline.openai_api.generation import Piece
from pipeline.openai_api.guides import request_guide
from pipeline.openai_api.protocol import ChatCompletionRequest, CompletionRequest
from pipeline.openai_api.tool_calls import (
    HERMES,
    LLAMA3_JSON,
    call_format,
    parse_calls,
    template_messages,
    tool_plan,
)
from pipeline.openai_api.tool_stream import tool_pieces

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
HERMES_TEMPLATE = "{% for tool in tools %}{{ tool }}{% endfor %}<tool_call>"
LLAMA_TEMPLATE = '{{- \'Respond in the format {"name": name, "parameters": args}.\' }}'


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({**CHAT, **fields})


@pytest.mark.parametrize(
    ("fields", "kind", "text"),
    [
        ({"response_format": {"type": "text"}}, None, None),
        ({"response_format": {"type": "json_object"}}, "json_schema", '{"type": "object"}'),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {}},
                }
            },
            "json_schema",
            "{}",
        ),
        ({"guided_json": {"type": "integer"}}, "json_schema", '{"type": "integer"}'),
        ({"guided_json": '{"type": "integer"}'}, "json_schema", '{"type": "integer"}'),
        ({"guided_regex": "[a-z]+"}, "regex", "[a-z]+"),
        ({"guided_choice": ["yes", 'say "no"']}, "ebnf_grammar", 'root ::= "yes" | "say \\"no\\""'),
        ({"guided_grammar": "root ::= [0-9]+"}, "ebnf_grammar", "root ::= [0-9]+"),
    ],
)
def test_each_form_is_its_grammar(fields, kind, text):
    guide = request_guide(chat(**fields))
    assert (guide and guide.type, guide and guide.text) == (kind, text)


def test_completions_take_vllms_guided_fields():
    request = CompletionRequest.model_validate({"model": "m", "prompt": "p", "guided_regex": "a+"})
    assert request_guide(request).type == "regex"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_json": "[1]"}, "guided_json"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_regex"),
        ({"tool_choice": "auto"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ],
)
def test_bad_forms_are_400s_naming_the_parameter(fields, param):
    request = chat(**fields)
    with pytest.raises(APIError) as info:
        plan = tool_plan(request, HERMES_TEMPLATE)
        request_guide(request, plan.guide if plan else None)
    assert info.value.status == 400 and info.value.param == param


def test_format_follows_the_chat_template():
    assert call_format(HERMES_TEMPLATE) == HERMES
    assert call_format(LLAMA_TEMPLATE) == LLAMA3_JSON
    assert call_format(None) == HERMES


@pytest.mark.parametrize("template", [HERMES_TEMPLATE, LLAMA_TEMPLATE])
def test_forced_calls_are_constrained_by_the_tools_schemas(template):
    named = tool_plan(
        chat(
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        ),
        template,
    )
    key = named.arguments_key
    schema = json.loads(named.guide.text)
    jsonschema.validate({"name": "get_weather", key: {"city": "Oslo"}}, schema)
    for bad in ({"name": "get_time", key: {}}, {"name": "get_weather", key: {"unit": "c"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    required = tool_plan(chat(tools=[WEATHER, TIME], tool_choice="required"), template)
    schema = json.loads(required.guide.text)
    jsonschema.validate({"name": "get_time", key: {}}, schema)
    (call,) = parse_calls(json.dumps({"name": "get_time", key: {}}), required)[1]
    assert call["function"] == {"name": "get_time", "arguments": "{}"}


def test_auto_calls_are_read_out_of_hermes_text():
    plan = tool_plan(chat(tools=[WEATHER, TIME]), HERMES_TEMPLATE)
    assert plan.guide is None and plan.mode == "auto"
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        '</tool_call>\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    content, calls = parse_calls(text, plan)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    assert parse_calls("no call here", plan) == ("no call here", [])
    unknown = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    assert parse_calls(unknown, plan) == (unknown, [])


def test_auto_calls_in_llama3_json():
    plan = tool_plan(chat(tools=[WEATHER]), LLAMA_TEMPLATE)
    content, calls = parse_calls('{"name": "get_weather", "parameters": {"city": "Rome"}}', plan)
    assert content == "" and json.loads(calls[0]["function"]["arguments"]) == {"city": "Rome"}


def test_earlier_calls_and_tool_results_reach_the_template():
    request = chat(
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
        ]
    )
    messages = template_messages(request.messages)
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    assert messages[2] == {"role": "tool", "content": "12 C", "tool_call_id": "call_1"}


def streamed(plan, texts: list[str]) -> list[Piece]:
    async def pieces():
        for i, text in enumerate(texts, 1):
            yield Piece(text, i, "stop" if i == len(texts) else None, (i,))

    async def run():
        return [p async for p in tool_pieces(pieces(), plan)]

    return asyncio.run(run())


def test_streamed_content_flows_and_calls_come_whole_at_the_end():
    plan = tool_plan(chat(tools=[WEATHER]), HERMES_TEMPLATE)
    texts = [
        "Sure",
        ". <tool",
        '_call>{"name": "get_weather", ',
        '"arguments": {"city": "Oslo"}}',
        "</tool_call>",
    ]
    out = streamed(plan, texts)
    assert "".join(p.text for p in out) == "Sure. "
    assert out[-1].finish_reason == "tool_calls"
    assert out[-1].tool_calls[0]["function"]["name"] == "get_weather"
    plain = streamed(plan, ["The answer ", "is <b>42</b>", "."])
    assert "".join(p.text for p in plain) == "The answer is <b>42</b>."
    assert plain[-1].finish_reason == "stop" and not plain[-1].tool_calls


def test_a_guide_travels_as_the_tensorrtllm_backends_string_inputs():
    from tritonclient.utils import deserialize_bytes_tensor

    from pipeline.openai_api.triton_llm import _infer_request, request_arrays
    from pipeline.request.guided import GuidedDecoding
    from pipeline.request.sampling_params import SamplingParams

    schema = '{"type": "object", "title": "é"}'
    guided = SamplingParams(guide=GuidedDecoding("json_schema", schema))
    request = _infer_request("tensorrt_llm", request_arrays([1, 2], guided, 16))
    raw = dict(zip((i.name for i in request.inputs), request.raw_input_contents, strict=True))
    types = {i.name: i.datatype for i in request.inputs}
    assert types["guided_decoding_guide_type"] == types["guided_decoding_guide"] == "BYTES"
    assert deserialize_bytes_tensor(raw["guided_decoding_guide"])[0].decode() == schema
    assert deserialize_bytes_tensor(raw["guided_decoding_guide_type"])[0] == b"json_schema"
    any_json = request_arrays([1], SamplingParams(guide=GuidedDecoding("json")), 16)
    assert "guided_decoding_guide" not in any_json  # "json" has no text
    assert "guided_decoding_guide_type" not in request_arrays([1], SamplingParams(), 16)
