"""The table of endpoints the app serves, and the OpenAPI 3 document generated from it.

app.py routes exactly this table, and /openapi.json describes exactly it: each operation's
request and response bodies are the pydantic models' JSON schemas (protocol.py, schemas.py),
gathered under components.schemas, so the document cannot drift from what is parsed and sent.
/docs is a Swagger UI page that renders /openapi.json.
"""

import re
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

import pipeline
from pipeline.openai_api import schemas
from pipeline.openai_api.protocol import ChatCompletionRequest, CompletionRequest

OPENAPI_VERSION = "3.1.0"  # JSON Schema 2020-12, which pydantic's schemas are
_REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")  # Starlette's {name:converter}


@dataclass(frozen=True, slots=True)
class Endpoint:
    path: str  # Starlette's pattern
    method: str
    handler: str  # the Frontend method that answers it
    summary: str
    request: tuple[type[BaseModel], ...] = ()  # the body: one of these
    response: type[BaseModel] | None = None  # None: not JSON (media_type)
    media_type: str = "application/json"
    metric: str | None = None  # its label in pipeline_openai_requests_total; None: not counted
    needs_key: bool = False  # the API key, when one is set


ENDPOINTS = (
    Endpoint(
        "/v1/completions",
        "POST",
        "completions",
        "A completion of a prompt (streamed as server-sent events with stream=true)",
        (CompletionRequest,),
        schemas.Completion,
        metric="completions",
        needs_key=True,
    ),
    Endpoint(
        "/v1/chat/completions",
        "POST",
        "chat_completions",
        "A chat completion through the model's chat template (streamed with stream=true)",
        (ChatCompletionRequest,),
        schemas.ChatCompletion,
        metric="chat_completions",
        needs_key=True,
    ),
    Endpoint(
        "/v1/models",
        "GET",
        "models",
        "The served model",
        response=schemas.ModelList,
        metric="models",
        needs_key=True,
    ),
    Endpoint(
        "/v1/models/{model:path}",
        "GET",
        "model_card",
        "The served model by its id (404 model_not_found for another)",
        response=schemas.ModelCard,
        metric="models",
        needs_key=True,
    ),
    Endpoint(
        "/tokenize",
        "POST",
        "tokenize",
        "A prompt's token ids as the engine gets them (a chat's: after the chat template)",
        (schemas.TokenizeCompletionRequest, schemas.TokenizeChatRequest),
        schemas.TokenizeResponse,
        metric="tokenize",
        needs_key=True,
    ),
    Endpoint(
        "/detokenize",
        "POST",
        "detokenize",
        "The text of token ids",
        (schemas.DetokenizeRequest,),
        schemas.DetokenizeResponse,
        metric="detokenize",
        needs_key=True,
    ),
    Endpoint("/health", "GET", "health", "200 when ready, else 503", (), schemas.Health),
    Endpoint(
        "/metrics",
        "GET",
        "prometheus",
        "Prometheus metrics",
        media_type="text/plain",
    ),
    Endpoint("/version", "GET", "version", "The server's version", (), schemas.Version),
    Endpoint("/openapi.json", "GET", "openapi", "This document", media_type="application/json"),
    Endpoint("/docs", "GET", "docs", "Swagger UI for this document", media_type="text/html"),
)


def openapi_path(path: str) -> str:
    """Starlette's /v1/models/{model:path} as OpenAPI's /v1/models/{model}."""
    return _PATH_PARAM.sub(r"{\1}", path)


def _schemas() -> tuple[dict, dict]:
    """(model -> its $ref, components.schemas) for every model the endpoints use."""
    models = {schemas.ErrorResponse}
    for endpoint in ENDPOINTS:
        models.update(endpoint.request)
        if endpoint.response is not None:
            models.add(endpoint.response)
    keys = [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)]
    refs, top = models_json_schema(keys, ref_template=_REF)
    return {model: ref for (model, _), ref in refs.items()}, top.get("$defs", {})


def _operation(endpoint: Endpoint, refs: dict) -> dict:
    operation = {
        "operationId": endpoint.handler,
        "summary": endpoint.summary,
        "responses": {
            "200": {"description": "OK", "content": {endpoint.media_type: {"schema": {}}}},
            "default": {
                "description": "An error, in OpenAI's body",
                "content": {"application/json": {"schema": refs[schemas.ErrorResponse]}},
            },
        },
    }
    if endpoint.response is not None:
        operation["responses"]["200"]["content"] = {
            endpoint.media_type: {"schema": refs[endpoint.response]}
        }
    if endpoint.request:
        bodies = [refs[model] for model in endpoint.request]
        schema = bodies[0] if len(bodies) == 1 else {"oneOf": bodies}
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    names = _PATH_PARAM.findall(endpoint.path)
    if names:
        operation["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in names
        ]
    if endpoint.needs_key:
        operation["security"] = [{"bearer": []}, {}]  # {}: when the server sets no key
    return operation


def openapi_document() -> dict:
    refs, components = _schemas()
    paths: dict[str, dict] = {}
    for endpoint in ENDPOINTS:
        operations = paths.setdefault(openapi_path(endpoint.path), {})
        operations[endpoint.method.lower()] = _operation(endpoint, refs)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "llm-pipeline OpenAI-compatible API",
            "version": pipeline.__version__,
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


# Swagger UI from its npm package's CDN build (swagger-ui-dist 5), rendering /openapi.json
DOCS_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>llm-pipeline OpenAI-compatible API</title>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui"});
</script>
</body>
</html>
"""
