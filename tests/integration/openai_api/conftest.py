"""One tritonserver serving SmolLM2 and the OpenAI-compatible frontend in front of it, shared by
this directory's tests (package scope): an API key, and a limit of 4 engine requests in flight
with no queue (past it: 429 at once; test_openai_bursts starts frontends that queue).
The project's own gRPC client on the `ensemble` gives the expected greedy text and token counts,
the engine loaded in-process the expected tokens of penalties and log probabilities.
"""

import json
import os

import openai
import pytest
import requests
from transformers import AutoTokenizer

from pipeline.client import GenerateRequest, GrpcClient
from pipeline.openai_api.server import frontend_server
from pipeline.server import launch
from pipeline.server.ports import free_ports
from pipeline.stages import deploy
from tests.conftest import SMOLLM_ENGINE_OVERRIDES, make_spec

API_KEY = "test-key-1234"
KEY_ENV = "PIPELINE_TEST_OPENAI_API_KEY"
MAX_IN_FLIGHT = 8  # the engine's max_batch_size: guided answers fill its batch
MAX_TOKENS = 12
PROMPTS = ["The capital of France is", "Water boils at"]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
C, CHAT = "/v1/completions", "/v1/chat/completions"


@pytest.fixture(scope="package")
def served_overrides(session_workdir, smollm_engine_dir) -> tuple[str, ...]:
    """The package's config: the shared engine, a repository and ports of its own, an API key
    and a limit of MAX_IN_FLIGHT engine requests in flight, none queued."""
    http, grpc, metrics, api = free_ports(4)
    return (
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / 'openai_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "deploy.torch.num_threads=1",
        f"serve.openai.port={api}",
        f"serve.openai.api_key_env={KEY_ENV}",
        f"serve.openai.max_concurrent_requests={MAX_IN_FLIGHT}",
        "serve.openai.max_queued_requests=0",
    )


@pytest.fixture(scope="package")
def served_spec(session_workdir, served_overrides):
    return make_spec("serve", *served_overrides, workdir=session_workdir)


@pytest.fixture(scope="package")
def facts(served_spec):
    return deploy.served_facts(deploy.run(served_spec))


@pytest.fixture(scope="package")
def triton(served_spec, facts):
    with launch.local_server(served_spec.deploy, served_spec.workdir) as server:
        yield server


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
def model_name(served_spec) -> str:
    return served_spec.model.name


@pytest.fixture(scope="package")
def tokenizer(facts):
    return AutoTokenizer.from_pretrained(facts["tokenizer_dir"])


@pytest.fixture(scope="package")
def grpc(triton):
    return GrpcClient(triton.endpoints.grpc_url, model="ensemble", timeout_s=120)


@pytest.fixture(scope="package")
def sdk(api):
    return openai.OpenAI(base_url=f"{api.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="package")
def engine(smollm_engine_dir):
    """The same engine in this process: the expected tokens and log probabilities."""
    from pipeline.engine import LLMEngine

    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


def grpc_answer(grpc: GrpcClient, text: str, max_tokens: int = MAX_TOKENS) -> tuple[str, int]:
    """(greedy text, tokens generated) from the project's gRPC client on the ensemble."""
    arrays = GenerateRequest(text, max_tokens=max_tokens).arrays(stream=True)
    responses = list(grpc.responses(arrays, count_tokens=True))
    return "".join(r.text or "" for r in responses), sum(r.num_tokens for r in responses)


def chat_text(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def finish_reason(num_tokens: int, max_tokens: int = MAX_TOKENS) -> str:
    return "length" if num_tokens == max_tokens else "stop"


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
