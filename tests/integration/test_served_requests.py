"""The served SmolLM2 at the request boundary, in the real tritonserver: a cancelled or
disconnected BLS stream stops its engine request, a missing required input is named over gRPC
and HTTP, and what Triton's HTTP JSON parser does with numbers and types it cannot convert.

Engine work is counted with the engine's own counters (pipeline_engine_generated_tokens, once the
running requests are back to 0), not timed.
"""

import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import requests

from pipeline.client import ClientError, GenerateRequest, GrpcClient, HttpClient, cli
from pipeline.client.metrics import fetch_metrics, metric_value
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.server import launch
from pipeline.stages import deploy
from tests.conftest import served_smollm_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

# greedy SmolLM2 counts on past the engine's max_seq_len (256) from here: no early end
COUNTING = "1, 2, 3, 4, 5,"
LONG_TOKENS = 200
NUM_STREAMS = 4
GREEDY = GenerateRequest("The capital of France is", max_tokens=8)


@pytest.fixture(scope="module")
def server(session_workdir, smollm_engine_dir):
    spec = served_smollm_spec(session_workdir, "requests_model_repo")
    deploy.run(spec)
    with launch.local_server(spec.deploy, spec.workdir) as server:
        yield server


@pytest.fixture(scope="module")
def counting_runs_long(smollm_engine_dir):
    """Without the precondition a cancellation test passes vacuously on a stream that ends early."""
    engine = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")
    output = engine.generate([COUNTING], SamplingParams(max_tokens=LONG_TOKENS))[0]
    assert len(output.token_ids) == LONG_TOKENS


def generate_http(server, model: str, body: dict) -> requests.Response:
    return requests.post(f"{server.endpoints.http_url}/v2/models/{model}/generate", json=body)


def settled_generated_tokens(server) -> float:
    """The engine's generated-token counter once no request runs and the value stopped moving."""
    previous = None
    for _ in range(600):
        samples = fetch_metrics(server.endpoints.metrics_url)
        value = (
            metric_value(samples, "pipeline_engine_generated_tokens", model="tensorrt_llm"),
            metric_value(samples, "pipeline_engine_running_requests", model="tensorrt_llm"),
        )
        if value == previous and value[1] == 0:
            return value[0]
        previous = value
        time.sleep(0.2)
    raise AssertionError(f"the engine did not settle: {previous}")


def cancel_streams(server) -> None:
    """Open the streams, take a response of each, close them (gRPC cancels each request)."""
    client = GrpcClient(server.endpoints.grpc_url, model="tensorrt_llm_bls", timeout_s=120)
    request = GenerateRequest(COUNTING, max_tokens=LONG_TOKENS)
    streams = [client.responses(request.arrays(stream=True)) for _ in range(NUM_STREAMS)]
    for stream in streams:
        assert next(stream).is_final is False
    for stream in streams:
        stream.close()


DISCONNECTING_CLIENT = """
import sys, time
from pipeline.client import GenerateRequest, GrpcClient
client = GrpcClient(sys.argv[1], model="tensorrt_llm_bls", timeout_s=120)
request = GenerateRequest(sys.argv[2], max_tokens=int(sys.argv[3]))
streams = [client.responses(request.arrays(stream=True)) for _ in range(int(sys.argv[4]))]
for stream in streams:
    next(stream)
print("streaming", flush=True)
time.sleep(600)
"""


def kill_streaming_client(server) -> None:
    """A client process that is killed mid-stream: its connections just drop."""
    client = subprocess.Popen(
        [sys.executable, "-c", DISCONNECTING_CLIENT, server.endpoints.grpc_url, COUNTING]
        + [str(LONG_TOKENS), str(NUM_STREAMS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout.readline().strip() == "streaming"
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()


@pytest.mark.parametrize("end_streams", [cancel_streams, kill_streaming_client])
def test_a_cancelled_bls_stream_stops_its_engine_request(server, counting_runs_long, end_streams):
    before = settled_generated_tokens(server)
    end_streams(server)
    generated = settled_generated_tokens(server) - before
    # each stream ran on to LONG_TOKENS when the BLS only stopped reading its LLM request
    assert generated < NUM_STREAMS * LONG_TOKENS / 2, generated


DTYPES = {"text_input": np.object_, "max_tokens": np.int32, "stream": np.bool_}
MISSING = [
    ({"max_tokens": 8, "stream": False}, "text_input"),
    ({"text_input": "Hi", "stream": False}, "max_tokens"),
]


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize(("body", "missing"), MISSING)
def test_a_missing_required_input_is_named(server, model, body, missing):
    """Triton counts required inputs only: `stream` in place of text_input passed its check, and
    the ensemble answered with one empty final response, no error."""
    response = generate_http(server, model, body)
    assert response.status_code == 400 and missing in response.json()["error"]
    arrays = {
        name: np.array([[value.encode() if isinstance(value, str) else value]], DTYPES[name])
        for name, value in body.items()
    }
    client = GrpcClient(server.endpoints.grpc_url, model=model, timeout_s=120)
    with pytest.raises(ClientError, match=missing):
        list(client.responses(arrays))


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"temperature": float("nan"), "top_k": 5}, r"temperature=nan is not a finite number"),
        ({"max_tokens": -5}, r"(max_tokens|request_output_len)=-5 .*is outside \[1,"),
        ({"top_p": 1.5, "top_k": 0}, r"top_p=1.5 .*is outside \[0.0, 1.0\]"),
        # finite float32 values the sampler would overflow with: once a NaN and a 502
        ({"frequency_penalty": -3e38}, r"frequency_penalty=-3\S* is outside \[-2.0, 2.0\]"),
        ({"repetition_penalty": 1e-30}, r"repetition_penalty=1\S* is outside \[1e-06, "),
        ({"temperature": 3e38, "top_k": 5}, r"temperature=3\S* is outside \[0.0, 1000000.0\]"),
    ],
)
def test_a_value_out_of_range_is_named_by_the_model_that_took_it(server, model, values, named):
    """The BLS checks what it was sent before calling preprocessing (in front of either
    backend's tensorrt_llm); through the ensemble the torch tensorrt_llm checks it."""
    body = json.dumps(GREEDY.values(stream=False) | values)  # NaN as a JSON literal, as curl
    url = f"{server.endpoints.http_url}/v2/models/{model}/generate"
    response = requests.post(url, data=body, timeout=120)
    assert response.status_code == 400 and re.search(named, response.json()["error"])
    assert "tensorrt_llm" in response.json()["error"]  # the BLS itself, or the ensemble's LLM


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"text_input": "hello " * 400}, "max_input_len=192"),
        ({"max_tokens": 400}, "max_seq_len=256"),
    ],
)
def test_a_request_no_engine_state_could_take_is_a_400(server, model, values, named):
    """Never servable by this engine, whatever else runs: a client error, not one to retry."""
    response = generate_http(server, model, GREEDY.values(stream=False) | values)
    assert response.status_code == 400 and named in response.json()["error"]


def test_http_json_that_triton_converts_before_any_model(server):
    """Triton 2.51's HTTP frontend turns the JSON into tensors itself (server r24.10,
    src/http_server.cc, ReadDataFromJsonHelper): an integer is cast to the input's type without
    a range check, and a value of the wrong JSON type is its own error, HTTP 500. No model sees
    the original, so these are pinned as Triton's; the server stays healthy."""
    want = generate_http(server, "ensemble", GREEDY.values(stream=False)).json()
    assert "text_output" in want, want

    def send(**values):
        return generate_http(server, "ensemble", GREEDY.values(stream=False) | values)

    wrapped = send(max_tokens=10**12)  # wraps to int32 -727379968, which the range check names
    assert wrapped.status_code == 400
    assert "-727379968" in wrapped.json()["error"]
    assert send(max_tokens=2**32 + 8).json() == want  # wraps to 8: served as 8, silently
    for values in ({"max_tokens": "8"}, {"text_input": 5}, {"stream": "false"}, {"seed": -1}):
        response = send(**values)
        assert response.status_code == 500, values
        assert response.json()["error"].startswith("Unable to parse"), values
    assert requests.get(f"{server.endpoints.http_url}/v2/health/ready").status_code == 200
    assert generate_http(server, "ensemble", GREEDY.values(stream=False)).json() == want


def test_a_dead_engine_fails_its_streams_at_once_and_is_started_again(server):
    """The engine process killed mid-stream (as the OOM killer would): the stream ends with the
    cause instead of hanging, the model gets a new engine, and readiness (Triton's and the
    engine's gauge, as `pipeline.client ready` reads both) and the greedy text are as before."""
    http = HttpClient(server.endpoints.http_url, timeout_s=120)
    before = http.generate(GREEDY)
    processes = psutil.Process(server.process.pid).children(recursive=True)
    (engine,) = [
        p for p in processes if "pipeline.engine.core.engine_process" in " ".join(p.cmdline())
    ]
    stream = GrpcClient(server.endpoints.grpc_url, timeout_s=120).stream(
        GenerateRequest(COUNTING, max_tokens=LONG_TOKENS)
    )
    next(stream)  # in flight
    engine.kill()
    with pytest.raises(ClientError, match="engine process exited"):
        list(stream)
    deadline = time.monotonic() + 120  # the gauges follow the model's metrics poll
    metrics_url = server.endpoints.metrics_url
    while metric_value(fetch_metrics(metrics_url), "pipeline_engine_restarts") != 1:
        assert time.monotonic() < deadline, "the engine was not started again"
        time.sleep(0.2)
    ready = ["--url", server.endpoints.http_url, "--protocol", "http", "ready", "--wait", "120"]
    assert cli.main([*ready, "--metrics-url", server.endpoints.metrics_url]) == 0
    assert metric_value(fetch_metrics(server.endpoints.metrics_url), "pipeline_engine_ready") == 1
    assert http.generate(GREEDY) == before
