"""The end of a server's drain, from the process that stops it to the python models inside it.

Triton's SIGTERM stops it taking new requests and waits for those in flight, but a python model
hears nothing of it until it is unloaded, which happens only after its requests are done. The
process that stops the server therefore writes a file (its path in the server's environment, so
every stub and the engine process inherit it) once the drain time is over; each instance of the
model polls for it and ends its requests still running with the file's text as their error.
"""

import os
from pathlib import Path

DRAIN_FILE_ENV = "PIPELINE_DRAIN_FILE"
SHUTTING_DOWN = "the server is shutting down"  # every such error starts with it


def end_drain(path: Path, message: str) -> None:
    """Tell the models in the server whose environment names path: fail what runs, with
    message (made to start with SHUTTING_DOWN)."""
    if not message.startswith(SHUTTING_DOWN):
        message = f"{SHUTTING_DOWN}: {message}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(message)
    os.replace(tmp, path)  # a reader sees the whole message or no file


class DrainWatch:
    """In a model: the drain's end, when the server was told (None before, and always None in a
    server started without DRAIN_FILE_ENV)."""

    def __init__(self, path: str | None = None):
        path = os.environ.get(DRAIN_FILE_ENV) if path is None else path
        self.path = Path(path) if path else None
        self.message: str | None = None

    def ended(self) -> str | None:
        if self.message is None and self.path is not None and self.path.exists():
            self.message = self.path.read_text() or SHUTTING_DOWN
        return self.message
