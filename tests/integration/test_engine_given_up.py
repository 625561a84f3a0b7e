"""`python -m pipeline serve` with deploy.torch.max_engine_restarts=0: the engine process SIGKILLed
once (as the OOM killer would) is not started again. Every readiness signal of ours says so, and
requests are refused with the cause, over Triton and on the OpenAI API (503), while the server
itself stays up for an operator to restart."""

import subprocess
import sys
import time

import psutil
import pytest
import requests

from pipeline.client import ClientError, GenerateRequest, HttpClient
from pipeline.client.metrics import engines_ready, fetch_metrics, metric_value
from pipeline.server.ports import free_ports
from tests.conftest import SMOLLM_ENGINE_OVERRIDES
from tests.integration.test_server_faults import server_processes, start_serve

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_an_engine_given_up_is_not_ready_anywhere_and_requests_get_the_cause(
    session_workdir, smollm_engine_dir, tmp_path
):
    http, grpc, metrics, openai_port = free_ports(4)
    command = [
        sys.executable,
        "-m",
        "pipeline",
        "serve",
        f"workdir={session_workdir}",
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / 'given_up_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        f"serve.openai.port={openai_port}",
        "deploy.torch.num_threads=1",
        "deploy.torch.max_engine_restarts=0",
    ]
    url, metrics_url = f"http://127.0.0.1:{http}", f"http://127.0.0.1:{metrics}/metrics"
    openai_url = f"http://127.0.0.1:{openai_port}"
    wrapper = start_serve(command, url, tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + 300
        while _status(f"{openai_url}/health") != 200:  # it starts once Triton is ready
            assert time.monotonic() < deadline, "the OpenAI frontend never said ready"
            time.sleep(0.5)
        assert engines_ready(metrics_url)
        (engine,) = server_processes(wrapper)["engine"]
        engine.kill()
        engine.wait(60)
        deadline = time.monotonic() + 60
        while engines_ready(metrics_url):
            assert time.monotonic() < deadline, "pipeline_engine_ready stayed 1"
            time.sleep(0.2)

        assert metric_value(fetch_metrics(metrics_url), "pipeline_engine_ready") == 0
        ready = subprocess.run(
            [sys.executable, "-m", "pipeline.client", "--url", url, "ready"]
            + ["--metrics-url", metrics_url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ready.returncode != 0 and "not ready" in ready.stderr
        assert _status(f"{openai_url}/health") == 503
        with pytest.raises(ClientError) as err:
            HttpClient(url, timeout_s=120).generate(GenerateRequest("Hi", max_tokens=4))
        assert "engine unavailable: it failed and is not started again" in str(err.value)
        assert "engine process exited (code -9)" in str(err.value)
        body = {"model": "smollm2-135m", "prompt": "Hi", "max_tokens": 4}
        answer = requests.post(f"{openai_url}/v1/completions", json=body, timeout=120)
        assert answer.status_code == 503, answer.text
        assert "engine process exited (code -9)" in answer.json()["error"]["message"]
        # not started again: no engine process under the server, which is still up
        assert metric_value(fetch_metrics(metrics_url), "pipeline_engine_restarts") == 0
        commands = [" ".join(p.cmdline()) for p in psutil.Process(wrapper.pid).children(True)]
        assert not [c for c in commands if "pipeline.engine.core.engine_process" in c]
        assert wrapper.poll() is None
    finally:
        wrapper.terminate()
        wrapper.wait(180)


def _status(url: str) -> int | None:
    """GET's status, None while nothing listens."""
    try:
        return requests.get(url, timeout=10).status_code
    except requests.ConnectionError:
        return None
