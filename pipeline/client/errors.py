"""Client-side failures: the server's own message, the request, and what to check."""

from pipeline.errors import PipelineError


class ClientError(PipelineError):
    """The server refused or failed the request (also when HTTP said 200), or is unreachable."""


class ClientTimeout(ClientError):
    """No response (or no next streamed response) within the client's timeout."""
