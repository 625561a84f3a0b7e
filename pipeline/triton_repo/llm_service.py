"""The torch engine behind the `tensorrt_llm` python model: requests in, output chunks out.

Triton glue (tensors, response senders, metrics) stays in python_models/torch_llm.py; this part
runs without Triton. Every Triton request becomes one AsyncLLMEngine submission, so concurrent
requests share engine steps (in-flight batching). One responder thread takes each step's deltas
from the engine's outbox and hands every request its chunk through `respond`: a thread per
request would wake once per token and fight the engine thread for the GIL.

Coalescing: Triton's python backend passes on a few thousand responses a second (measured on an
H100 host: ~2.5k/s through the ensemble), fewer than the engine makes tokens at high
concurrency. When steps queue up behind the responder, it merges them, so a stream gets all its
new tokens in one response: throughput follows the engine instead of the response rate.

engine_process: the engine runs in a child process (pipeline.engine.engine_process), so the
responder's work no longer holds the GIL that the engine's host work needs between steps.
"""

import logging
import queue
import shutil
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.engine import AsyncLLMEngine, LLMEngine, StreamDelta
from pipeline.engine.engine_process import EngineProcess
from pipeline.triton_repo.llm_request import LLMRequest, from_arrays

log = logging.getLogger(__name__)
_STOP = object()


@dataclass(frozen=True, slots=True)
class OutputChunk:
    token_ids: np.ndarray  # [n] int32: new tokens when streaming, else the whole output
    is_final: bool


# respond(context, chunk or the engine's failure) -> False when the caller is gone (cancelled)
Respond = Callable[[Any, OutputChunk | BaseException], bool]


@dataclass(slots=True)
class _Live:
    """One request in flight: who to answer, and (not streaming) the tokens so far."""

    request: LLMRequest
    context: Any
    tokens: list[int] = field(default_factory=list)

    def chunk(self, delta: StreamDelta) -> OutputChunk | None:
        if self.request.is_streaming:  # TensorRT-LLM streams new tokens only, prompt or not
            return OutputChunk(np.asarray(delta.token_ids, np.int32), delta.finished)
        self.tokens.extend(delta.token_ids)
        if not delta.finished:
            return None
        prompt = [] if self.request.is_input_excluded else self.request.prompt_token_ids
        return OutputChunk(np.asarray([*prompt, *self.tokens], np.int32), True)


def merged(deltas: Iterable[StreamDelta]) -> list[StreamDelta]:
    """One delta per request, tokens in order, ending as its last delta ends."""
    out: dict[str, StreamDelta] = {}
    for d in deltas:
        if (so_far := out.get(d.request_id)) is not None:
            tokens = so_far.token_ids + d.token_ids
            d = StreamDelta(d.request_id, tokens, d.finished, d.finish_reason)
        out[d.request_id] = d
    return list(out.values())


class LLMService:
    def __init__(
        self,
        engine_dir: Path,
        device: str,
        scheduler_policy: str,
        num_kv_blocks: int,
        enable_chunked_prefill: bool,
        exclude_input_in_output: bool,
        coalesce_stream: bool,
        engine_process: bool,
        respond: Respond,
    ):
        runtime = {
            "scheduler_policy": scheduler_policy,
            "enable_chunked_prefill": enable_chunked_prefill,
            "num_kv_blocks": num_kv_blocks or None,
        }
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        if engine_process:
            # the python stub's sys.executable is the stub binary; python3 on its PATH is the
            # interpreter it embeds (pipeline.server.stub_python)
            python = shutil.which("python3") or sys.executable
            self.async_engine = EngineProcess(engine_dir, device, runtime, self._outbox, python)
        else:
            engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
            self.async_engine = AsyncLLMEngine(engine, outbox=self._outbox)
        self.exclude_input_in_output = exclude_input_in_output
        self.coalesce_stream = coalesce_stream
        self._respond = respond
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._responder = threading.Thread(target=self._run, name="llm-responder", daemon=True)
        self._responder.start()

    def generate(self, arrays: dict[str, np.ndarray], context: Any) -> None:
        """Submit now; its chunks go to respond(context, ...). ValueError for inputs the engine
        can never serve (limits, bad values), RuntimeError once the engine is gone."""
        request = from_arrays(arrays, self.exclude_input_in_output)
        request_id = uuid.uuid4().hex
        with self._lock:  # known before the engine can answer it
            self._live[request_id] = _Live(request, context)
        try:
            self.async_engine.submit(request.prompt_token_ids, request.params, request_id)
        except BaseException:
            with self._lock:
                del self._live[request_id]
            raise

    def _run(self) -> None:
        later = None  # an item taken while coalescing that must wait its turn
        while True:
            item = later if later is not None else self._outbox.get()
            later = None
            if item is _STOP:
                return
            if isinstance(item, BaseException):
                with self._lock:
                    lives, self._live = list(self._live.values()), {}
                for live in lives:
                    self._answer(None, live, item)
                continue
            if self.coalesce_stream:
                item, later = self._queued_behind(item)
            for delta in item:
                with self._lock:
                    live = self._live.get(delta.request_id)
                    if live is not None and delta.finished:
                        del self._live[delta.request_id]
                if live is not None and (chunk := live.chunk(delta)) is not None:
                    self._answer(delta.request_id, live, chunk)

    def _queued_behind(self, deltas: list[StreamDelta]) -> tuple[list[StreamDelta], object]:
        """deltas merged with every step queued behind them; and a non-step item met on the way."""
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                return merged(deltas), None
            if not isinstance(item, list):
                return merged(deltas), item
            deltas = deltas + item

    def _answer(self, request_id: str | None, live: _Live, out) -> None:
        try:
            wanted = self._respond(live.context, out)
        except Exception:  # one caller's failure must not stop the others' answers
            log.exception("responding to request %s failed; cancelling it", request_id)
            wanted = False
        if not wanted and isinstance(out, OutputChunk) and not out.is_final:
            with self._lock:
                self._live.pop(request_id, None)
            self.async_engine.cancel(request_id)

    def stats(self) -> dict:
        return self.async_engine.stats()

    def shutdown(self) -> None:
        """Unfinished requests get a final (cancelled) chunk, then the responder stops."""
        self.async_engine.shutdown()
        self._outbox.put(_STOP)
        self._responder.join()
