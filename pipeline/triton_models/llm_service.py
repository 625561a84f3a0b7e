"""The torch engine behind the `tensorrt_llm` python model: requests in, output chunks out.

Triton glue (tensors, response senders, metrics) stays in python_models/torch_llm.py; this part
runs without Triton. Every Triton request becomes one AsyncLLMEngine submission, so concurrent
requests share engine steps (in-flight batching). One responder thread takes each step's deltas
from the engine's outbox and makes each request's chunks, which a few lane threads hand on through
`respond`: a thread per request would wake once per token and fight for the GIL.

Text: a request that wants text_output gets each chunk's text from the responder thread
(detokenizer.TextStream, in the stub's process, not the engine's), so the torch backend's
ensemble needs no postprocessing execution per streamed response.

Coalescing: Triton passes on a few thousand streamed responses a second through the upstream
ensemble (each response is one execution of the postprocessing model), fewer than the engine
makes tokens at high concurrency. Each stream keeps its unsent tokens; the responder sends them
when the stream is due, so a response carries every token made since the stream's last one.
- coalesce_stream: the steps that queued while the responder was busy go out merged.
- max_response_rate: a stream is due again len(streams) / rate seconds after its last response,
  so all streams together stay within the rate; its first tokens and its end go out at once.
  Without it the responder never falls behind while Triton queues a response per token, and
  the served rate collapses (docs/design.md, "The response path").

engine_process: the engine runs in a child process (pipeline.engine.core.engine_process), so the
responder's work no longer holds the GIL that the engine's host work needs between steps.

Failures: a request the engine fails gets an error response; an engine that cannot go on fails
every request in flight at once and is started again (engine_supervisor.EngineSupervisor).

response_lanes: a python-backend send is a round trip to the server process (the stub waits until
the server has taken the response, without the GIL meanwhile), so one thread sending every
stream's responses waits out each round trip in turn. Each stream is pinned to one of N lane
threads, whose sends overlap in the server's thread pool; a stream keeps its order, and its
tokens that arrive while its last response is still in its lane wait and go out merged.
A lane sends a stream's final response before others' intermediate ones, and first responses
next: a closed-loop client's next request waits for the final one (each ms it waits is a batch
slot left empty), and TTFT for the first; a stream's later tokens only wait and merge. A stream
has one response in its lane at a time when coalescing, so no stream's own order changes.
"""

import itertools
import logging
import queue
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.engine.core.engine_process import EngineProcess
from pipeline.engine_json import EngineJson
from pipeline.triton_models.detokenizer import Detokenizer
from pipeline.triton_models.engine_supervisor import EngineSupervisor
from pipeline.triton_models.hop_log import HopLog
from pipeline.triton_models.live_request import LiveRequest, OutputChunk
from pipeline.triton_models.llm_request import TextEncoder, from_arrays

if TYPE_CHECKING:
    from pipeline.engine import AsyncLLMEngine

log = logging.getLogger(__name__)
_STOP = object()
_WAKE = object()  # a lane sent a stream's response while more of its tokens waited
# a lane's order: ranks, then the order put in (_IN_TURN only without coalescing)
_FINAL, _FIRST, _IN_TURN, _LAST = range(4)


class _EndAll:
    def __init__(self, message: str):
        self.message = message


# respond(context, chunk or the engine's failure) -> False when the caller is gone (cancelled)
Respond = Callable[[Any, OutputChunk | BaseException], bool]


def engine_block_size(engine_dir: Path) -> int:
    """The engine's tokens a KV block (its build's tokens_per_block)."""
    return int(EngineJson.read(engine_dir).build["plugin_config"]["tokens_per_block"])


class LLMService:
    def __init__(
        self,
        engine_dir: Path,
        device: str,
        runtime: dict,
        exclude_input_in_output: bool,
        coalesce_stream: bool,
        max_response_rate: float,
        engine_process: bool,
        respond: Respond,
        tokenizer_dir: Path | None = None,
        skip_special_tokens: bool = True,
        response_lanes: int = 1,
        add_special_tokens: bool = True,
        share_engine: str | None = None,
        max_restarts: int = 3,
        restart_window_s: float = 600.0,
        num_threads: int = 0,
    ):
        """runtime: the engine's runtime options (engine_config.RuntimeOptions). share_engine
        (with engine_process): services with the same key share one engine process.
        max_restarts, restart_window_s: a failed engine is started again at most max_restarts
        times within restart_window_s, then stays down (engine_supervisor.EngineSupervisor).
        num_threads: the engine's torch threads, wherever it runs (0: torch's default)."""
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()

        def start_engine() -> "AsyncLLMEngine | EngineProcess":
            if engine_process:
                # the python stub's sys.executable is the stub binary; python3 on its PATH is
                # the interpreter it embeds (pipeline.server.stub_python)
                python = shutil.which("python3") or sys.executable
                return EngineProcess(
                    engine_dir,
                    device,
                    runtime,
                    self._outbox,
                    python,
                    share_key=share_engine,
                    num_threads=num_threads,
                )
            # in this process: the engine's modules (torch) load only here
            from pipeline.engine import AsyncLLMEngine, LLMEngine
            from pipeline.engine.core.engine_probe import check_probe

            if num_threads:
                import torch

                torch.set_num_threads(num_threads)
            loaded = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
            check_probe(loaded, engine_dir)  # before it is ready: its weights are the build's
            return AsyncLLMEngine(loaded, outbox=self._outbox)

        self.async_engine = EngineSupervisor(start_engine, max_restarts, restart_window_s)
        self._block_size = engine_block_size(Path(engine_dir))
        self.exclude_input_in_output = exclude_input_in_output
        self.lora_dir = runtime.get("lora_dir")  # lora_task_id -> the adapter of that name
        self.detokenizer = (
            None if tokenizer_dir is None else Detokenizer(tokenizer_dir, skip_special_tokens)
        )
        self.encoder = (
            None
            if self.detokenizer is None
            else TextEncoder(self.detokenizer.tokenizer, add_special_tokens)
        )
        self.coalesce_stream = coalesce_stream
        pace = coalesce_stream and max_response_rate > 0
        self._response_gap_s = 1.0 / max_response_rate if pace else 0.0
        self._respond = respond
        self._live: dict[str, LiveRequest] = {}
        self._lock = threading.Lock()
        self._lanes = [queue.PriorityQueue() for _ in range(max(1, response_lanes))]
        self._lane_order = itertools.count()  # ties in a lane go in the order put
        self._lane_threads = [
            threading.Thread(target=self._lane, args=(lane,), name=f"llm-lane-{i}", daemon=True)
            for i, lane in enumerate(self._lanes)
        ]
        for thread in self._lane_threads:
            thread.start()
        self._num_requests = 0  # pins each request to a lane, round robin
        # engine request ids: unique beside the other instances sharing the engine, and short:
        # an id crosses the engine's socket with every token (a uuid4 each: 32 characters, and
        # os.urandom's system call per request)
        self._id_prefix = uuid.uuid4().hex[:12] + "-"
        self._num_ids = itertools.count()
        self._hop_log = HopLog()
        self._responder = threading.Thread(target=self._run, name="llm-responder", daemon=True)
        self._responder.start()

    def generate(
        self,
        arrays: dict[str, np.ndarray],
        context: Any,
        wants_text: bool = False,
        received_at: float | None = None,
    ) -> None:
        """Submit now; its chunks go to respond(context, ...), with their text if wants_text.
        ValueError for inputs the engine can never serve (limits, bad values), RuntimeError once
        the engine is gone. received_at: perf_counter() when the caller took the request (the
        submit hop's start; default now)."""
        received_at = time.perf_counter() if received_at is None else received_at
        request = from_arrays(arrays, self.exclude_input_in_output, self.encoder, self.lora_dir)
        if wants_text and self.detokenizer is None:
            raise ValueError("text_output needs the model's tokenizer_dir parameter")
        submitted = []  # num_return_sequences: one engine request each, answered apart
        try:
            for index, params in enumerate(request.sequence_params()):
                text = self.detokenizer.stream() if wants_text else None
                request_id = f"{self._id_prefix}{next(self._num_ids):x}"
                with self._lock:  # known before the engine can answer it
                    lane = self._num_requests % len(self._lanes)
                    self._num_requests += 1
                    live = LiveRequest(replace(request, params=params), context, lane, text, index)
                    live.block_size = self._block_size
                    self._live[request_id] = live
                submitted.append(request_id)
                live.received_at, live.submitted_at = received_at, time.perf_counter()
                self.async_engine.submit(request.prompt_token_ids, params, request_id)
        except BaseException:
            with self._lock:
                for request_id in submitted:
                    self._live.pop(request_id, None)
            for request_id in submitted[:-1]:  # the last one failed to submit
                self.async_engine.cancel(request_id)
            raise

    def _run(self) -> None:
        unsent: dict[str, LiveRequest] = {}  # streams whose tokens wait for their turn
        while True:
            try:
                items = [self._outbox.get(timeout=self._until_due(unsent))]
            except queue.Empty:
                items = []
            while self.coalesce_stream:  # every step queued meanwhile goes out merged
                try:
                    items.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                if item is _STOP:
                    self._stop_lanes(unsent)
                    return
                if item is _WAKE:
                    continue
                if isinstance(item, _EndAll):  # the engine runs on: it drops them
                    for request_id in self._fail_all(RuntimeError(item.message), unsent):
                        self.async_engine.cancel(request_id)
                    continue
                if isinstance(item, BaseException):
                    self._fail_all(item, unsent)
                    self.async_engine.failed(item)
                    continue
                now = time.perf_counter()
                for delta in item:
                    with self._lock:
                        live = self._live.get(delta.request_id)
                        if live is not None and delta.finished:
                            del self._live[delta.request_id]
                    if live is not None:
                        live.take(delta, now)
                        if live.request.is_streaming or live.is_finished:
                            unsent[delta.request_id] = live
                if not self.coalesce_stream:
                    self._send_due(unsent)
            self._send_due(unsent)

    def _fail_all(self, error: BaseException, unsent: dict[str, LiveRequest]) -> list[str]:
        """Every request in flight ends with error, after what its stream has in its lane."""
        with self._lock:
            lives, self._live = list(self._live.items()), {}
        unsent.clear()
        for request_id, live in lives:
            self._to_lane(live, _IN_TURN, request_id, error)
        return [request_id for request_id, _ in lives]

    def _to_lane(self, live: LiveRequest, rank: int, request_id: str, out) -> None:
        self._lanes[live.lane].put((rank, next(self._lane_order), request_id, live, out))

    def _lane(self, inbox: queue.PriorityQueue) -> None:
        """Send one lane's responses by rank; wake the responder when a stream's tokens waited
        for this send to finish."""
        while (item := inbox.get())[-1] is not _STOP:
            _, _, request_id, live, out = item
            start = time.perf_counter()
            self._answer(request_id, live, out)
            now = time.perf_counter()
            self._hop_log.add_send(now - start)
            if live.request.is_streaming and live.first_token_at and not live.first_sent_at:
                live.first_sent_at = now
            if isinstance(out, OutputChunk) and out.is_final and live.first_sent_at:
                self._hop_log.add_stream(
                    (
                        live.submitted_at - live.received_at,
                        live.first_token_at - live.submitted_at,
                        live.first_sent_at - live.first_token_at,
                        live.final_at - live.submitted_at,
                        now - live.final_at,
                    )
                )
            live.is_sending = False
            is_more = isinstance(out, OutputChunk) and not out.is_final
            if is_more and (live.tokens or live.is_finished):
                self._outbox.put(_WAKE)

    def _stop_lanes(self, unsent: dict[str, LiveRequest]) -> None:
        """Let every lane finish, then send what still waited (the cancelled ends at shutdown)."""
        for lane, thread in zip(self._lanes, self._lane_threads, strict=True):
            lane.put((_LAST, next(self._lane_order), None, None, _STOP))
            thread.join()
        for request_id, live in unsent.items():
            if not live.is_gone:
                self._answer(request_id, live, live.chunk())

    def _gap_s(self) -> float:
        """Time between two responses of one stream that keeps all within max_response_rate."""
        return len(self._live) * self._response_gap_s

    def _until_due(self, unsent: dict[str, LiveRequest]) -> float | None:
        """Seconds until the first stream waiting in unsent is due; None: nothing waits (a
        stream whose last response is still in its lane waits for the lane's _WAKE)."""
        sent_at = [live.sent_at for live in unsent.values() if not live.is_sending]
        if not sent_at:
            return None
        return max(0.0, min(sent_at) + self._gap_s() - time.perf_counter())

    def _send_due(self, unsent: dict[str, LiveRequest]) -> None:
        now, gap_s = time.perf_counter(), self._gap_s()
        for request_id, live in list(unsent.items()):
            if live.is_gone:
                del unsent[request_id]
                continue
            if (self.coalesce_stream and live.is_sending) or not live.is_due(now, gap_s):
                continue
            del unsent[request_id]
            live.sent_at = now
            try:
                out = live.chunk() if live.error is None else RuntimeError(live.error)
            except Exception as exc:  # a failed decode ends this request only
                log.exception("detokenizing request %s failed", request_id)
                out = exc
                if not live.is_finished:
                    self._drop(request_id)
            live.is_sending = True
            if not self.coalesce_stream:  # the stream may have earlier responses in its lane
                rank = _IN_TURN
            elif isinstance(out, BaseException) or out.is_final:
                rank = _FINAL
            else:
                rank = _FIRST if not live.first_sent_at else _IN_TURN
            self._to_lane(live, rank, request_id, out)

    def _answer(self, request_id: str, live: LiveRequest, out) -> None:
        """In live's lane (or after the lanes stopped): send out; cancel a caller that is gone."""
        if live.is_gone:
            return
        try:
            wanted = self._respond(live.context, out)
        except Exception:  # one caller's failure must not stop the others' answers
            log.exception("responding to request %s failed; cancelling it", request_id)
            wanted = False
        if isinstance(out, BaseException) or out.is_final:
            live.is_gone = True
        elif not wanted:
            live.is_gone = True
            self._drop(request_id)

    def _drop(self, request_id: str) -> None:
        with self._lock:
            self._live.pop(request_id, None)
        self.async_engine.cancel(request_id)

    def stop(self, is_stopped: Callable[[Any], bool]) -> None:
        """End the engine requests whose context is_stopped now; each still answers its final
        response, with what it made (the tensorrtllm backend's `stop`)."""
        with self._lock:
            stopped = [rid for rid, live in self._live.items() if is_stopped(live.context)]
        for request_id in stopped:
            self.async_engine.cancel(request_id)

    @property
    def owns_engine(self) -> bool:
        return self.async_engine.owns_engine

    @property
    def is_ready(self) -> bool:
        return self.async_engine.is_ready

    @property
    def num_live(self) -> int:
        """Engine requests not finished yet."""
        return len(self._live)

    def stats(self) -> dict:
        return self.async_engine.stats()

    def hops(self, max_age_s: float = 0.0) -> dict[str, float]:
        """Where the last streams' time went inside this model, in ms (HOPS x HOP_STATS: the first
        two split TTFT, the next two the time to the end) and one send's duration: a
        closed-loop client's next request waits for the final response, so the time outside
        the engine between requests is lost batch occupancy. max_age_s: a summary computed
        less than this ago is returned as it is (the percentiles hold the GIL for a while)."""
        return self._hop_log.summary(max_age_s)

    def end_all(self, message: str) -> None:
        """Every request in flight now ends with an error response saying message, and leaves
        the engine (the server's drain is over)."""
        self._outbox.put(_EndAll(message))

    def shutdown(self) -> None:
        """Unfinished requests get a final (cancelled) chunk, then the responder stops."""
        self.async_engine.shutdown()
        self._outbox.put(_STOP)
        self._responder.join()
