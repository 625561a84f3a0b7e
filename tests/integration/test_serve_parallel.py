"""SmolLM2 converted with parallel.tp_size=3, deployed and served by the real tritonserver on the
CPU: one Triton model instance, whose engine process drives two worker ranks, answers with the
one-rank engine's greedy text; stopping the server ends every rank."""

import psutil
import pytest

from pipeline.client import GenerateRequest, GrpcClient
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.server import launch
from pipeline.server.ports import free_ports
from pipeline.stages import deploy
from tests.conftest import SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPTS = ["The capital of France is", "Water boils at"]
MAX_TOKENS = 12
WORKER = "pipeline.engine.execution.worker_main"


@pytest.fixture(scope="module")
def server(session_workdir):
    http, grpc, metrics = free_ports(3)
    spec = make_spec(
        "serve",
        *SMOLLM_ENGINE_OVERRIDES,
        "parallel.tp_size=3",
        f"deploy.repo_dir={session_workdir / 'serve_tp3_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "deploy.torch.num_threads=1",
        workdir=session_workdir,
    )
    deploy.run(spec)
    with launch.local_server(spec.deploy, spec.workdir) as server:
        yield server


def worker_ranks(server) -> list[psutil.Process]:
    processes = psutil.Process(server.process.pid).children(recursive=True)
    return [p for p in processes if WORKER in " ".join(p.cmdline())]


def test_tp3_served_text_equals_the_one_rank_engine(server, smollm_engine_dir):
    engine = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")
    outputs = engine.generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS))
    client = GrpcClient(server.endpoints.grpc_url, timeout_s=300)
    for prompt, expected in zip(PROMPTS, outputs, strict=True):
        assert client.generate(GenerateRequest(prompt, max_tokens=MAX_TOKENS)) == expected.text
    assert len(worker_ranks(server)) == 2  # ranks 1 and 2; rank 0 is the engine process


def test_stopping_the_server_ends_every_rank(server):
    ranks = worker_ranks(server)
    assert ranks
    server.stop()
    gone, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive
