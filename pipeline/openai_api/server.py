"""The OpenAI frontend as a server beside tritonserver, stopped when the caller's `with` ends:
uvicorn in a thread of the caller's process (the serve stage's) for one worker, or worker
processes sharing the port (workers.py) for serve.openai.workers > 1."""

import contextlib
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import uvicorn

from pipeline.errors import StageError
from pipeline.lora.adapters import repository_adapters
from pipeline.openai_api.app import build_app
from pipeline.openai_api.recipe import (
    FrontendRecipe,
    ServesRecipe,
    check_free,
    uvicorn_config,
)
from pipeline.openai_api.served_model import admitted_requests, read_limits
from pipeline.openai_api.workers import FrontendWorkers
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.pipeline import PipelineSpec
from pipeline.specs.serve import OpenAISpec

log = logging.getLogger(__name__)
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class OpenAIServer(ServesRecipe):
    """One frontend in a thread of this process."""

    def __init__(self, recipe: FrontendRecipe):
        self.recipe = recipe
        self.frontend = recipe.frontend()
        self.admission = self.frontend.admission
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "OpenAIServer":
        check_free(self.recipe.spec)
        self._server = uvicorn.Server(uvicorn_config(build_app(self.frontend), self.recipe.spec))
        self._thread = threading.Thread(target=self._server.run, name="openai-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise StageError(
                    f"serve: the OpenAI frontend did not start on {self.url} (its error is "
                    f"logged above); change serve.openai.host/port or set "
                    f"serve.openai.enabled=false"
                )
            time.sleep(0.05)
        log.info("openai: serving %s at %s/v1", self.model_name, self.url)
        return self

    def __exit__(self, *exc_info) -> None:
        """Open streams get a few seconds to end, then are cancelled (so are their requests)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)


def frontend_server(
    spec: OpenAISpec,
    model_name: str,
    facts: dict,
    deploy: DeploySpec,
    grpc_url: str,
    metrics_url: str,
) -> OpenAIServer | FrontendWorkers:
    """The frontend for a deploy artifact's facts (backend, engine_dir, tokenizer_dir) in front
    of the tritonserver at grpc_url; model_name: the `model` id (spec.model_name wins)."""
    if spec.workers < 0:
        raise StageError(
            f"serve.openai.workers={spec.workers}: must be 0 (one per 4 cores, at most 4) or a "
            f"number of frontend processes"
        )
    api_key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else ""
    if not api_key and not _is_loopback(spec.host):
        log.warning(
            "openai: %s is reachable from other hosts and asks for no API key; set %s",
            spec.host,
            spec.api_key_env or "serve.openai.api_key_env",
        )
    engine_dir = Path(facts["engine_dir"])
    spec = replace(spec, max_concurrent_requests=admitted_requests(spec, engine_dir))
    is_torch = facts["backend"] == "torch"
    chunked_prefill = (
        deploy.torch.enable_chunked_prefill if is_torch else deploy.trtllm.enable_chunked_context
    )
    recipe = FrontendRecipe(
        spec=spec,
        model_name=spec.model_name or model_name,
        tokenizer_dir=str(facts["tokenizer_dir"]),
        limits=read_limits(engine_dir, chunked_prefill),
        backend=facts["backend"],
        add_special_tokens=deploy.add_special_tokens,
        skip_special_tokens=deploy.skip_special_tokens,
        grpc_url=grpc_url,
        engine_metrics_url=metrics_url,
        api_key=api_key,
        lora_dir=str(repository_adapters(deploy.repo_dir).resolve()) if facts.get("lora") else "",
    )
    if recipe.num_workers == 1:
        return OpenAIServer(recipe)
    return FrontendWorkers(recipe)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@contextlib.contextmanager
def serve_beside(
    spec: PipelineSpec, facts: dict, endpoints
) -> Iterator[OpenAIServer | FrontendWorkers | None]:
    """The frontend of a pipeline spec (serve.openai) in front of the tritonserver at
    endpoints, while the `with` lasts; None when serve.openai.enabled is false."""
    if not spec.serve.openai.enabled:
        yield None
        return
    with frontend_server(
        spec.serve.openai,
        spec.model.name,
        facts,
        spec.deploy,
        endpoints.grpc_url,
        endpoints.metrics_url,
    ) as server:
        yield server
