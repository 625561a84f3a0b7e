"""What builds the frontend in any process: the settings and the deploy artifact's facts it needs,
plain values only, so that a spawned worker process (workers.py) builds the same frontend as the
serve stage's own thread does."""

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from pipeline.openai_api.admission import Admission
from pipeline.openai_api.metrics import FrontendMetrics
from pipeline.openai_api.routes import Frontend
from pipeline.openai_api.served_model import ServedModel
from pipeline.openai_api.triton_llm import TritonLLM
from pipeline.request.limits import RequestLimits
from pipeline.server.triton_server import check_port_free
from pipeline.specs.serve import OpenAISpec

# frontend processes at most when serve.openai.workers=0 (auto): each holds a tokenizer and a
# gRPC channel of its own and takes a core that tritonserver and the clients also want
MAX_AUTO_WORKERS = 4


@dataclass(frozen=True)
class FrontendRecipe:
    spec: OpenAISpec
    model_name: str  # the `model` id clients send
    tokenizer_dir: str
    limits: RequestLimits  # read once, by the process that starts the frontend
    backend: str
    add_special_tokens: bool
    skip_special_tokens: bool
    grpc_url: str
    engine_metrics_url: str
    api_key: str = field(repr=False)  # "" = none asked for
    lora_dir: str = ""  # the repository's LoRA adapters, served as models of their own ("": none)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def num_workers(self) -> int:
        """serve.openai.workers, or (0) a quarter of this host's cores, 1 to MAX_AUTO_WORKERS:
        the frontend shares the host with tritonserver (its gRPC threads, the model's python
        stub) and the clients, and one process already keeps up on a small host."""
        if self.spec.workers:
            return self.spec.workers
        return min(MAX_AUTO_WORKERS, max(1, len(os.sched_getaffinity(0)) // 4))

    def frontend(
        self, admission: Admission | None = None, metrics: FrontendMetrics | None = None
    ) -> Frontend:
        """The tokenizer is loaded here; the gRPC channel opens with the app (its event loop)."""
        model = ServedModel(
            self.model_name,
            Path(self.tokenizer_dir),
            self.limits,
            self.add_special_tokens,
            self.skip_special_tokens,
            self.backend,
        )
        llm = TritonLLM(
            self.grpc_url,
            self.spec.request_timeout_s,
            self.limits.vocab_size,
            block_size=self.limits.block_size,
        )
        return Frontend(
            model,
            llm,
            self.spec,
            self.api_key,
            self.engine_metrics_url,
            self.created,
            admission,
            metrics,
            self.lora_dir,
        )


def uvicorn_config(app, spec: OpenAISpec) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=spec.host,
        port=spec.port,
        loop="auto",  # uvloop and httptools when installed (the serve extra has them)
        http="auto",
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )


def check_free(spec: OpenAISpec) -> None:
    check_port_free(spec.host, spec.port, "serve.openai.port")


class ServesRecipe:
    """What a running frontend (one thread, or worker processes) tells its callers."""

    recipe: FrontendRecipe
    admission: Admission  # the port's, for all its processes

    def stop_admitting(self) -> None:
        """Generation requests get 503 from now on; those in flight go on (the server drains)."""
        self.admission.closed.set()

    @property
    def num_in_flight(self) -> int:
        """Engine requests in flight on the port."""
        return self.admission.num_in_flight

    @property
    def url(self) -> str:
        return f"http://{self.recipe.spec.host}:{self.recipe.spec.port}"

    @property
    def model_name(self) -> str:
        return self.recipe.model_name

    @property
    def api_key(self) -> str:
        return self.recipe.api_key
