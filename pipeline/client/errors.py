"""Client-side failures: the server's own message, the request, and what to check."""

import time

from pipeline.errors import PipelineError


class ClientError(PipelineError):
    """The server refused or failed the request (also when HTTP said 200), or is unreachable."""


class ClientTimeout(ClientError):
    """No response (or no next streamed response) within the client's timeout."""


def wait_until_ready(is_ready, model: str, url: str, timeout_s: float) -> None:
    """Poll `is_ready()` until it holds; ClientTimeout after timeout_s (both protocols use it)."""
    deadline = time.monotonic() + timeout_s
    while not is_ready():
        if time.monotonic() > deadline:
            raise ClientTimeout(
                f"client: {model} at {url} not ready after {timeout_s:.0f} s; "
                f"is the server up (`make serve`)?"
            )
        time.sleep(0.5)
