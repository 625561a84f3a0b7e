"""The OpenAI frontend as a server beside tritonserver: uvicorn in a thread of the caller's
process (the serve stage's), stopped when the caller's `with` ends."""

import contextlib
import ipaddress
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from pipeline.errors import StageError
from pipeline.openai_api.app import build_app
from pipeline.openai_api.routes import Frontend
from pipeline.openai_api.served_model import ServedModel, read_limits
from pipeline.openai_api.triton_llm import TritonLLM
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.serve import OpenAISpec

log = logging.getLogger(__name__)
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class OpenAIServer:
    def __init__(self, frontend: Frontend, host: str, port: int):
        self.frontend, self.host, self.port = frontend, host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> "OpenAIServer":
        _check_free(self.host, self.port)
        config = uvicorn.Config(
            build_app(self.frontend),
            host=self.host,
            port=self.port,
            loop="auto",  # uvloop and httptools when installed (the serve extra has them)
            http="auto",
            lifespan="on",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
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
        log.info("openai: serving %s at %s/v1", self.frontend.model.name, self.url)
        return self

    def __exit__(self, *exc_info) -> None:
        """Open streams get a few seconds to end, then are cancelled (so are their requests)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)


def _check_free(host: str, port: int) -> None:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise StageError(
                f"serve: {host}:{port} is not free for the OpenAI frontend ({exc.strerror}); "
                f"set serve.openai.port to a free port"
            ) from None


def frontend_server(
    spec: OpenAISpec,
    model_name: str,
    facts: dict,
    deploy: DeploySpec,
    grpc_url: str,
    metrics_url: str,
) -> OpenAIServer:
    """The frontend for a deploy artifact's facts (backend, engine_dir, tokenizer_dir) in front
    of the tritonserver at grpc_url; model_name: the `model` id (spec.model_name wins)."""
    is_torch = facts["backend"] == "torch"
    chunked = (
        deploy.torch.enable_chunked_prefill if is_torch else deploy.trtllm.enable_chunked_context
    )
    model = ServedModel(
        spec.model_name or model_name,
        Path(facts["tokenizer_dir"]),
        read_limits(Path(facts["engine_dir"]), chunked),
        deploy.add_special_tokens,
        deploy.skip_special_tokens,
        facts["backend"],
    )
    api_key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else ""
    if not api_key and not _is_loopback(spec.host):
        log.warning(
            "openai: %s is reachable from other hosts and asks for no API key; set %s",
            spec.host,
            spec.api_key_env or "serve.openai.api_key_env",
        )
    llm = TritonLLM(grpc_url, spec.request_timeout_s)
    return OpenAIServer(Frontend(model, llm, spec, api_key, metrics_url), spec.host, spec.port)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@contextlib.contextmanager
def serve_beside(spec, facts: dict, endpoints) -> Iterator[OpenAIServer | None]:
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
