"""`python -m pipeline serve` as a user runs it, killed from outside: the real tritonserver, its
python stubs and the engine process go with a SIGKILLed wrapper, the next serve starts cleanly on
the same ports, and a SIGKILLed tritonserver ends its wrapper non-zero with the cause."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from pipeline.client import GenerateRequest, HttpClient
from pipeline.server.ports import free_ports
from pipeline.server.triton_server import SHM_DIR
from tests.conftest import SMOLLM_ENGINE_OVERRIDES

pytestmark = [pytest.mark.triton, pytest.mark.slow]

READY_TIMEOUT_S = 600
GONE_TIMEOUT_S = 180  # a server's graceful stop waits up to its exit timeout; the stubs poll


@pytest.fixture(scope="module")
def serve_command(session_workdir, smollm_engine_dir) -> tuple[list[str], str]:
    http, grpc, metrics, openai_api = free_ports(4)
    overrides = [
        f"workdir={session_workdir}",
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / 'faults_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        f"serve.openai.port={openai_api}",  # the frontend serve runs beside the server
        "deploy.torch.num_threads=1",
    ]
    return [sys.executable, "-m", "pipeline", "serve", *overrides], f"http://127.0.0.1:{http}"


def start_serve(command: list[str], url: str, log_path: Path) -> subprocess.Popen:
    """The serve wrapper, once its server answers /v2/health/ready."""
    with open(log_path, "ab") as log_file:
        wrapper = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, cwd=log_path.parent
        )
    for _ in range(READY_TIMEOUT_S * 2):
        if wrapper.poll() is not None:
            pytest.fail(f"serve exited with {wrapper.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if requests.get(f"{url}/v2/health/ready", timeout=2).ok:
                return wrapper
        except requests.RequestException:
            pass
        time.sleep(0.5)
    wrapper.kill()
    pytest.fail(f"serve not ready in {READY_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")


def server_processes(wrapper: subprocess.Popen) -> dict[str, list[psutil.Process]]:
    """The wrapper's descendants by role: the server, its python stubs, the engine process."""
    roles = {"tritonserver": [], "stub": [], "engine": []}
    for process in psutil.Process(wrapper.pid).children(recursive=True):
        command = " ".join(process.cmdline())
        if "triton_python_backend_stub" in command:
            roles["stub"].append(process)
        elif "pipeline.engine.core.engine_process" in command:
            roles["engine"].append(process)
        elif "bin/tritonserver" in command:
            roles["tritonserver"].append(process)
    assert [len(roles["tritonserver"]), len(roles["engine"])] == [1, 1], roles
    assert len(roles["stub"]) >= 4, roles  # pre/postprocessing, BLS, tensorrt_llm
    return roles


def still_running(roles: dict[str, list[psutil.Process]]) -> list[str]:
    """`role pid` of each process still running after GONE_TIMEOUT_S (a zombie has exited)."""
    processes = [p for group in roles.values() for p in group]
    psutil.wait_procs(processes, timeout=GONE_TIMEOUT_S)
    running = []
    for role, group in roles.items():
        for process in group:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    running.append(f"{role} {process.pid}")
            except psutil.NoSuchProcess:
                pass
    return running


def shm_prefix(roles) -> str:
    (arg,) = [a for a in roles["tritonserver"][0].cmdline() if "shm-region-prefix-name=" in a]
    return arg.split("shm-region-prefix-name=")[1]


def test_serve_and_its_server_die_together_and_serve_starts_again(serve_command, tmp_path):
    command, url = serve_command
    log_path = tmp_path / "serve.log"
    first = start_serve(command, url, log_path)
    roles = server_processes(first)
    first.kill()  # SIGKILL: the wrapper cannot stop anything itself
    first.wait()
    assert still_running(roles) == []

    second = start_serve(command, url, log_path)  # same ports: nothing of the first holds them
    assert HttpClient(url, timeout_s=120).generate(GenerateRequest("Hi", max_tokens=4))
    roles = server_processes(second)
    prefix = shm_prefix(roles)
    roles["tritonserver"][0].kill()
    assert second.wait(GONE_TIMEOUT_S) == 1
    output = log_path.read_text()
    assert "was killed by SIGKILL" in output and "while serving" in output
    assert still_running(roles) == []
    assert not list(SHM_DIR.glob(f"{prefix}*"))
