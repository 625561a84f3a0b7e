"""`python -m pipeline serve` stopped by SIGTERM while 8 OpenAI streams and 8 Triton gRPC streams
run: with time enough to drain, every stream ends normally and new requests are refused (503,
Triton's own refusal); with a 1 s drain and long generations, each OpenAI stream ends with an
error event and [DONE] and each gRPC stream with an error response. Either way the wrapper exits
0 and its server's processes are gone. Its `serve: ready` line comes once every port it names
accepts connections.

The engine is SmolLM2 built for 16 sequences a batch, so the 16 streams run at once.
"""

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import numpy as np
import psutil
import pytest
import requests

from pipeline.client import ClientError, GenerateRequest, GrpcClient
from pipeline.server.ports import accepts, free_ports
from tests.conftest import SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

NUM_STREAMS = 8  # on each API
ENGINE_OVERRIDES = (
    *(o for o in SMOLLM_ENGINE_OVERRIDES if not o.startswith("build.max_batch_size=")),
    "build.max_batch_size=16",
)
READY_TIMEOUT_S = 600
WAIT_S = 300  # generous bounds on a loaded CPU: streams starting, ending, the wrapper's exit
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def engine16(session_workdir, smollm_ckpt_dir):
    from pipeline.stages import build

    return build.run(make_spec("build", *ENGINE_OVERRIDES, workdir=session_workdir))


@dataclass
class Served:
    wrapper: subprocess.Popen
    http: int
    grpc: int
    metrics: int
    openai: int
    model: str = ""
    lines: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def read_rest(self) -> None:
        for line in self.wrapper.stdout:
            self.lines.append(line)
            if line.startswith("serve: stopping"):
                self.stopping.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)


def start_serve(session_workdir, repo: str, drain_timeout_s: float) -> Served:
    """The wrapper, once it printed `serve: ready`; asserts every port it names accepts then."""
    ports = free_ports(4)
    overrides = [
        f"workdir={session_workdir}",
        *ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / repo}",
        f"deploy.http_port={ports[0]}",
        f"deploy.grpc_port={ports[1]}",
        f"deploy.metrics_port={ports[2]}",
        f"serve.openai.port={ports[3]}",
        "serve.openai.workers=1",
        f"serve.drain_timeout_s={drain_timeout_s}",
        "deploy.torch.num_threads=1",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_OPENAI_API_KEY"}
    wrapper = subprocess.Popen(
        [sys.executable, "-u", "-m", "pipeline", "serve", *overrides],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=session_workdir,
    )
    served = Served(wrapper, *ports)
    timer = threading.Timer(READY_TIMEOUT_S, wrapper.kill)
    timer.start()
    for line in wrapper.stdout:
        served.lines.append(line)
        if line.startswith("serve: ready"):
            refusing = [port for port in ports if not accepts("127.0.0.1", port)]
            assert refusing == [], f"`serve: ready` printed while {refusing} refuse connections"
            break
    timer.cancel()
    if wrapper.poll() is not None or not served.lines[-1].startswith("serve: ready"):
        wrapper.kill()
        pytest.fail(f"serve did not get ready:\n{served.output[-3000:]}")
    threading.Thread(target=served.read_rest, daemon=True).start()
    models = requests.get(f"http://127.0.0.1:{served.openai}/v1/models", timeout=30).json()
    served.model = models["data"][0]["id"]
    return served


@dataclass
class Stream:
    started: threading.Event = field(default_factory=threading.Event)
    status: int | None = None
    events: list = field(default_factory=list)  # OpenAI: each data line, parsed ([DONE] as is)
    responses: list = field(default_factory=list)  # gRPC
    error: str | None = None
    body: dict | None = None


def openai_stream(served: Served, num_tokens: int, stream: Stream) -> None:
    body = {
        "model": served.model,
        "prompt": PROMPT,
        "max_tokens": num_tokens,
        "min_tokens": num_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = f"http://127.0.0.1:{served.openai}/v1/completions"
    with requests.post(url, json=body, stream=True, timeout=WAIT_S) as response:
        stream.status = response.status_code
        if response.status_code != 200:
            stream.body = response.json()
            stream.started.set()
            return
        for line in response.iter_lines():
            if line.startswith(b"data: "):
                data = line[len(b"data: ") :]
                stream.events.append(data.decode() if data == b"[DONE]" else json.loads(data))
                stream.started.set()


def grpc_arrays(num_tokens: int) -> dict:
    arrays = GenerateRequest(PROMPT, max_tokens=num_tokens, temperature=0.0).arrays(stream=True)
    return arrays | {"min_tokens": np.array([[num_tokens]], np.int32)}


def grpc_stream(served: Served, num_tokens: int, stream: Stream) -> None:
    client = GrpcClient(f"127.0.0.1:{served.grpc}", model="ensemble", timeout_s=WAIT_S)
    try:
        for response in client.responses(grpc_arrays(num_tokens), count_tokens=True):
            stream.responses.append(response)
            stream.started.set()
    except ClientError as exc:
        stream.error = str(exc)
        stream.started.set()
    finally:
        client.close()


def run_streams(
    served: Served, openai_tokens: int, grpc_tokens: int
) -> tuple[list[Stream], list[Stream], list, list]:
    """Start NUM_STREAMS streams on each API; return once each has its first token, with the
    wrapper's processes (the server, its stubs, the engine process) as they are then."""
    streams = ([Stream() for _ in range(NUM_STREAMS)], [Stream() for _ in range(NUM_STREAMS)])
    threads = [
        threading.Thread(target=target, args=(served, num_tokens, stream), daemon=True)
        for target, num_tokens, group in zip(
            (openai_stream, grpc_stream), (openai_tokens, grpc_tokens), streams, strict=True
        )
        for stream in group
    ]
    for thread in threads:
        thread.start()
    for stream in (*streams[0], *streams[1]):
        assert stream.started.wait(WAIT_S), served.output[-3000:]
    processes = psutil.Process(served.wrapper.pid).children(recursive=True)
    return *streams, threads, processes


def stop_and_wait(served: Served, threads: list, processes: list) -> None:
    """SIGTERM the wrapper; once it says it is stopping, new requests are refused; then every
    stream ends, the wrapper exits 0 and none of its processes is left."""
    served.wrapper.send_signal(signal.SIGTERM)
    assert served.stopping.wait(WAIT_S), served.output[-3000:]
    refused = requests.post(
        f"http://127.0.0.1:{served.openai}/v1/completions",
        json={"model": served.model, "prompt": PROMPT, "max_tokens": 4},
        timeout=WAIT_S,
    )
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "server_shutting_down"
    with pytest.raises(ClientError) as refusal:
        grpc = GrpcClient(f"127.0.0.1:{served.grpc}", model="ensemble", timeout_s=WAIT_S)
        list(grpc.responses(grpc_arrays(4)))
    # the model's refusal, or Triton's own once it has acted on its SIGTERM
    refusals = ("takes no new requests", "stopped accepting new inference requests")
    assert any(text in str(refusal.value) for text in refusals), refusal.value
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert served.wrapper.wait(WAIT_S) == 0, served.output[-3000:]
    _, alive = psutil.wait_procs(processes, timeout=WAIT_S)
    running = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert running == [], running


def test_a_long_enough_drain_lets_every_stream_finish(session_workdir, engine16):
    # the OpenAI streams outlast the gRPC ones: Triton, which counts only the latter as in
    # flight, unloads the model while they still run
    openai_tokens, grpc_tokens = 64, 24
    served = start_serve(session_workdir, "drain_long_repo", drain_timeout_s=240)
    try:
        openai_streams, grpc_streams, threads, processes = run_streams(
            served, openai_tokens, grpc_tokens
        )
        stop_and_wait(served, threads, processes)
    finally:
        served.wrapper.kill()
    for stream in openai_streams:
        assert stream.status == 200 and stream.events[-1] == "[DONE]", stream
        *chunks, last, usage = stream.events[:-1]
        assert last["choices"][0]["finish_reason"] == "length", stream.events[-3:]
        assert usage["usage"]["completion_tokens"] == openai_tokens
        assert not any("error" in chunk for chunk in chunks)
    for stream in grpc_streams:
        assert stream.error is None, stream.error
        assert stream.responses[-1].is_final
        assert sum(r.num_tokens for r in stream.responses) == grpc_tokens
    assert "serve: drained" in served.output


def test_a_short_drain_ends_each_stream_with_an_error(session_workdir, engine16):
    num_tokens = 200  # many seconds of generation: far past the 1 s drain
    served = start_serve(session_workdir, "drain_short_repo", drain_timeout_s=1)
    try:
        openai_streams, grpc_streams, threads, processes = run_streams(
            served, num_tokens, num_tokens
        )
        stop_and_wait(served, threads, processes)
    finally:
        served.wrapper.kill()
    for stream in openai_streams:
        assert stream.status == 200 and stream.events[-1] == "[DONE]", stream
        error = stream.events[-2]["error"]
        assert "shutting down" in error["message"], error
        assert "serve.drain_timeout_s=1" in error["message"], error
        assert error["type"] == "server_error"
        assert 0 < sum(len(e["choices"][0]["text"]) for e in stream.events[:-2]) and all(
            e["choices"][0]["finish_reason"] is None for e in stream.events[:-2]
        )
    for stream in grpc_streams:
        assert stream.error is not None and "shutting down" in stream.error, stream.error
        assert 0 < sum(r.num_tokens for r in stream.responses) < num_tokens
    assert f"{NUM_STREAMS} OpenAI requests ended by the drain time" in served.output
