"""What the engine process and its clients say to each other (engine_hub.py, engine_process.py):
the message kinds and the errors that cross. Torch-free, so a client (a Triton stub) never
loads the engine's modules.

Messages to a client: (kind, payload, stats or None); CLOSED's payload is the number of clients
still connected (0: the engine process is exiting).
"""

from pipeline.errors import PipelineError

READY, DELTAS, STATS, ERROR, CLOSED = "ready", "deltas", "stats", "error", "closed"


def portable(exc: BaseException) -> BaseException:
    """An exception that surely unpickles in the parent (a CUDA error's class may not); the
    pipeline's own errors (a failed probe) go as they are, their message already says it all."""
    if isinstance(exc, PipelineError):
        return exc
    return RuntimeError(f"engine process: {exc!r}")
