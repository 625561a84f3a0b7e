"""The frontend as two worker processes on one port, in front of the package's tritonserver:
streams on both workers count against one limit, a dropped stream is cancelled in the engine
whichever worker held it, /metrics from either worker sums both, the greedy text is the gRPC
client's, and a killed worker is replaced."""

import dataclasses
import http.client
import json
import os
import signal
import time

import psutil
import pytest
import requests

from pipeline.client.metrics import metric_value, parse_metrics
from pipeline.openai_api.server import frontend_server
from pipeline.openai_api.workers import FrontendWorkers
from pipeline.server.ports import free_ports
from tests.integration.openai_api.conftest import (
    API_KEY,
    KEY_ENV,
    MAX_IN_FLIGHT,
    PROMPTS,
    C,
    completion,
    grpc_answer,
    post,
)
from tests.integration.openai_api.test_openai_errors_and_limits import (
    engine_gauges,
    engine_idle_again,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]
NUM_WORKERS = 2
HEADERS = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def pool(served_spec, facts, triton):
    (port,) = free_ports(1)
    spec = dataclasses.replace(served_spec.serve.openai, port=port, workers=NUM_WORKERS)
    os.environ[KEY_ENV] = API_KEY
    try:
        server = frontend_server(
            spec,
            served_spec.model.name,
            facts,
            served_spec.deploy,
            triton.endpoints.grpc_url,
            triton.endpoints.metrics_url,
        )
    finally:
        del os.environ[KEY_ENV]
    assert isinstance(server, FrontendWorkers)
    with server:
        yield server


def worker_of(pool: FrontendWorkers, conn: http.client.HTTPConnection) -> int:
    """The pid of the worker that accepted conn (the one holding the server side of it)."""
    client_port = conn.sock.getsockname()[1]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in pool.pids:
            for c in psutil.Process(pid).net_connections(kind="tcp"):
                if c.raddr and c.raddr.port == client_port:
                    return pid
        time.sleep(0.05)
    raise AssertionError(f"no worker accepted the connection from port {client_port}")


def connections_on_each_worker(pool: FrontendWorkers, per_worker: int) -> list:
    """per_worker open connections to each worker (the kernel picks; extra ones are closed)."""
    by_worker: dict[int, list] = {pid: [] for pid in pool.pids}
    for _ in range(64):
        if all(len(conns) >= per_worker for conns in by_worker.values()):
            break
        conn = http.client.HTTPConnection(pool.url.removeprefix("http://"), timeout=120)
        conn.connect()
        conns = by_worker[worker_of(pool, conn)]
        if len(conns) < per_worker:
            conns.append(conn)
        else:
            conn.close()
    assert all(len(conns) == per_worker for conns in by_worker.values()), by_worker
    return [conn for conns in by_worker.values() for conn in conns]


def requests_answered(pool) -> float:
    samples = parse_metrics(requests.get(f"{pool.url}/metrics", timeout=30).text)
    return metric_value(samples, "pipeline_openai_requests_total", endpoint="completions") or 0


def test_streams_on_both_workers_share_one_limit_and_are_cancelled_when_dropped(
    pool, triton, model_name
):
    assert len(pool.pids) == NUM_WORKERS
    idle = engine_gauges(triton)
    max_tokens = 200  # far more than are made before the streams are dropped (EOS off)
    streams = connections_on_each_worker(pool, MAX_IN_FLIGHT // NUM_WORKERS)
    for i, conn in enumerate(streams):
        body = completion(
            model_name, prompt=f"Story {i}:", max_tokens=max_tokens, ignore_eos=True, stream=True
        )
        conn.request("POST", C, json.dumps(body), HEADERS)
        response = conn.getresponse()
        assert response.status == 200
        assert response.readline().startswith(b"data: ")  # running in the engine
    assert engine_gauges(triton)["running_requests"] == MAX_IN_FLIGHT
    samples = parse_metrics(requests.get(f"{pool.url}/metrics", timeout=30).text)
    assert metric_value(samples, "pipeline_openai_engine_requests_in_flight") == MAX_IN_FLIGHT
    for _ in range(2 * NUM_WORKERS):  # new connections: whichever worker takes them refuses
        refused = post(pool, C, completion(model_name))
        assert refused.status_code == 429, refused.text
    for conn in streams:
        conn.close()  # the client hangs up mid-stream
    now = engine_idle_again(triton, idle)
    assert now["free_kv_blocks"] == idle["free_kv_blocks"]
    assert now["generated_tokens"] - idle["generated_tokens"] < MAX_IN_FLIGHT * max_tokens
    samples = parse_metrics(requests.get(f"{pool.url}/metrics", timeout=30).text)
    assert metric_value(samples, "pipeline_openai_engine_requests_in_flight") == 0


def test_every_worker_answers_the_grpc_text_and_metrics_count_them_all(pool, grpc, model_name):
    expected, _ = grpc_answer(grpc, PROMPTS[0], max_tokens=4)
    before = requests_answered(pool)
    conns = connections_on_each_worker(pool, 2)
    for conn in conns:
        conn.request("POST", C, json.dumps(completion(model_name)), HEADERS)
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["choices"][0]["text"] == expected
        conn.close()
    # each read of /metrics comes from whichever worker the kernel picks: all say the same
    assert {requests_answered(pool) - before for _ in range(4)} == {len(conns)}


def test_a_killed_worker_is_replaced(pool, model_name):
    victim = pool.pids[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pids = pool.pids
        if len(pids) == NUM_WORKERS and victim not in pids:
            break
        time.sleep(0.2)
    assert len(pids) == NUM_WORKERS and victim not in pids
    # the new worker is serving once the kernel sends it a connection
    conns = connections_on_each_worker(pool, 1)
    for conn in conns:
        conn.request("POST", C, json.dumps(completion(model_name)), HEADERS)
        assert conn.getresponse().status == 200
        conn.close()


def test_once_the_port_drains_every_worker_refuses_with_503(pool, model_name):
    """Last: the pool admits nothing after this."""
    pool.stop_admitting()
    conns = connections_on_each_worker(pool, 1)
    for conn in conns:
        conn.request("POST", C, json.dumps(completion(model_name)), HEADERS)
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 503 and body["error"]["code"] == "server_shutting_down"
        conn.close()
    assert pool.num_in_flight == 0
