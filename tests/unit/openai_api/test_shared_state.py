"""What the frontend's worker processes share: one limit on engine requests in flight (and on
requests queued), metrics summed over the processes, and how many workers
serve.openai.workers=0 and max_concurrent_requests=0 mean."""

import asyncio
import dataclasses
import json
import multiprocessing

import pytest

from pipeline.openai_api.admission import Admission
from pipeline.openai_api.errors import RETRY_AFTER_S, APIError
from pipeline.openai_api.recipe import FrontendRecipe
from pipeline.openai_api.served_model import admitted_requests
from pipeline.specs.serve import OpenAISpec

SPAWN = multiprocessing.get_context("spawn")


def test_the_limit_holds_for_all_workers_together():
    counts = Admission.shared_counts(SPAWN, 2)
    first = Admission(4, 0, counts, 0)  # nothing may wait: past the limit, 429 at once
    second = Admission(4, 0, counts, 1)
    tickets = [first.take_now(3)]
    assert second.take_now(2) is None  # 3 + 2 > 4 though the second worker runs none
    with pytest.raises(APIError) as refused:
        asyncio.run(second.take(2))
    assert refused.value.status == 429 and refused.value.retry_after_s == RETRY_AFTER_S
    assert "max_queued_requests" in str(refused.value)
    tickets.append(second.take_now(1))
    assert first.num_in_flight == second.num_in_flight == 4
    assert [t.give_back() for t in tickets + tickets] == [True, True, False, False]
    assert first.num_in_flight == 0 and first.num_waiting == 0
    assert second.take_now(4).num == 4


def test_a_request_above_the_limit_on_its_own_is_a_400_not_a_wait():
    admission = Admission(256, 10)
    with pytest.raises(APIError) as refused:
        admission.take_now(257)
    assert refused.value.status == 400 and "can never be admitted" in str(refused.value)
    assert "max_concurrent_requests" in str(refused.value) and admission.num_in_flight == 0
    assert admission.num_waiting == 0
    admission.take_now(256).give_back()


def test_a_closed_admission_refuses_every_worker_with_503_and_keeps_the_counts():
    counts, closed = Admission.shared_counts(SPAWN, 2), SPAWN.Event()
    first = Admission(4, 8, counts, 0, closed)
    second = Admission(4, 8, counts, 1, closed)
    ticket = first.take_now(1)
    closed.set()  # the port drains
    with pytest.raises(APIError) as refused:
        second.take_now(1)
    assert refused.value.status == 503 and refused.value.code == "server_shutting_down"
    assert second.num_in_flight == 1  # what runs still counts until it ends
    ticket.give_back()
    assert first.num_in_flight == 0


def test_a_drain_refuses_the_requests_still_queued():
    async def scenario() -> tuple[APIError, int, int]:
        admission = Admission(1, 8)  # one process alone: the drain sets its own event
        running = admission.take_now(1)
        queued = asyncio.ensure_future(admission.take(1))
        await asyncio.sleep(0.05)
        assert admission.num_waiting == 1 and not queued.done()
        admission.closed.set()
        with pytest.raises(APIError) as refused:
            await asyncio.wait_for(queued, 5)
        running.give_back()
        return refused.value, admission.num_waiting, admission.num_in_flight

    refused, num_waiting, num_in_flight = asyncio.run(scenario())
    assert refused.status == 503 and refused.code == "server_shutting_down"
    assert (num_waiting, num_in_flight) == (0, 0)  # the refused one never took a slot


def _count_requests(shared_dir: str, counts, index: int, num: int) -> None:
    from pipeline.openai_api.metrics import FrontendMetrics

    admission = Admission(10, 0, counts, index)
    metrics = FrontendMetrics(admission, "", shared_dir)
    for _ in range(num):
        metrics.requests.labels("completions", "200").inc()
    metrics.completion_tokens.inc(10 * num)
    metrics.ttft.observe(0.2)
    admission.take_now(num)


def _exposition(shared_dir: str, counts, queue) -> None:
    from pipeline.openai_api.metrics import FrontendMetrics

    metrics = FrontendMetrics(Admission(10, 0, counts, 0), "", shared_dir)
    queue.put(metrics.exposition().decode())


def test_metrics_are_summed_over_the_processes(tmp_path):
    from pipeline.client.metrics import metric_value, parse_metrics

    shared_dir, counts = str(tmp_path), Admission.shared_counts(SPAWN, 2)
    workers = [
        SPAWN.Process(target=_count_requests, args=(shared_dir, counts, index, num))
        for index, num in enumerate((2, 3))
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0

    def exposed() -> dict:
        queue = SPAWN.Queue()
        reader = SPAWN.Process(target=_exposition, args=(shared_dir, counts, queue))
        reader.start()
        text = queue.get(timeout=60)
        reader.join(60)
        return parse_metrics(text)

    samples = exposed()
    requests = "pipeline_openai_requests_total"
    assert metric_value(samples, requests, endpoint="completions", status="200") == 5
    assert metric_value(samples, "pipeline_openai_completion_tokens_total") == 50
    assert metric_value(samples, "pipeline_openai_time_to_first_token_seconds_count") == 2
    # the gauge counts live processes only: a dead worker's slots are given back (workers.py)
    assert metric_value(samples, "pipeline_openai_engine_requests_in_flight") == 5
    Admission.forget_worker(counts, 0)
    assert metric_value(exposed(), "pipeline_openai_engine_requests_in_flight") == 3
    assert metric_value(samples, "pipeline_openai_requests_waiting") == 0


@pytest.mark.parametrize(
    ("workers", "cores", "expected"),
    [(0, 2, 1), (0, 8, 2), (0, 16, 4), (0, 64, 4), (3, 2, 3)],
)
def test_workers_zero_is_a_quarter_of_the_cores_from_one_to_four(
    monkeypatch, workers, cores, expected
):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    spec = dataclasses.replace(OpenAISpec(), workers=workers)
    recipe = FrontendRecipe(spec, "m", "t", None, "torch", True, True, "g", "u", "")
    assert recipe.num_workers == expected


@pytest.mark.parametrize(("asked", "expected"), [(0, 4 * 48), (100, 100)])
def test_max_concurrent_requests_zero_is_four_requests_a_slot_of_the_engines_batch(
    tmp_path, asked, expected
):
    build = {"max_batch_size": 48, "plugin_config": {"tokens_per_block": 32}}
    (tmp_path / "config.json").write_text(
        json.dumps({"build_config": build, "pretrained_config": {}})
    )
    spec = dataclasses.replace(OpenAISpec(), max_concurrent_requests=asked)
    assert admitted_requests(spec, tmp_path) == expected
