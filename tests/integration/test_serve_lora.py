"""LoRA adapters served by a real tritonserver and the OpenAI frontend: two peft adapters deployed
with SmolLM2 answer per adapter (HF + peft merged greedy text) through the OpenAI API (the adapter
as `model`) and through Triton (`lora_task_id`); /v1/models lists them with their parent; an
unknown adapter is refused naming the known ones; one copied into the repository is served
without a restart."""

import shutil

import numpy as np
import pytest
import requests
from transformers import AutoTokenizer

from pipeline.client import GenerateRequest, GrpcClient
from pipeline.client.errors import ClientError
from pipeline.lora.adapters import repository_adapters, task_id
from pipeline.openai_api.server import frontend_server
from pipeline.server import launch
from pipeline.server.ports import free_ports
from pipeline.stages import deploy
from tests.conftest import SMOLLM_ENGINE_OVERRIDES, make_spec
from tests.integration.lora_adapters import make_adapter, merged_greedy

PROMPT = "The capital of France is"
MAX_TOKENS = 10
ADAPTERS = {"alpha": (8, 16, 1), "beta": (16, 8, 3)}


@pytest.fixture(scope="module")
def adapters(smollm_hf_dir, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("served_adapters")
    return {n: make_adapter(smollm_hf_dir, root / n, *spec) for n, spec in ADAPTERS.items()}


@pytest.fixture(scope="module")
def spec(session_workdir, smollm_engine_dir, adapters):
    http, grpc, metrics, api = free_ports(4)
    return make_spec(
        "serve",
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / 'lora_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "deploy.torch.num_threads=1",
        f"serve.openai.port={api}",
        "lora.max_rank=16",
        *(f"+lora.adapters.{name}={path}" for name, path in adapters.items()),
        workdir=session_workdir,
    )


@pytest.fixture(scope="module")
def facts(spec):
    return deploy.served_facts(deploy.run(spec))


@pytest.fixture(scope="module")
def expected(smollm_hf_dir, adapters, facts) -> dict:
    """Adapter name (None: the base) -> HF + peft merged greedy text."""
    tokenizer = AutoTokenizer.from_pretrained(facts["tokenizer_dir"])
    ids = tokenizer.encode(PROMPT)
    eos = (tokenizer.eos_token_id,)
    texts = {}
    for name in (None, *adapters):
        path = None if name is None else adapters[name]
        tokens = merged_greedy(smollm_hf_dir, path, [ids], MAX_TOKENS, eos)[0]
        texts[name] = tokenizer.decode(tokens, skip_special_tokens=True)
    return texts


@pytest.fixture(scope="module")
def servers(spec, facts):
    with launch.local_server(spec.deploy, spec.workdir) as triton:
        ends = triton.endpoints
        api = frontend_server(
            spec.serve.openai, spec.model.name, facts, spec.deploy, ends.grpc_url, ends.metrics_url
        )
        with api:
            yield triton, api


def openai_text(api, model: str) -> requests.Response:
    body = {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    return requests.post(f"{api.url}/v1/completions", json=body, timeout=120)


def triton_text(triton, lora_task_id: int | None) -> str:
    grpc = GrpcClient(triton.endpoints.grpc_url, model="ensemble", timeout_s=120)
    request = GenerateRequest(PROMPT, max_tokens=MAX_TOKENS, exclude_input_in_output=True)
    arrays = request.arrays(stream=True)
    if lora_task_id is not None:
        arrays["lora_task_id"] = np.array([[lora_task_id]], np.uint64)
    return "".join(r.text or "" for r in grpc.responses(arrays))


def test_openai_answers_per_adapter_and_lists_them(spec, servers, expected):
    _, api = servers
    assert len(set(expected.values())) == len(expected)  # each adapter changes the answer
    for name in (None, *ADAPTERS):
        answer = openai_text(api, name or spec.model.name)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == (name or spec.model.name)
        assert answer.json()["choices"][0]["text"] == expected[name]
    cards = requests.get(f"{api.url}/v1/models", timeout=30).json()["data"]
    assert [(c["id"], c.get("parent")) for c in cards] == [
        (spec.model.name, None),
        ("alpha", spec.model.name),
        ("beta", spec.model.name),
    ]
    missing = openai_text(api, "gamma")
    assert missing.status_code == 404
    assert f"serves `{spec.model.name}`, `alpha`, `beta`" in missing.json()["error"]["message"]


def test_triton_answers_per_lora_task_id(servers, expected):
    triton, _ = servers
    assert triton_text(triton, None) == expected[None]
    for name in ADAPTERS:
        assert triton_text(triton, task_id(name)) == expected[name]
    with pytest.raises(ClientError, match=rf"lora_task_id=7 names no adapter.*{task_id('alpha')}"):
        triton_text(triton, 7)


def test_an_adapter_copied_into_the_repository_is_served_without_a_restart(
    spec, servers, adapters, expected
):
    triton, api = servers
    shutil.copytree(adapters["beta"], repository_adapters(spec.deploy.repo_dir) / "gamma")
    answer = openai_text(api, "gamma")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"] == expected["beta"]
    assert triton_text(triton, task_id("gamma")) == expected["beta"]
