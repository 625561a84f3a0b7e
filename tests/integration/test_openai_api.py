"""The OpenAI-compatible frontend in front of the real tritonserver serving SmolLM2, driven by the
official `openai` SDK (sync and async, streamed and not) and by raw HTTP for the error cases.

One tritonserver and one frontend for the module (an API key and a limit of 4 engine requests in
flight); the project's own gRPC client on the `ensemble` gives the expected greedy text and token
counts; the engine's Prometheus gauges show a disconnected stream's request cancelled.
"""

import asyncio
import json
import os
import time

import openai
import pytest
import requests
from transformers import AutoTokenizer

from pipeline.client import GenerateRequest, GrpcClient
from pipeline.client.metrics import fetch_metrics, metric_value, parse_metrics
from pipeline.openai_api.server import frontend_server
from pipeline.server import launch
from pipeline.server.ports import free_ports
from pipeline.stages import deploy
from tests.conftest import SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

API_KEY = "test-key-1234"
KEY_ENV = "PIPELINE_TEST_OPENAI_API_KEY"
MAX_IN_FLIGHT = 4
MAX_TOKENS = 12
PROMPTS = ["The capital of France is", "Water boils at"]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def served_spec(session_workdir, smollm_engine_dir):
    http, grpc, metrics, api = free_ports(4)
    return make_spec(
        "serve",
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / 'openai_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "deploy.torch.num_threads=1",
        f"serve.openai.port={api}",
        f"serve.openai.api_key_env={KEY_ENV}",
        f"serve.openai.max_concurrent_requests={MAX_IN_FLIGHT}",
        workdir=session_workdir,
    )


@pytest.fixture(scope="module")
def facts(served_spec):
    return deploy.served_facts(deploy.run(served_spec))


@pytest.fixture(scope="module")
def triton(served_spec, facts):
    with launch.local_server(served_spec.deploy, served_spec.workdir) as server:
        yield server


@pytest.fixture(scope="module")
def api(served_spec, facts, triton):
    os.environ[KEY_ENV] = API_KEY
    ends = triton.endpoints
    try:
        server = frontend_server(
            served_spec.serve.openai,
            served_spec.model.name,
            facts,
            served_spec.deploy,
            ends.grpc_url,
            ends.metrics_url,
        )
    finally:
        del os.environ[KEY_ENV]  # read once, at the start
    with server:
        yield server


@pytest.fixture(scope="module")
def model_name(served_spec) -> str:
    return served_spec.model.name


@pytest.fixture(scope="module")
def tokenizer(facts):
    return AutoTokenizer.from_pretrained(facts["tokenizer_dir"])


@pytest.fixture(scope="module")
def grpc(triton):
    return GrpcClient(triton.endpoints.grpc_url, model="ensemble", timeout_s=120)


def grpc_answer(grpc: GrpcClient, text: str, max_tokens: int = MAX_TOKENS) -> tuple[str, int]:
    """(greedy text, tokens generated) from the project's gRPC client on the ensemble."""
    arrays = GenerateRequest(text, max_tokens=max_tokens).arrays(stream=True)
    responses = list(grpc.responses(arrays, count_tokens=True))
    return "".join(r.text or "" for r in responses), sum(r.num_tokens for r in responses)


def chat_text(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def finish_reason(num_tokens: int, max_tokens: int = MAX_TOKENS) -> str:
    return "length" if num_tokens == max_tokens else "stop"


@pytest.fixture(scope="module")
def sdk(api):
    return openai.OpenAI(base_url=f"{api.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


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


def post(api, path: str, body=None, raw: bytes | None = None, key: str | None = API_KEY):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else json.dumps(body).encode()
    return requests.post(f"{api.url}{path}", data=data, headers=headers, timeout=120)


def completion(model: str, **fields) -> dict:
    return {"model": model, "prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0, **fields}


def chat(model: str, **fields) -> dict:
    return {"model": model, "messages": QUESTION, "max_tokens": 4, **fields}


C, CHAT = "/v1/completions", "/v1/chat/completions"
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
    "penalty": (CHAT, {"presence_penalty": 0.5}, K, 400, "presence_penalty", "unsupported"),
    "logprobs": (CHAT, {"logprobs": True}, K, 400, "logprobs", "unsupported"),
    "unknown parameter": (CHAT, {"best_answer": True}, K, 400, "best_answer", None),
    "n greedy": (C, {"n": 2}, K, 400, "n", None),
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
        sdk.chat.completions.create(model=model_name, messages=QUESTION, frequency_penalty=1.0)
    assert err.value.body["param"] == "frequency_penalty"
    anonymous = openai.OpenAI(base_url=f"{api.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.models.list()
    assert [m.id for m in sdk.models.list()] == [model_name]


def engine_gauges(triton) -> dict[str, float]:
    samples = fetch_metrics(triton.endpoints.metrics_url)
    names = ("free_kv_blocks", "running_requests", "generated_tokens")
    return {n: metric_value(samples, f"pipeline_engine_{n}") for n in names}


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
    for response, _ in streams:
        response.close()  # the client hangs up mid-stream
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = engine_gauges(triton)
        if now["running_requests"] == 0 and now["free_kv_blocks"] == idle["free_kv_blocks"]:
            break
        time.sleep(0.2)
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


def test_bench_openai_streams_count_the_tokens_the_grpc_path_counts(api, triton, tokenizer):
    """The bench's OpenAI target on a synthetic workload (token-id prompts, EOS off): every
    request's events add up to exactly output_len tokens, as through the gRPC path."""
    from pipeline.bench.grpc_streams import GrpcStreams
    from pipeline.bench.load_generator import LoadGenerator
    from pipeline.bench.metrics import summarize
    from pipeline.bench.openai_streams import OpenAIStreams
    from pipeline.bench.openai_target import openai_overhead
    from pipeline.bench.workload import PromptMaker

    output_len = 8
    workload = PromptMaker(tokenizer).make("synthetic", None, 4, 16, output_len, 0, "req")
    load = {"mode": "concurrency", "concurrency": 2, "request_rate": 1.0, "temperature": 0.0}
    load |= {"seed": 0, "origin_s": time.perf_counter()}
    summaries = {}
    for name, streams in (
        ("openai", OpenAIStreams(api.url, api.frontend.model.name, 120, API_KEY)),
        ("server", GrpcStreams(triton.endpoints.grpc_url, 120)),
    ):
        streams.wait_ready(60)
        try:
            records = LoadGenerator(streams, **load).run(workload, "measure")
        finally:
            streams.close()
        assert [r.error for r in records] == [None] * len(workload), name
        assert [r.num_output_tokens for r in records] == [output_len] * len(workload), name
        assert all(r.first_token_s is not None for r in records), name
        summaries[name] = {"summary": summarize(records)}
    ratio = openai_overhead(summaries)
    assert ratio["output_tok_s_ratio"] > 0
