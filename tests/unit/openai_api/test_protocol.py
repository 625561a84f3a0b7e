"""Request bodies: OpenAI's strictness (types, unknown keys) and every refusal as a 400 that
names the parameter; what the engine cannot do (top log probabilities, tools) is refused, never
ignored."""

import json

import pytest

from pipeline.openai_api.errors import APIError
from pipeline.openai_api.protocol import (
    MAX_STOP_SEQUENCES,
    ChatCompletionRequest,
    CompletionRequest,
    parse,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
COMPLETION = {"model": "m", "prompt": "Hi"}


def refusal(model, body) -> APIError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(APIError) as err:
        parse(model, raw)
    assert err.value.status == 400
    assert set(err.value.body()["error"]) == {"message", "type", "param", "code"}
    return err.value


def test_accepts_what_openai_clients_send():
    chat = parse(
        ChatCompletionRequest,
        json.dumps(
            {
                **CHAT,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                "stop": "\n",
                "tools": None,
                "user": "u",
                "max_completion_tokens": 8,
            }
        ).encode(),
    )
    assert chat.temperature == 0.0 and chat.stop_strings() == ("\n",)
    assert chat.requested_max_tokens() == 8
    parts = {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}
    assert parse(ChatCompletionRequest, json.dumps(parts).encode()).messages[0].text() == "a"
    extras = {"presence_penalty": 0.5, "frequency_penalty": -1, "repetition_penalty": 1.1}
    penalized = parse(ChatCompletionRequest, json.dumps({**CHAT, **extras}).encode())
    assert penalized.presence_penalty == 0.5 and not penalized.wants_logprobs
    sampled = {**CHAT, "logprobs": True, "top_logprobs": 0}
    assert parse(ChatCompletionRequest, json.dumps(sampled).encode()).wants_logprobs
    assert parse(CompletionRequest, json.dumps({**COMPLETION, "logprobs": 0}).encode())
    echoed = {**COMPLETION, "logprobs": 20, "echo": True, "max_tokens": 0}
    assert parse(CompletionRequest, json.dumps(echoed).encode()).wants_prompt_logprobs
    top = {**CHAT, "logprobs": True, "top_logprobs": 20}
    assert parse(ChatCompletionRequest, json.dumps(top).encode()).num_top_logprobs == 20
    vllm = {"min_p": 0.1, "stop_token_ids": [2], "logit_bias": {"50256": -100, "7": 2.5}}
    extended = parse(CompletionRequest, json.dumps({**COMPLETION, **vllm}).encode())
    assert extended.logit_biases() == ((50256, -100.0), (7, 2.5))
    many = {**COMPLETION, "stop": [f"s{i}" for i in range(MAX_STOP_SEQUENCES)]}
    assert len(parse(CompletionRequest, json.dumps(many).encode()).stop_strings()) > 4
    for prompt in ("x", ["x", "y"], [1, 2], [[1], [2, 3]]):
        assert parse(CompletionRequest, json.dumps({**COMPLETION, "prompt": prompt}).encode())


@pytest.mark.parametrize(
    "body,param,code",
    [
        (b'{"model": "m", "prompt":', None, "invalid_json"),
        (b"[1, 2]", None, None),
        ({"prompt": "x"}, "model", None),
        ({**COMPLETION, "max_tokens": "5"}, "max_tokens", None),
        ({**COMPLETION, "max_tokens": 5.5}, "max_tokens", None),
        ({**COMPLETION, "stream": 1}, "stream", None),
        ({**COMPLETION, "prompt": True}, "prompt", None),
        ({**COMPLETION, "colour": "red"}, "colour", None),
        ({**COMPLETION, "logprobs": 21}, "logprobs", None),
        ({**COMPLETION, "logprobs": -1}, "logprobs", None),
        ({**COMPLETION, "presence_penalty": "high"}, "presence_penalty", None),
        ({**COMPLETION, "suffix": "!"}, "suffix", "unsupported"),
        ({**COMPLETION, "logit_bias": {"dog": -100}}, "logit_bias", None),
        ({**COMPLETION, "logit_bias": {"5": "high"}}, "logit_bias", None),
        ({**COMPLETION, "stop_token_ids": ["5"]}, "stop_token_ids.0", None),
        ({**COMPLETION, "min_p": "0.1"}, "min_p", None),
        ({**COMPLETION, "stop": ["s"] * (MAX_STOP_SEQUENCES + 1)}, "stop", None),
    ],
)
def test_completion_refusals_name_the_parameter(body, param, code):
    error = refusal(CompletionRequest, body)
    assert (error.param, error.code) == (param, code)


@pytest.mark.parametrize(
    "body,param",
    [
        ({**CHAT, "messages": []}, "messages"),
        ({**CHAT, "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None),
        ({**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({**CHAT, "top_logprobs": 0}, "top_logprobs"),
        ({**CHAT, "tools": [{"type": "function"}]}, "tools.0.function"),
        ({**CHAT, "functions": [{"name": "f"}]}, "functions"),
        ({**CHAT, "max_tokens": 4, "max_completion_tokens": 8}, "max_completion_tokens"),
        ({**CHAT, "stream_options": {"include_usage": True}}, None),
    ],
)
def test_chat_refusals(body, param):
    error = refusal(ChatCompletionRequest, body)
    if param is not None:
        assert error.param == param
    assert error.message
