"""Thread-safe front of LLMEngine: submit from any thread, stream deltas back per request.

One background thread owns the LLMEngine: it takes new requests and cancels from an inbox,
runs step() while work exists, and routes each StreamDelta to its request's handle, or, with an
outbox, puts each step's deltas there as one list. A server with many streams wants the outbox:
one consumer thread wakes once per step, where a thread per request wakes per token and every
wake-up competes with the engine thread for the GIL: at high concurrency a thread per request
roughly halved the engine's tokens/s (docs/design.md, "The response path").
"""

import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Protocol

from pipeline.engine.core.llm_engine import LLMEngine
from pipeline.request.outputs import StreamDelta
from pipeline.request.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class Outbox(Protocol):
    """Where each step's deltas go as one list (or the engine's failure): a queue that a
    consumer thread drains, or a router that sends them on at once on the engine thread."""

    def put(self, item: list[StreamDelta] | BaseException) -> None: ...


class RequestHandle:
    """Iterate to receive a request's StreamDeltas (blocking) until the finished one."""

    def __init__(self, request_id: str, owner: "AsyncLLMEngine"):
        self.request_id = request_id
        self._owner = owner
        self._deltas: queue.Queue[StreamDelta | BaseException] = queue.Queue()

    def _put(self, item: StreamDelta | BaseException) -> None:
        self._deltas.put(item)

    def __iter__(self) -> Iterator[StreamDelta]:
        while True:
            item = self._deltas.get()
            if isinstance(item, BaseException):
                raise RuntimeError(f"engine failed while serving {self.request_id}") from item
            if item.finish_reason == "error":
                raise RuntimeError(f"request {self.request_id} failed: {item.error}")
            yield item
            if item.finished:
                return

    def cancel(self) -> None:
        self._owner.cancel(self.request_id)


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine, outbox: Outbox | None = None):
        """outbox: gets list[StreamDelta] per step (and the exception if the engine fails)
        instead of the handles, which then only name and cancel their requests."""
        self.engine = engine  # touched only by the background thread after this point
        self._outbox = outbox
        self._lock = threading.Condition()
        # (prompt, params, handle, perf_counter() at submit: the request's arrival)
        self._inbox: list[tuple[list[int], SamplingParams, RequestHandle, float]] = []
        self._cancels: list[str] = []
        self._handles: dict[str, RequestHandle] = {}
        self._is_shutdown = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)
        self._thread.start()

    def submit(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> RequestHandle:
        """Queue a request; raises ValueError at once if the engine can never serve it."""
        prompt_token_ids = list(prompt_token_ids)
        self.engine.validate_request(prompt_token_ids, params)
        handle = RequestHandle(uuid.uuid4().hex if request_id is None else request_id, self)
        with self._lock:
            if self._is_shutdown or self._error is not None:
                raise RuntimeError(
                    "AsyncLLMEngine is shut down"
                    if self._error is None
                    else f"AsyncLLMEngine failed: {self._error!r}"
                )
            if handle.request_id in self._handles:
                raise ValueError(f"request: id {handle.request_id!r} is already in flight")
            self._handles[handle.request_id] = handle
            self._inbox.append((prompt_token_ids, params, handle, time.perf_counter()))
            self._lock.notify()
        return handle

    def cancel(self, request_id: str) -> None:
        with self._lock:
            self._cancels.append(request_id)
            self._lock.notify()

    def stats(self) -> dict:
        """The engine's counters (read from another thread: plain ints, a racy read is harmless)."""
        return self.engine.stats()

    def shutdown(self) -> None:
        """Stop the thread; unfinished requests end with finish_reason "cancelled", and the
        engine is left with no work."""
        with self._lock:
            self._is_shutdown = True
            self._lock.notify()
        self._thread.join()

    def _wait_for_work(self) -> bool:
        """Until there is work; False when the loop should exit."""
        with self._lock:
            while not (
                self._inbox or self._cancels or self._is_shutdown or self.engine.has_unfinished()
            ):
                self._lock.wait()
            return not self._is_shutdown

    def _admit(self) -> None:
        """Move queued requests and cancels into the engine (step() calls it just before it
        schedules)."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
            cancels, self._cancels = self._cancels, []
        refused = []
        for prompt_token_ids, params, handle, arrival_time_s in inbox:
            try:
                self.engine.add_request(prompt_token_ids, params, handle.request_id, arrival_time_s)
            except Exception as exc:  # noqa: BLE001 - it fails this request, not the engine
                error = f"{type(exc).__name__}: {exc}"
                refused.append(StreamDelta(handle.request_id, [], True, "error", error))
        if refused:
            self._route(refused)
        for request_id in cancels:
            self.engine.abort(request_id)

    def _route(self, deltas: list[StreamDelta]) -> None:
        routed = []
        with self._lock:
            for delta in deltas:
                handle = self._handles.get(delta.request_id)
                if handle is None:
                    continue
                routed.append(delta)
                if self._outbox is None:
                    handle._put(delta)
                if delta.finished:
                    del self._handles[delta.request_id]
        if self._outbox is not None and routed:
            self._outbox.put(routed)

    def _loop(self) -> None:
        """Until shutdown; a request's failure ends only that request (LLMEngine isolates it),
        any other exception ends the engine for all (EngineFailure, or a bug)."""
        try:
            while self._wait_for_work():
                self._route(self.engine.step(admit=self._admit))
        except BaseException as exc:  # noqa: BLE001 - every waiting caller must hear about it
            logger.exception("engine thread failed")
            with self._lock:
                self._error = exc
                handles, self._handles = self._handles, {}
            if self._outbox is not None:
                self._outbox.put(exc)
            else:
                for handle in handles.values():
                    handle._put(exc)
            return
        with self._lock:
            handles = dict(self._handles)
        for request_id in handles:
            self.engine.abort(request_id)  # frees its blocks; False if it was still queued here
        self._route([StreamDelta(request_id, [], True, "cancelled") for request_id in handles])
        while self.engine.has_unfinished():  # a launch in flight (overlap), the aborts' deltas
            self.engine.step()  # the engine is left empty: reusable by whoever comes next
