"""Every refusal in OpenAI's error body with its status, beside a stream it leaves alone; the
limit on engine requests in flight; a dropped stream cancelled in the engine (its KV blocks
freed); health, models and metrics."""

import json
import time

import openai
import pytest
import requests

from pipeline.client.metrics import fetch_metrics, metric_value, parse_metrics
from pipeline.openai_api.errors import RETRY_AFTER_S
from tests.integration.openai_api.conftest import (
    API_KEY,
    CHAT,
    MAX_IN_FLIGHT,
    MAX_TOKENS,
    PROMPTS,
    QUESTION,
    C,
    chat,
    completion,
    grpc_answer,
    post,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]

K = API_KEY
# name: (path, fields over a valid body or the raw body, key, status, param, code)
ERROR_CASES = {
    "malformed json": (C, b'{"model": "x", "prompt": ', K, 400, None, "invalid_json"),
    "unknown model": (C, {"model": "gpt-4o"}, K, 404, "model", "model_not_found"),
    "wrong type": (C, {"max_tokens": "8"}, K, 400, "max_tokens", None),
    "temperature out of range": (C, {"temperature": -0.5}, K, 400, "temperature", None),
    "top_p out of range": (C, {"top_p": 1.5}, K, 400, "top_p", None),
    "top_k out of range": (C, {"top_k": -1}, K, 400, "top_k", None),
    "max_tokens zero": (C, {"max_tokens": 0}, K, 400, "max_tokens", None),
    "prompt too long": (C, {"prompt": "word " * 400}, K, 400, "prompt", "context_length_exceeded"),
    "context exceeded": (C, {"max_tokens": 1000}, K, 400, "max_tokens", "context_length_exceeded"),
    "token outside vocabulary": (C, {"prompt": [10**7]}, K, 400, "prompt", None),
    "empty messages": (CHAT, {"messages": []}, K, 400, "messages", None),
    "penalty out of range": (C, {"repetition_penalty": 0}, K, 400, "repetition_penalty", None),
    # finite in float64 but inf in the engine's float32: once a NaN and a 502
    "temperature past float32": (C, {"temperature": 1e308}, K, 400, "temperature", None),
    "repetition past float32": (
        C,
        {"repetition_penalty": 1e308},
        K,
        400,
        "repetition_penalty",
        None,
    ),
    "presence past float32": (C, {"presence_penalty": 1e308}, K, 400, "presence_penalty", None),
    "frequency past its range": (C, {"frequency_penalty": -2.5}, K, 400, "frequency_penalty", None),
    "more prompts than ever admitted": (
        C,
        {"prompt": ["Hi"] * (MAX_IN_FLIGHT + 1)},
        K,
        400,
        None,
        "request_too_large",
    ),
    "top logprobs past 20": (
        CHAT,
        {"logprobs": True, "top_logprobs": 21},
        K,
        400,
        "top_logprobs",
        None,
    ),
    "unknown parameter": (CHAT, {"best_answer": True}, K, 400, "best_answer", None),
    "min_p past its range": (C, {"min_p": 1.5}, K, 400, "min_p", None),
    "logit bias past its range": (C, {"logit_bias": {"5": 200}}, K, 400, "logit_bias", None),
    "logit bias outside the vocabulary": (
        C,
        {"logit_bias": {str(10**7): 1}},
        K,
        400,
        "logit_bias",
        None,
    ),
    "body too large": (C, b"{" + b" " * 2_000_000 + b"}", K, 413, None, "request_too_large"),
    "no api key": (C, {}, None, 401, None, "invalid_api_key"),
    "wrong api key": (C, {}, "not-the-key", 401, None, "invalid_api_key"),
}


def test_every_error_beside_a_stream_that_is_unaffected(api, grpc, model_name):
    text, _ = grpc_answer(grpc, PROMPTS[1])
    with requests.post(
        f"{api.url}{C}",
        json=completion(model_name, prompt=PROMPTS[1], max_tokens=MAX_TOKENS, stream=True),
        headers={"Authorization": f"Bearer {API_KEY}"},
        stream=True,
        timeout=120,
    ) as stream:
        lines = stream.iter_lines()
        for name, (path, body, key, status, param, code) in ERROR_CASES.items():
            if isinstance(body, bytes):
                response = post(api, path, raw=body, key=key)
            else:
                valid = chat(model_name) if path == CHAT else completion(model_name)
                response = post(api, path, body={**valid, **body}, key=key)
            assert response.status_code == status, (name, response.text)
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}, name
            assert (error["param"], error["code"]) == (param, code), (name, error)
            assert error["message"], name
        events = [json.loads(line[6:]) for line in lines if line.startswith(b"data: {")]
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == text


def test_sdk_raises_its_error_classes(api, sdk, model_name):
    with pytest.raises(openai.NotFoundError):
        sdk.completions.create(model="no-such-model", prompt="x")
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(
            model=model_name, messages=QUESTION, logprobs=True, top_logprobs=21
        )
    assert err.value.body["param"] == "top_logprobs"
    anonymous = openai.OpenAI(base_url=f"{api.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.models.list()
    assert [m.id for m in sdk.models.list()] == [model_name]


def engine_gauges(triton) -> dict[str, float]:
    samples = fetch_metrics(triton.endpoints.metrics_url)
    names = ("free_kv_blocks", "running_requests", "generated_tokens")
    return {n: metric_value(samples, f"pipeline_engine_{n}") for n in names}


def engine_idle_again(triton, idle: dict[str, float], timeout_s: float = 60) -> dict[str, float]:
    """The engine's gauges once nothing runs and every KV block is free again (or at timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = engine_gauges(triton)
        done = now["running_requests"] == 0 and now["free_kv_blocks"] == idle["free_kv_blocks"]
        if done or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def frontend_in_flight(api) -> float:
    samples = parse_metrics(requests.get(f"{api.url}/metrics", timeout=30).text)
    return metric_value(samples, "pipeline_openai_engine_requests_in_flight")


def test_streams_past_the_limit_get_429_and_disconnected_ones_are_cancelled(
    api, triton, model_name
):
    idle = engine_gauges(triton)
    max_tokens = 200  # far more than are made before the streams are dropped (EOS off)
    streams = []
    for i in range(MAX_IN_FLIGHT):
        response = requests.post(
            f"{api.url}{C}",
            json=completion(
                model_name,
                prompt=f"Story {i}:",
                max_tokens=max_tokens,
                ignore_eos=True,
                stream=True,
            ),
            headers={"Authorization": f"Bearer {API_KEY}"},
            stream=True,
            timeout=120,
        )
        assert response.status_code == 200
        lines = response.iter_lines()
        next(lines)  # the first event: the request runs in the engine
        streams.append((response, lines))
    running = engine_gauges(triton)
    assert running["running_requests"] == MAX_IN_FLIGHT
    assert running["free_kv_blocks"] < idle["free_kv_blocks"]
    refused = post(api, C, completion(model_name))
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["Retry-After"] == str(RETRY_AFTER_S)
    for response, _ in streams:
        response.close()  # the client hangs up mid-stream
    now = engine_idle_again(triton, idle)
    assert now["free_kv_blocks"] == idle["free_kv_blocks"]
    assert now["generated_tokens"] - idle["generated_tokens"] < MAX_IN_FLIGHT * max_tokens
    assert frontend_in_flight(api) == 0
    assert post(api, C, completion(model_name)).status_code == 200  # slots are free again


def test_health_models_and_metrics(api, model_name):
    assert requests.get(f"{api.url}/health", timeout=30).json() == {"status": "ok"}
    models = requests.get(
        f"{api.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30
    ).json()
    assert [m["id"] for m in models["data"]] == [model_name]
    assert post(api, C, completion(model_name)).status_code == 200
    assert post(api, C, completion(model_name, top_p=2.0)).status_code == 400
    samples = parse_metrics(requests.get(f"{api.url}/metrics", timeout=30).text)
    for status in ("200", "400"):
        counted = metric_value(samples, "pipeline_openai_requests_total", status=status)
        assert counted is not None and counted >= 1
    assert metric_value(samples, "pipeline_openai_completion_tokens_total") >= 1
