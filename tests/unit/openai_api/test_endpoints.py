"""The endpoints besides generation, on the real app with a real (word-level) tokenizer: the model
card by id, /tokenize and /detokenize in vLLM's shapes, /version, /docs, and /openapi.json checked
as an OpenAPI 3 document that lists every route the app serves. Every answer of a counted
endpoint is counted, a 500 too."""

import re

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.testclient import TestClient
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

import pipeline
from pipeline.openai_api.admission import Admission
from pipeline.openai_api.app import build_app, counted
from pipeline.openai_api.metrics import FrontendMetrics
from pipeline.openai_api.openapi import openapi_path
from pipeline.openai_api.routes import Frontend
from pipeline.openai_api.served_model import ServedModel
from pipeline.openai_api.triton_llm import TritonLLM
from pipeline.request.limits import RequestLimits
from pipeline.specs.serve import OpenAISpec

VOCAB = ["<unk>", "<s>", "</s>", "the", "cat", "sat", "user:", "assistant:"]
NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # a Hugging Face id, with its slash
LIMITS = RequestLimits(
    max_input_len=64,
    max_seq_len=128,
    max_num_tokens=64,
    vocab_size=len(VOCAB),
    block_size=16,
    num_kv_blocks=8,
    enable_chunked_prefill=False,
)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}assistant:"
    )
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def client(tokenizer_dir):
    model = ServedModel(NAME, tokenizer_dir, LIMITS, True, True, "torch")
    llm = TritonLLM("127.0.0.1:1", 5.0, LIMITS.vocab_size)  # never reached by these endpoints
    spec = OpenAISpec(max_concurrent_requests=8)  # serve resolves 0 from the engine's batch
    frontend = Frontend(model, llm, spec, "", "http://127.0.0.1:1/metrics", created=7)
    with TestClient(build_app(frontend)) as client:
        client.frontend = frontend
        yield client


def requests_counted(frontend: Frontend, endpoint: str, status: str) -> float:
    text = frontend.metrics.exposition().decode()
    pattern = rf'pipeline_openai_requests_total{{endpoint="{endpoint}",status="{status}"}} (\S+)'
    match = re.search(pattern, text)
    return float(match[1]) if match else 0.0


def test_model_by_id_is_the_card_and_another_id_is_404(client, tokenizer_dir):
    before = requests_counted(client.frontend, "models", "404")
    card = client.get(f"/v1/models/{NAME}").json()
    assert card == {
        "id": NAME,
        "object": "model",
        "created": 7,
        "owned_by": "llm-pipeline",
        "root": str(tokenizer_dir),
        "max_model_len": 128,
    }
    assert client.get("/v1/models").json() == {"object": "list", "data": [card]}
    missing = client.get("/v1/models/gpt-4")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert missing.json()["error"]["param"] == "model"
    assert requests_counted(client.frontend, "models", "404") == before + 1


def test_a_failing_handler_is_counted_as_500():
    metrics = FrontendMetrics(Admission(4, 0), engine_metrics_url="")

    async def failing(request: Request) -> Response:
        raise TypeError("a bug")

    async def app(scope, receive, send):
        response = await counted(metrics, "models", failing)(Request(scope, receive))
        await response(scope, receive, send)

    response = TestClient(app).get("/")
    assert response.status_code == 500 and "TypeError: a bug" in response.json()["error"]["message"]
    assert 'endpoint="models",status="500"} 1.0' in metrics.exposition().decode()


def test_tokenize_and_detokenize_in_vllms_shapes(client):
    answer = client.post("/tokenize", json={"model": NAME, "prompt": "the cat sat"}).json()
    assert answer == {"tokens": [1, 3, 4, 5], "count": 4, "max_model_len": 128}
    chat = client.post("/tokenize", json={"messages": [{"role": "user", "content": "the cat"}]})
    assert chat.json()["tokens"] == [6, 3, 4, 7]  # the template's text, no <s> added
    text = client.post("/detokenize", json={"model": NAME, "tokens": [3, 4, 5]}).json()
    assert text == {"prompt": "the cat sat"}
    for path, body, param in [
        ("/detokenize", {"tokens": [3, 99]}, "tokens"),
        ("/tokenize", {"prompt": "x", "messages": []}, "prompt"),
        ("/tokenize", {"model": "other", "prompt": "the"}, "model"),
        ("/tokenize", {}, "prompt"),
    ]:
        refused = client.post(path, json=body)
        assert refused.status_code in (400, 404), (path, body)
        assert refused.json()["error"]["param"] == param, (path, body, refused.json())
    assert requests_counted(client.frontend, "tokenize", "200") == 2


def test_version_and_docs(client):
    assert client.get("/version").json() == {"version": pipeline.__version__}
    docs = client.get("/docs")
    assert docs.headers["content-type"].startswith("text/html")
    assert '"/openapi.json"' in docs.text and "SwaggerUIBundle" in docs.text


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_openapi_is_an_openapi_3_document_of_every_route(client):
    doc = client.get("/openapi.json").json()
    assert re.fullmatch(r"3\.1\.\d+", doc["openapi"])
    assert doc["info"]["title"] and doc["info"]["version"] == pipeline.__version__
    served = {
        (openapi_path(route.path), method.lower())
        for route in client.app.routes
        for method in route.methods - {"HEAD"}
    }
    listed = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert listed == served and ("/v1/models/{model}", "get") in listed
    assert len(served) == 11
    schemas = doc["components"]["schemas"]
    refs = set(_refs(doc))
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs)
    assert {ref.rsplit("/", 1)[1] for ref in refs} <= set(schemas)  # every $ref resolves
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            assert op["responses"]["200"]["content"], (path, method)
            names = re.findall(r"\{(\w+)\}", path)
            assert [p["name"] for p in op.get("parameters", [])] == names
    completion = doc["paths"]["/v1/completions"]["post"]
    body = completion["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/CompletionRequest"}
    fields = schemas["CompletionRequest"]["properties"]
    assert {"min_p", "stop_token_ids", "logit_bias", "n", "prompt"} <= set(fields)
    assert schemas["CompletionRequest"]["required"] == ["model", "prompt"]
    assert "root" in schemas["ModelCard"]["properties"]
