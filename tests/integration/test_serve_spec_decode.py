"""Speculative decoding served by a real tritonserver: deploy.torch.spec reaches the engine
(greedy text equal to the engine without it), and its counters reach /metrics."""

import time

import pytest

from pipeline.client import GenerateRequest, GrpcClient
from pipeline.client.metrics import fetch_metrics, metric_value
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.server import launch
from pipeline.stages import deploy
from tests.conftest import served_smollm_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

# greedy SmolLM2 counts on: prompt lookup drafts the digits and separators it has seen
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def server(session_workdir, smollm_engine_dir):
    spec = served_smollm_spec(
        session_workdir,
        "spec_decode_model_repo",
        "deploy.torch.spec.method=prompt_lookup",
        "deploy.torch.spec.num_draft_tokens=4",
    )
    deploy.run(spec)
    with launch.local_server(spec.deploy, spec.workdir) as server:
        yield server


def test_served_speculation_keeps_greedy_text_and_exports_its_counters(server, smollm_engine_dir):
    engine = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")
    (want,) = engine.generate([COUNTING], SamplingParams(max_tokens=MAX_TOKENS))
    client = GrpcClient(server.endpoints.grpc_url, timeout_s=120)
    assert client.generate(GenerateRequest(COUNTING, max_tokens=MAX_TOKENS)) == want.text
    drafted = accepted = 0.0
    for _ in range(50):  # the model's metrics poll catches up
        samples = fetch_metrics(server.endpoints.metrics_url)
        drafted, accepted = (
            metric_value(samples, f"pipeline_engine_spec_{name}_tokens", model="tensorrt_llm")
            for name in ("draft", "accepted")
        )
        if accepted:
            break
        time.sleep(0.2)
    assert 0 < accepted <= drafted
    rate = metric_value(samples, "pipeline_engine_spec_acceptance_rate", model="tensorrt_llm")
    assert rate == pytest.approx(accepted / drafted)
