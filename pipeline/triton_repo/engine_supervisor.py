"""The engine behind a served model, started again when it fails.

A request the engine fails (its values, its launch) ends with an error and nothing else changes:
the engine isolates it (LLMEngine). An engine that cannot go on (EngineFailure, its process gone)
reaches the service's outbox as an exception: the service fails every request in flight with it
at once and calls failed(). From then until a new engine is up, is_ready is False and submit()
refuses with the cause; the new engine is started after each of RESTART_DELAYS_S, and when every
try fails, on_unrecoverable gets the cause (the Triton model stops its server, so that the
server's health checks fail as well: Triton 2.51's python backend cannot mark a model not ready).
"""

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from pipeline.engine import AsyncLLMEngine
from pipeline.engine.engine_process import EngineProcess
from pipeline.request import SamplingParams

log = logging.getLogger(__name__)
RESTART_DELAYS_S = (0.0, 2.0, 10.0)  # before each try to start a failed engine again


class EngineSupervisor:
    def __init__(
        self,
        start: Callable[[], AsyncLLMEngine | EngineProcess],
        on_unrecoverable: Callable[[BaseException], None] | None = None,
    ):
        """start: makes a running engine whose outbox is the service's (raises if it can't)."""
        self._start = start
        self._on_unrecoverable = on_unrecoverable
        self.engine = start()
        self.num_restarts = 0
        self.failure: BaseException | None = None  # while the engine is down: why

    @property
    def is_ready(self) -> bool:
        return self.failure is None

    @property
    def owns_engine(self) -> bool:
        """False when the engine is another service's (a shared engine process)."""
        return getattr(self.engine, "is_spawner", True)

    def submit(self, prompt_token_ids: list[int], params: SamplingParams, request_id: str) -> None:
        if self.failure is not None:
            raise RuntimeError(
                f"the engine failed ({self.failure!r}) and is starting again; retry shortly"
            )
        self.engine.submit(prompt_token_ids, params, request_id)

    def cancel(self, request_id: str) -> None:
        if self.failure is None:  # a failed engine has ended every request already
            with contextlib.suppress(OSError):  # its process went away meanwhile
                self.engine.cancel(request_id)

    def stats(self) -> dict:
        return self.engine.stats() | {
            "is_ready": int(self.is_ready),
            "num_restarts": self.num_restarts,
        }

    def shutdown(self) -> None:
        self.engine.shutdown()

    def failed(self, cause: BaseException) -> None:
        """The engine cannot go on (every request in flight has been told): start another."""
        if self.failure is not None:  # the same failure, told twice (its error, then its exit)
            return
        self.failure = cause
        log.error("engine failed: %r; starting it again", cause)
        threading.Thread(target=self._restart, name="llm-engine-restart", daemon=True).start()

    def _restart(self) -> None:
        cause = self.failure
        try:
            self.engine.shutdown()
        except Exception:  # noqa: BLE001 - it is gone already; the new one matters
            log.debug("shutting the failed engine down", exc_info=True)
        for attempt, delay_s in enumerate(RESTART_DELAYS_S, 1):
            time.sleep(delay_s)
            try:
                self.engine = self._start()
            except Exception:  # noqa: BLE001 - logged; the next try may work
                log.exception("engine restart %d of %d failed", attempt, len(RESTART_DELAYS_S))
                continue
            self.num_restarts += 1
            self.failure = None
            log.warning("engine started again (restart %d) after: %r", self.num_restarts, cause)
            return
        log.error("engine could not be started again after: %r", cause)
        if self._on_unrecoverable is not None:
            self._on_unrecoverable(cause)
