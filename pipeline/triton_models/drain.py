"""A server's drain, from the process that stops it to the python models inside it.

Triton 2.51 on SIGTERM refuses new requests and waits for those in flight before it unloads the
models, but it may still take a request sent right after the signal, and it does not count a
decoupled python model's requests as in flight once its execute() has returned (only the
ensemble's and the BLS's), so it unloads the model at once while the OpenAI frontend's streams to
it still run. So the process
that stops the server tells the model itself, through a file whose path is in the server's
environment (DRAIN_FILE_ENV; every stub inherits it): when the drain begins (the model refuses
new requests from then on) and when its time is over (the model ends the requests still running
with the file's message as their error). The model polls the file; its finalize waits for its own
requests, up to the drain time (DRAIN_TIMEOUT_ENV) in case no one ends the drain.
"""

import json
import os
import time
from pathlib import Path

from pipeline.request.errors import SHUTTING_DOWN

DRAIN_FILE_ENV = "PIPELINE_DRAIN_FILE"
DRAIN_TIMEOUT_ENV = "PIPELINE_DRAIN_TIMEOUT_S"
REFUSAL = f"{SHUTTING_DOWN} and takes no new requests; send it to another replica or retry later"
POLL_S = 0.05


def write_drain(path: Path, end_message: str | None = None) -> None:
    """The drain has begun (end_message None) or is over: the models refuse new requests, and
    (end_message) end those still running with it (made to start with SHUTTING_DOWN)."""
    if end_message is not None and not end_message.startswith(SHUTTING_DOWN):
        end_message = f"{SHUTTING_DOWN}: {end_message}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"end": end_message}))
    os.replace(tmp, path)  # a reader sees all of it or the previous one


class DrainWatch:
    """In a model: the drain as the server was last told (poll)."""

    def __init__(self, path: str | None = None, timeout_s: float | None = None):
        path = os.environ.get(DRAIN_FILE_ENV) if path is None else path
        self.path = Path(path) if path else None
        if timeout_s is None:
            timeout_s = float(os.environ.get(DRAIN_TIMEOUT_ENV) or 0)
        self.timeout_s = timeout_s
        self.is_draining = False  # new requests are refused (REFUSAL)
        self.message: str | None = None  # the drain is over: the error of those still running

    def poll(self) -> str | None:
        """Read the file (until the drain is over); the end message once it is."""
        if self.message is None and self.path is not None:
            try:
                text = self.path.read_text()
            except FileNotFoundError:
                return None
            self.is_draining = True
            self.message = json.loads(text)["end"]
        return self.message

    def wait(self, is_busy) -> str | None:
        """At unload: until is_busy() is False, the drain ends, or (no one ends it: the server
        was stopped by another hand) timeout_s passes; the message to end the rest with."""
        deadline = time.monotonic() + self.timeout_s
        while is_busy() and self.poll() is None:
            if time.monotonic() >= deadline:
                return (
                    f"{SHUTTING_DOWN}: this request was still running when its drain time "
                    f"({self.timeout_s:g} s) ran out; send it again"
                )
            time.sleep(POLL_S)
        return self.message
