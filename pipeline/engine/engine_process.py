"""AsyncLLMEngine in a process of its own, behind the same calls: submit, cancel, stats,
shutdown, and an outbox that gets each step's list of StreamDeltas (or the engine's failure).

Why a process: in a server, the threads that answer requests (Triton's python backend sends one
response per stream per step) share one GIL with the engine thread, whose host work paces the
GPU; every response sent is a step delayed. Here the child owns the engine and writes each
step's deltas down a pipe, and the parent's threads only forward: the split that vLLM's engine
core process and TensorRT-LLM's executor worker make for the same reason.

The child stops when told, or when the pipe closes (its parent died); unfinished requests then
end "cancelled", as in AsyncLLMEngine.shutdown.
"""

import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from pipeline.engine.async_engine import AsyncLLMEngine
from pipeline.engine.outputs import StreamDelta
from pipeline.engine.request_limits import RequestLimits
from pipeline.engine.sampling_params import SamplingParams

log = logging.getLogger(__name__)
# child -> parent messages: (kind, payload, stats or None)
_READY, _DELTAS, _STATS, _ERROR, _CLOSED = "ready", "deltas", "stats", "error", "closed"
STATS_PERIOD_S = 0.05  # stats ride along with step outputs at most this often


def _portable(exc: BaseException) -> RuntimeError:
    """An exception that surely unpickles in the parent (a CUDA error's class may not)."""
    return RuntimeError(f"engine process: {exc!r}")


def _child_main(conn: Connection) -> None:
    from pipeline.engine.llm_engine import LLMEngine

    # its log lines (model runner: kernels, graphs, KV blocks) join the server's log via stderr
    logging.basicConfig(level=logging.INFO, format="[engine process] %(levelname)s %(message)s")
    engine_dir, device, runtime = conn.recv()
    try:
        engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        conn.send((_ERROR, _portable(exc), None))
        return
    outbox: queue.SimpleQueue = queue.SimpleQueue()
    async_engine = AsyncLLMEngine(engine, outbox=outbox)
    conn.send((_READY, engine.limits, engine.stats()))

    def forward() -> None:  # one send per step, on its own thread: the engine never waits on it
        stats_at, is_stale = 0.0, False
        while True:
            try:
                item = outbox.get(timeout=STATS_PERIOD_S)
            except queue.Empty:  # idle: the parent still gets the counters of the last steps
                if is_stale:
                    conn.send((_STATS, None, engine.stats()))
                    is_stale = False
                continue
            if item is None:
                return
            now = time.monotonic()
            stats, is_stale = None, True
            if now - stats_at >= STATS_PERIOD_S:
                stats, stats_at, is_stale = engine.stats(), now, False
            if isinstance(item, BaseException):
                conn.send((_ERROR, _portable(item), stats))
            else:
                # plain tuples: 64 StreamDeltas pickle in ~190 us (a slotted dataclass goes
                # through Python-level __getstate__), as tuples in ~20 us of the engine's GIL
                deltas = [(d.request_id, d.token_ids, d.finished, d.finish_reason) for d in item]
                conn.send((_DELTAS, deltas, stats))

    forwarder = threading.Thread(target=forward, name="llm-engine-forward", daemon=True)
    forwarder.start()
    while True:
        try:
            command, *args = conn.recv()
        except EOFError:  # the parent is gone
            command = "shutdown"
        if command == "submit":
            try:
                async_engine.submit(*args)
            except BaseException as exc:  # noqa: BLE001 - engine failed or shut down meanwhile
                outbox.put(exc)
        elif command == "cancel":
            async_engine.cancel(*args)
        else:
            async_engine.shutdown()  # unfinished requests get their "cancelled" deltas
            outbox.put(None)
            forwarder.join()
            conn.send((_CLOSED, None, engine.stats()))
            return


class EngineProcess:
    def __init__(
        self,
        engine_dir: str | Path,
        device: str,
        runtime: dict,
        outbox: queue.SimpleQueue,
        python: str = sys.executable,
        startup_timeout_s: float = 1800.0,
    ):
        """Start the child and wait until its engine is loaded (graphs captured). python: the
        interpreter to run it (a Triton stub's own sys.executable is not a Python); it sees
        this process's sys.path."""
        # a plain subprocess, not multiprocessing: spawn would also leave its resource tracker
        # running in the server's process group after shutdown
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [python, "-m", __name__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},  # this pipeline
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send((str(engine_dir), device, runtime))
        if not self._conn.poll(startup_timeout_s):
            self._process.kill()
            self._process.wait()
            raise RuntimeError(f"engine process: not ready after {startup_timeout_s:.0f} s")
        try:
            kind, payload, stats = self._conn.recv()
        except EOFError:
            raise RuntimeError(
                f"engine process exited during start-up (code {self._process.wait()})"
            ) from None
        if kind == _ERROR:
            self._process.wait()
            raise payload
        self.limits: RequestLimits = payload
        self._stats: dict = stats
        self._outbox = outbox
        self._error: BaseException | None = None
        self._send_lock = threading.Lock()  # execute() submits while the responder cancels
        self._is_closing = False
        self._reader = threading.Thread(target=self._read, name="llm-engine-read", daemon=True)
        self._reader.start()

    def submit(self, prompt_token_ids: list[int], params: SamplingParams, request_id: str) -> None:
        """Queue a request; ValueError at once if the engine can never serve it."""
        prompt_token_ids = list(prompt_token_ids)
        self.limits.check(prompt_token_ids, params)
        if self._is_closing:
            raise RuntimeError("EngineProcess is shut down")
        if self._error is not None:
            raise RuntimeError(f"engine process failed: {self._error}")
        self._send(("submit", prompt_token_ids, params, request_id))

    def cancel(self, request_id: str) -> None:
        self._send(("cancel", request_id))

    def stats(self) -> dict:
        """The child's counters, at most STATS_PERIOD_S old while it steps."""
        return self._stats

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Unfinished requests end "cancelled" (their deltas reach the outbox), then the child
        exits."""
        self._is_closing = True
        try:
            self._send(("shutdown",))
        except OSError:  # already gone
            pass
        self._reader.join(timeout_s)
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("engine process did not stop in %.0f s; killing it", timeout_s)
            self._process.kill()
            self._process.wait()

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            self._conn.send(message)

    def _read(self) -> None:
        while True:
            try:
                kind, payload, stats = self._conn.recv()
            except (EOFError, OSError):
                if not self._is_closing:
                    self._error = RuntimeError(
                        f"engine process exited (code {self._process.wait()})"
                    )
                    self._outbox.put(self._error)
                return
            if stats is not None:
                self._stats = stats
            if kind == _CLOSED:
                return
            if kind == _STATS:
                continue
            if kind == _ERROR:
                self._error = payload
            elif kind == _DELTAS:
                payload = [StreamDelta(*d) for d in payload]
            self._outbox.put(payload)


if __name__ == "__main__":
    _child_main(Connection(int(sys.argv[1])))
