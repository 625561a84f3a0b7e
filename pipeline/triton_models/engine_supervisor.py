"""The engine behind a served model, started again when it fails, until it fails too often.

A request the engine fails (its values, its launch) ends with an error and nothing else changes:
the engine isolates it (LLMEngine). An engine that cannot go on (EngineFailure, its process gone)
reaches the service's outbox as an exception: the service fails every request in flight with it
at once and calls failed(). From then until a new engine is up, is_ready is False and submit()
refuses with the cause; the new engine is started after each of RESTART_DELAYS_S.

Given up (is_given_up): every try to start it failed, a start failed its probe (the engine's
weights are not the build's: another try loads the same file), or it failed
max_restarts times within restart_window_s (a crash loop: an engine that starts and then fails
on the requests it is sent). It is not started again: is_ready stays False (the model's
pipeline_engine_ready gauge 0, so `pipeline.client ready` and the OpenAI frontend's /health say
not ready) and every request is refused with the last failure's cause, until an operator
restarts the server. Triton 2.51's python backend cannot mark its model not ready, so Triton's
own /v2/health/ready stays 200: the gauge is the signal.
"""

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.engine.core.engine_process import EngineProcess
from pipeline.errors import ArtifactError
from pipeline.request import SamplingParams

if TYPE_CHECKING:
    from pipeline.engine import AsyncLLMEngine
from pipeline.request.errors import ENGINE_UNAVAILABLE

log = logging.getLogger(__name__)
RESTART_DELAYS_S = (0.0, 2.0, 10.0)  # before each try to start a failed engine again
# the words every refusal of a down engine starts with: the OpenAI frontend answers them 503


class EngineSupervisor:
    def __init__(
        self,
        start: Callable[[], "AsyncLLMEngine | EngineProcess"],
        max_restarts: int = 3,
        restart_window_s: float = 600.0,
    ):
        """start: makes a running engine whose outbox is the service's (raises if it can't).
        max_restarts within restart_window_s: more failures than that give up (0: the first
        failure does)."""
        self._start = start
        self.max_restarts, self.restart_window_s = max_restarts, restart_window_s
        self.engine = start()
        self.num_restarts = 0
        self.failure: BaseException | None = None  # while the engine is down: why
        self.is_given_up = False
        self._failed_at: list[float] = []  # monotonic times of the failures in the window

    @property
    def is_ready(self) -> bool:
        return self.failure is None

    @property
    def owns_engine(self) -> bool:
        """False when the engine is another service's (a shared engine process)."""
        return getattr(self.engine, "is_spawner", True)

    def submit(self, prompt_token_ids: list[int], params: SamplingParams, request_id: str) -> None:
        if self.failure is not None:
            raise RuntimeError(self._refusal())
        self.engine.submit(prompt_token_ids, params, request_id)

    def _refusal(self) -> str:
        if self.is_given_up:
            return (
                f"{ENGINE_UNAVAILABLE}: it failed and is not started again ({self.failure}); "
                f"restart the server once the cause is fixed"
            )
        return (
            f"{ENGINE_UNAVAILABLE}: it failed ({self.failure!r}) and is starting again; "
            f"retry shortly"
        )

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
        """The engine cannot go on (every request in flight has been told): start another,
        unless it has failed too often."""
        if self.failure is not None:  # the same failure, told twice (its error, then its exit)
            return
        now = time.monotonic()
        self._failed_at = [t for t in self._failed_at if now - t < self.restart_window_s] + [now]
        self.failure = cause
        if len(self._failed_at) > self.max_restarts:
            self._give_up(
                f"it failed {len(self._failed_at)} time(s) within {self.restart_window_s:.0f} "
                f"s (deploy.torch.max_engine_restarts={self.max_restarts}), the last: {cause!r}"
            )
            threading.Thread(target=self._shutdown_quietly, daemon=True).start()
            return
        log.error("engine failed: %r; starting it again", cause)
        threading.Thread(target=self._restart, name="llm-engine-restart", daemon=True).start()

    def _give_up(self, why: str) -> None:
        self.failure = RuntimeError(why)
        self.is_given_up = True
        log.error(
            "engine: not started again (%s); it stays down and refuses requests until the "
            "server is restarted",
            why,
        )

    def _shutdown_quietly(self) -> None:
        try:
            self.engine.shutdown()
        except Exception:  # noqa: BLE001 - it is gone already
            log.debug("shutting the failed engine down", exc_info=True)

    def _restart(self) -> None:
        cause = self.failure
        self._shutdown_quietly()
        for attempt, delay_s in enumerate(RESTART_DELAYS_S, 1):
            time.sleep(delay_s)
            try:
                self.engine = self._start()
            except ArtifactError as exc:  # the files are bad: another try loads them again
                self._give_up(str(exc))
                return
            except Exception:  # noqa: BLE001 - logged; the next try may work
                log.exception("engine restart %d of %d failed", attempt, len(RESTART_DELAYS_S))
                continue
            self.num_restarts += 1
            self.failure = None
            log.warning("engine started again (restart %d) after: %r", self.num_restarts, cause)
            return
        self._give_up(f"{len(RESTART_DELAYS_S)} tries to start it again failed after {cause!r}")
