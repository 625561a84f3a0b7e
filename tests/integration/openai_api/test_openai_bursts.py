"""Bursts against frontends that queue, in front of the package's tritonserver (engine
max_batch_size 8): 300 concurrent streams all served; past a queue bound of 50 the excess gets 429
with Retry-After and the server answers as before; a queued client that leaves frees its place
(what runs after shows it); the Grafana dashboard names only metrics a running server exports.

Where a test needs the running requests to stay running while it queues others, it pauses the
engine's process (SIGSTOP, then SIGCONT): on a CPU a whole answer takes a second or two, less
than a test may need, and how long it takes is no part of what is tested."""

import contextlib
import dataclasses
import functools
import http.client
import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests

from pipeline.client.metrics import fetch_metrics, metric_value, parse_metrics
from pipeline.openai_api.errors import RETRY_AFTER_S
from pipeline.openai_api.server import frontend_server
from pipeline.server.ports import free_ports
from tests.integration.openai_api.conftest import C, completion

pytestmark = [pytest.mark.triton, pytest.mark.slow]
DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "llm-pipeline.json"
NUM_BURST = 300
MAX_RUNNING = 8  # the engine's max_batch_size
LONG_TOKENS = 240  # with a short prompt, as many as the engine's max_seq_len of 256 allows


@contextlib.contextmanager
def queueing_frontend(
    served_spec, facts, triton, max_running: int, max_queued: int, workers: int = 1
):
    """A frontend of its own (no API key) with these bounds."""
    (port,) = free_ports(1)
    spec = dataclasses.replace(
        served_spec.serve.openai,
        port=port,
        workers=workers,
        api_key_env="",
        max_concurrent_requests=max_running,
        max_queued_requests=max_queued,
    )
    ends = triton.endpoints
    with frontend_server(
        spec, served_spec.model.name, facts, served_spec.deploy, ends.grpc_url, ends.metrics_url
    ) as server:
        yield server


@pytest.fixture(scope="module")
def roomy(served_spec, facts, triton):
    with queueing_frontend(served_spec, facts, triton, MAX_RUNNING, 1000) as server:
        yield server


@contextlib.contextmanager
def engine_paused(triton):
    """The engine process (deploy.torch.engine_process, a child of the `tensorrt_llm` model's
    stub) stopped while it lasts: what runs in it stays running, nothing new is generated. The
    stub itself keeps answering tritonserver, which would fail its requests otherwise."""
    stubs = [
        p
        for p in psutil.Process(triton.process.pid).children(recursive=True)
        if any("tensorrt_llm" in arg for arg in p.cmdline())
    ]
    processes = {p.pid: p for s in stubs for p in s.children(recursive=True)}
    assert processes, "no engine process under the tensorrt_llm stub"
    for process in processes.values():
        process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGCONT)


def scrape(server) -> dict:
    return parse_metrics(requests.get(f"{server.url}/metrics", timeout=30).text)


def wait_for_gauge(server, name: str, value: float, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while (now := metric_value(scrape(server), name)) != value:
        assert time.monotonic() < deadline, f"{name} is {now}, never became {value}"
        time.sleep(0.05)


def greedy(server, model_name: str) -> str:
    response = requests.post(f"{server.url}{C}", json=completion(model_name), timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def stream_one(url: str, body: dict) -> tuple[int, str, dict]:
    """(status, the streamed text or the error body, headers)."""
    with requests.post(url, json=body, stream=True, timeout=600) as response:
        if response.status_code != 200:
            return response.status_code, response.text, response.headers
        text, done = "", False
        for line in response.iter_lines():
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: {"):
                event = json.loads(line[6:])
                assert "error" not in event, event
                text += "".join(c["text"] for c in event["choices"])
        assert done
        return 200, text, response.headers


def burst(server, bodies: list[dict]) -> list[tuple[int, str, dict]]:
    """Every body at once, each from a thread of its own."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(functools.partial(stream_one, f"{server.url}{C}"), bodies))


def test_300_concurrent_streams_wait_their_turn_and_all_succeed(roomy, model_name):
    expected = greedy(roomy, model_name)
    before = scrape(roomy)
    body = completion(model_name, max_tokens=4, stream=True)
    results = burst(roomy, [body] * NUM_BURST)
    assert [status for status, _, _ in results] == [200] * NUM_BURST
    assert {text for _, text, _ in results} == {expected}
    after = scrape(roomy)
    waited = "pipeline_openai_queue_wait_seconds_count"
    assert metric_value(after, waited) - metric_value(before, waited) == NUM_BURST
    assert metric_value(after, "pipeline_openai_engine_requests_in_flight") == 0
    assert metric_value(after, "pipeline_openai_requests_waiting") == 0


def test_past_the_queue_bound_the_excess_gets_429_with_retry_after(
    served_spec, facts, triton, model_name
):
    max_queued = 50
    with queueing_frontend(served_spec, facts, triton, MAX_RUNNING, max_queued) as server:
        expected = greedy(server, model_name)
        url = f"{server.url}{C}"
        short = completion(model_name, max_tokens=4, stream=True)
        first = MAX_RUNNING + max_queued
        with ThreadPoolExecutor(first) as pool:
            with engine_paused(triton):  # what is admitted stays running
                admitted = [pool.submit(stream_one, url, short) for _ in range(first)]
                wait_for_gauge(server, "pipeline_openai_engine_requests_in_flight", MAX_RUNNING)
                wait_for_gauge(server, "pipeline_openai_requests_waiting", max_queued)
                refused = burst(server, [short] * max_queued)
            served = [future.result() for future in admitted]
        for status, body, headers in refused:
            assert status == 429 and headers["retry-after"] == str(RETRY_AFTER_S)
            assert json.loads(body)["error"]["code"] == "rate_limit_exceeded"
        assert [(status, text) for status, text, _ in served] == [(200, expected)] * first
        assert requests.get(f"{server.url}/health", timeout=30).status_code == 200
        assert greedy(server, model_name) == expected
        samples = scrape(server)
        assert metric_value(samples, "pipeline_openai_requests_total", status="429") == max_queued


def engine_tokens(triton) -> float:
    return metric_value(
        fetch_metrics(triton.endpoints.metrics_url), "pipeline_engine_generated_tokens"
    )


def send(server, body: dict) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=300)
    conn.request("POST", C, json.dumps(body), {"Content-Type": "application/json"})
    return conn


def test_a_queued_client_that_leaves_never_takes_its_slot(served_spec, facts, triton, model_name):
    with queueing_frontend(served_spec, facts, triton, 1, 100) as server:
        expected = greedy(server, model_name)
        tokens_before, before = engine_tokens(triton), scrape(server)
        with engine_paused(triton):  # what is admitted stays running
            holder = send(server, completion(model_name))
            wait_for_gauge(server, "pipeline_openai_engine_requests_in_flight", 1)
            leaver = send(server, completion(model_name, max_tokens=LONG_TOKENS, ignore_eos=True))
            wait_for_gauge(server, "pipeline_openai_requests_waiting", 1)
            leaver.close()  # it hangs up while queued
            wait_for_gauge(server, "pipeline_openai_requests_waiting", 0)
            assert metric_value(scrape(server), "pipeline_openai_engine_requests_in_flight") == 1
            after = send(server, completion(model_name))
            wait_for_gauge(server, "pipeline_openai_requests_waiting", 1)
        # the engine goes on: the holder ends, and its one slot goes to the request after
        held = holder.getresponse()
        assert held.status == 200 and json.loads(held.read())["choices"][0]["text"] == expected
        holder.close()
        answer = after.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["choices"][0]["text"] == expected
        after.close()
        wait_for_gauge(server, "pipeline_openai_engine_requests_in_flight", 0)
        samples = scrape(server)
        waited = "pipeline_openai_queue_wait_seconds_count"
        # admitted: the holder and the request after (the leaver never was) ...
        assert metric_value(samples, waited) - metric_value(before, waited) == 2
        assert metric_value(samples, "pipeline_openai_requests_total", status="499") == 1
        # ... and the engine made a few tokens (the holder's, the one after's), never the
        # leaver's LONG_TOKENS
        deadline = time.monotonic() + 60
        while metric_value(
            fetch_metrics(triton.endpoints.metrics_url), "pipeline_engine_running_requests"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert engine_tokens(triton) - tokens_before < LONG_TOKENS


def test_two_workers_share_one_queue_and_hand_slots_to_each_other(
    served_spec, facts, triton, model_name
):
    max_running, num_queued = 2, 6
    with queueing_frontend(served_spec, facts, triton, max_running, 100, workers=2) as server:
        expected = greedy(server, model_name)
        body = completion(model_name, stream=True)
        num = max_running + num_queued
        with ThreadPoolExecutor(num) as pool:
            with engine_paused(triton):  # what is admitted stays running
                results = [pool.submit(stream_one, f"{server.url}{C}", body) for _ in range(num)]
                # the gauges are the port's, whichever worker answers the scrape
                wait_for_gauge(server, "pipeline_openai_engine_requests_in_flight", max_running)
                wait_for_gauge(server, "pipeline_openai_requests_waiting", num_queued)
            assert [f.result()[:2] for f in results] == [(200, expected)] * num
        wait_for_gauge(server, "pipeline_openai_requests_waiting", 0)
        wait_for_gauge(server, "pipeline_openai_engine_requests_in_flight", 0)


METRIC_NAME = re.compile(r"\bpipeline_[a-z0-9_]+")


def test_every_dashboard_panel_names_only_metrics_the_running_server_exports(roomy, model_name):
    greedy(roomy, model_name)
    bad = requests.post(f"{roomy.url}{C}", json=completion(model_name, top_p=2.0), timeout=60)
    assert bad.status_code == 400  # an error status too, for the errors panel
    exported = {name for name, _ in scrape(roomy)}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert panels
    for panel in panels:
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs, panel["title"]
        for expr in exprs:
            names = METRIC_NAME.findall(expr)
            assert names, (panel["title"], expr)
            assert set(names) <= exported, (panel["title"], set(names) - exported)
