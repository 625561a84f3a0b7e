"""AsyncLLMEngine in a process of its own, behind the same calls: submit, cancel, stats,
shutdown, and an outbox that gets each step's list of StreamDeltas (or the engine's failure).

Why a process: in a server, the threads that answer requests (Triton's python backend sends one
response per stream per step) share one GIL with the engine thread, whose host work paces the
GPU; every response sent is a step delayed. Here the child owns the engine and writes each
step's deltas down a socket (engine_hub.py; a client that reads slower than the engine steps
never holds it, and gets the steps that piled up in one message), and the parent's threads only
forward: the split that vLLM's engine core process and TensorRT-LLM's executor worker make for
the same reason.

Shared (share_key): several processes use one engine, the way vLLM's API server processes share
one engine core. Triton runs each instance of a python model as a stub process with a GIL of its
own, so N instances tokenize, detokenize and send responses N at a time, where one stub's GIL was
the served path's limit (a request waited in Triton's queue for the one instance, in its
execute, and again for its final response to go out; docs/design.md, "The engine process").
The first process to come spawns the engine, which also listens on an abstract unix socket
named after the key (no file to leave behind; connections from this user only); the others
connect to it. Each client gets the deltas of its own requests.

The engine process stops when its last client has gone (told it, or its connection closed); a
client's unfinished requests end "cancelled", as in AsyncLLMEngine.shutdown.
"""

import collections
import dataclasses
import hashlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Client, Connection
from pathlib import Path

from pipeline.engine.core.engine_wire import CLOSED, DELTAS, ERROR, STATS, portable
from pipeline.request.limits import RequestLimits
from pipeline.request.outputs import StreamDelta
from pipeline.request.sampling_params import SamplingParams

log = logging.getLogger(__name__)
_TAKEN = "taken"  # a spawned child found the shared engine's address bound: join that one
JOIN_TRIES = 5  # joining races: two spawns at once, or a connect as the engine stops


# a delta as a client reads it: StreamDelta's fields by name, made several times faster than the
# frozen dataclass (whose __init__ sets each field through object.__setattr__): a client makes
# one per token, on the thread that reads the engine's socket. A row of two is a delta that is
# not the request's last (finished=False) and carries tokens alone (engine_hub._row)
_FIELDS = dataclasses.fields(StreamDelta)
_Delta = collections.namedtuple(
    "_Delta",
    [f.name for f in _FIELDS],
    defaults=[False, *(f.default for f in _FIELDS[3:])],
)


def _child_main(first: Connection, name: str | None) -> None:
    # the engine's modules load here only: a client (a Triton stub) never imports torch
    from pipeline.engine.core.engine_hub import Hub
    from pipeline.engine.core.engine_probe import check_probe
    from pipeline.engine.core.heap import freeze_loaded
    from pipeline.engine.core.llm_engine import LLMEngine

    # its log lines (model runner: kernels, graphs, KV blocks) join the server's log via stderr
    logging.basicConfig(level=logging.INFO, format="[engine process] %(levelname)s %(message)s")
    listener = None
    if name is not None:  # bound before loading: processes that come meanwhile wait in line
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind("\0" + name)
        except OSError:  # in use: another process spawned this engine first
            first.send((_TAKEN, None, None))
            return
        listener.listen(64)
    engine_dir, device, runtime, num_threads = first.recv()
    if num_threads:
        import torch

        torch.set_num_threads(num_threads)
    try:
        engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
        check_probe(engine, engine_dir)  # before it is ready: its weights are the build's
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        first.send((ERROR, portable(exc), None))
        return
    freeze_loaded()  # the engine thread's full collections would walk the whole load
    hub = Hub(engine)
    hub.join(first)
    hub.serve(listener)
    hub.async_engine.shutdown()
    engine.close()  # a multi-rank engine's ranks leave their process groups before they exit


def _socket_name(share_key: str) -> str:
    """The shared engine's abstract unix socket (Linux) is this name after a NUL byte: no file,
    so none to clean up after a crash and no path-length limit from TMPDIR."""
    return "pipeline-engine-" + hashlib.sha256(share_key.encode()).hexdigest()[:32]


class EngineProcess:
    def __init__(
        self,
        engine_dir: str | Path,
        device: str,
        runtime: dict,
        outbox: queue.SimpleQueue,
        python: str = sys.executable,
        startup_timeout_s: float = 1800.0,
        share_key: str | None = None,
        num_threads: int = 0,
    ):
        """Start the child and wait until its engine is loaded (graphs captured); with a
        share_key, join the engine that a process with the same key started, if it still runs.
        python: the interpreter to run it (a Triton stub's own sys.executable is not a Python);
        it sees this process's sys.path. num_threads: the engine's torch threads (0: torch's
        default)."""
        self._process: subprocess.Popen | None = None  # when this one spawned it
        spawn = (str(engine_dir), device, runtime, num_threads, python)
        if share_key is None:
            kind, payload, stats = self._spawn(*spawn, None, startup_timeout_s)
        else:
            kind, payload, stats = self._join(*spawn, _socket_name(share_key), startup_timeout_s)
        if kind == ERROR:
            raise payload
        self.limits: RequestLimits = payload
        self._stats: dict = stats
        self._outbox = outbox
        self._error: BaseException | None = None
        self._send_lock = threading.Lock()  # execute() submits while the responder cancels
        self._is_closing = False
        self._num_left: int | None = None  # clients the engine still had when this one left
        self._reader = threading.Thread(target=self._read, name="llm-engine-read", daemon=True)
        self._reader.start()

    @property
    def is_spawner(self) -> bool:
        """True when this one started the engine process (False: it joined a shared one)."""
        return self._process is not None

    def _join(self, engine_dir, device, runtime, num_threads, python, name, timeout_s) -> tuple:
        """Connect to the shared engine, or spawn it when none runs. Races end in a retry: of two
        children spawned at once one binds the name and the other says _TAKEN; a connection
        made as the engine stops ends before READY."""
        for _ in range(JOIN_TRIES):
            self._process = None
            try:
                self._conn = Client("\0" + name, family="AF_UNIX")
            except ConnectionRefusedError:  # nobody listens: start it
                message = self._spawn(
                    engine_dir, device, runtime, num_threads, python, name, timeout_s
                )
                if message[0] != _TAKEN:
                    return message
                self._process.wait()
                self._conn.close()
                continue
            try:
                return self._first_message(timeout_s)
            except EOFError:  # it stopped as this one connected
                self._conn.close()
        raise RuntimeError(f"engine process: could not join or start {name} in {JOIN_TRIES} tries")

    def _spawn(self, engine_dir, device, runtime, num_threads, python, name, timeout_s) -> tuple:
        """Start the child (listening as name when shared) and wait for its first message."""
        # a plain subprocess, not multiprocessing: spawn would also leave its resource tracker
        # running in the server's process group after shutdown
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [python, "-m", __name__, str(theirs.fileno()), *([name] if name else [])],
            pass_fds=[theirs.fileno()],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},  # this pipeline
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send((engine_dir, device, runtime, num_threads))
        try:
            message = self._first_message(timeout_s)
        except EOFError:
            raise RuntimeError(
                f"engine process exited during start-up (code {self._process.wait()})"
            ) from None
        if message[0] == ERROR:
            self._process.wait()
        return message

    def _first_message(self, timeout_s: float) -> tuple:
        """The engine's first message on the connection (EOFError: it went away first); a child
        of this one that is not ready in time is killed."""
        if not self._conn.poll(timeout_s):
            if self._process is not None:
                self._process.kill()
                self._process.wait()
            raise RuntimeError(f"engine process: not ready after {timeout_s:.0f} s")
        return self._conn.recv()

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
        """The child's counters, at most engine_hub.STATS_PERIOD_S old while it steps."""
        return self._stats

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Unfinished requests end "cancelled" (their deltas reach the outbox); the child exits
        when no other client is left (its spawner, if the last, waits for that)."""
        self._is_closing = True
        try:
            self._send(("shutdown",))
        except OSError:  # already gone
            pass
        self._reader.join(timeout_s)
        if self._process is None or self._num_left:  # not its child, or it serves others
            return
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
                    code = self._process.wait() if self._process is not None else "unknown"
                    self._error = RuntimeError(f"engine process exited (code {code})")
                    self._outbox.put(self._error)
                return
            if stats is not None:
                self._stats = stats
            if kind == CLOSED:
                self._num_left = payload
                return
            if kind == STATS:
                continue
            if kind == ERROR:
                self._error = payload
            elif kind == DELTAS:
                payload = [_Delta(*d) for d in payload]
            self._outbox.put(payload)


if __name__ == "__main__":
    _child_main(Connection(int(sys.argv[1])), *(sys.argv[2:3] or (None,)))
    logging.shutdown()
    # no interpreter teardown (torch's and CUDA's take seconds): the spawner that waits for this
    # process to exit, or a server stopping, sees it gone at once
    os._exit(0)
