"""A served model's graceful stop: no new requests, those in flight finish or time out.

The OpenAI frontend answers new generation requests 503 and the server's tensorrt_llm model
refuses new ones with an error (TritonServer.begin_stop tells it, then sends SIGTERM), while the
requests in flight go on. The drain is over when the frontend has none left and tritonserver has
exited by itself (it exits once its own are done), or when the drain time runs out: then the
model ends each request still running with an error (TritonServer.end_drain), which reaches a
gRPC client as the stream's last response and an OpenAI client as an SSE error event and [DONE]
(a 503 when its answer had not begun).
"""

import logging
import time
from typing import Protocol

from pipeline.request.errors import SHUTTING_DOWN
from pipeline.server.triton_server import TritonServer

log = logging.getLogger(__name__)
POLL_S = 0.1
# after the drain time: for the frontend to write the ended requests' errors to their clients
ENDING_TIMEOUT_S = 10.0


class Frontend(Protocol):
    def stop_admitting(self) -> None: ...

    @property
    def num_in_flight(self) -> int: ...


def begin(server: TritonServer, frontend: Frontend | None) -> None:
    """From now on new requests are refused; those in flight go on."""
    if frontend is not None:
        frontend.stop_admitting()
    server.begin_stop()


def finish(server: TritonServer, frontend: Frontend | None, timeout_s: float) -> int:
    """After begin: wait up to timeout_s for the requests in flight, then end the rest. The
    frontend's requests the drain time ended (0: all finished in time)."""
    deadline = time.monotonic() + timeout_s

    def frontend_busy() -> int:
        return 0 if frontend is None else frontend.num_in_flight

    try:
        while time.monotonic() < deadline:
            if server.process.poll() is not None and not frontend_busy():
                return 0
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # a second Ctrl-C or SIGTERM: end them now
        server.end_drain(f"{SHUTTING_DOWN}: it was stopped before this request finished")
        raise
    num_ended = frontend_busy()
    server.end_drain(
        f"{SHUTTING_DOWN}: this request was still running when its drain time "
        f"(serve.drain_timeout_s={timeout_s:g} s) ran out; send it again"
    )
    ending_deadline = time.monotonic() + ENDING_TIMEOUT_S
    while frontend_busy() and time.monotonic() < ending_deadline:
        time.sleep(POLL_S)
    if frontend_busy():
        log.warning(
            "serve: %d OpenAI requests still in flight %.0f s after the drain time; their "
            "connections are closed",
            frontend_busy(),
            ENDING_TIMEOUT_S,
        )
    return num_ended
