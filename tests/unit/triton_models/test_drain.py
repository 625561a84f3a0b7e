"""The drain file between the process that stops a server and the models inside it, the frontend's
reading of its errors, and the port checks behind `serve: ready`."""

import socket

import pytest

from pipeline.openai_api.triton_llm import _model_error
from pipeline.request.errors import SHUTTING_DOWN
from pipeline.server.ports import accepts, free_ports, wait_accepting
from pipeline.triton_models.drain import REFUSAL, DrainWatch, write_drain


def test_a_model_sees_the_drain_begin_then_end(tmp_path):
    path = tmp_path / "drain.json"
    watch = DrainWatch(str(path), timeout_s=5)
    assert watch.poll() is None and not watch.is_draining  # no file: serving
    write_drain(path)
    assert watch.poll() is None and watch.is_draining  # begun: refuse new requests
    write_drain(path, "drain time over")
    assert watch.poll() == f"{SHUTTING_DOWN}: drain time over"
    assert not list(tmp_path.glob("*.tmp"))


def test_finalize_waits_for_the_drain_end_or_its_own_timeout(tmp_path):
    path = tmp_path / "drain.json"
    assert DrainWatch(str(path), timeout_s=60).wait(lambda: False) is None  # idle: no wait
    message = DrainWatch(str(path), timeout_s=0).wait(lambda: True)  # no one ends it
    assert message.startswith(SHUTTING_DOWN) and "(0 s) ran out" in message
    write_drain(path, f"{SHUTTING_DOWN}: ended by serve")
    assert DrainWatch(str(path), timeout_s=60).wait(lambda: True) == (
        f"{SHUTTING_DOWN}: ended by serve"
    )


def test_a_watch_without_a_file_never_drains(monkeypatch):
    monkeypatch.delenv("PIPELINE_DRAIN_FILE", raising=False)
    monkeypatch.delenv("PIPELINE_DRAIN_TIMEOUT_S", raising=False)
    watch = DrainWatch()
    assert watch.poll() is None and not watch.is_draining and watch.timeout_s == 0


@pytest.mark.parametrize("message", [REFUSAL, f"{SHUTTING_DOWN}: this request was still running"])
def test_the_frontend_answers_a_drain_error_with_503(message):
    error = _model_error(f"tensorrt_llm: {message}")
    assert error.status == 503 and not error.is_request_error


def test_wait_accepting_names_the_ports_that_refuse():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        (closed_port,) = free_ports(1)
        assert accepts("127.0.0.1", open_port) and not accepts("127.0.0.1", closed_port)
        refusing = wait_accepting("127.0.0.1", {"http": open_port, "grpc": closed_port}, 0.2)
        assert refusing == [f"grpc 127.0.0.1:{closed_port}"]
        assert wait_accepting("127.0.0.1", {"http": open_port}, 0.2) == []
