"""The engine process's side of its clients (engine_process.py): routes each step's deltas to the
clients that own them, takes their submits and cancels, and sends them the engine's counters
(the messages: engine_wire.py).
"""

import contextlib
import os
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection

from pipeline.engine.core.async_engine import AsyncLLMEngine
from pipeline.engine.core.delta_scores import delta_row
from pipeline.engine.core.engine_channel import Channel
from pipeline.engine.core.engine_wire import CLOSED, DELTAS, ERROR, READY, STATS, portable
from pipeline.engine.core.llm_engine import LLMEngine
from pipeline.request.outputs import StreamDelta

STATS_PERIOD_S = 0.05  # stats ride along with step outputs at most this often


def _refused(request_id: str, exc: ValueError) -> StreamDelta:
    """The final delta of a request the engine refused at submit: the client checks limits, the
    engine what needs its tokenizer (a grammar's compile)."""
    return StreamDelta(request_id, [], True, "error", str(exc))


def _row(d: StreamDelta) -> tuple:
    """The delta as the tuple a client reads back: (request id, tokens) for the usual one, which
    is all most steps' deltas carry (a third of delta_row's time on the engine thread)."""
    if (
        d.finished
        or d.logprobs is not None
        or d.num_cached_tokens
        or d.top_logprobs is not None
        or d.prompt is not None
        or d.generation_logits is not None
        or d.metrics is not None
    ):
        return delta_row(d)
    return (d.request_id, d.token_ids)


class _Client:
    """One connected process: its channel (sends that never wait for it: a client slower than
    the engine's steps gets their deltas merged) and its requests not finished yet."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.channel = Channel(conn)  # the engine thread, its reader and the acceptor send
        self.send = self.channel.send
        self.requests: set[str] = set()
        self.is_closing = False  # it said shutdown or hung up: it leaves once requests is empty
        self.stats_at = 0.0  # when it last got stats
        self.stats: dict | None = None  # the last it got


class Hub:
    """The engine's side: routes each step's deltas to the clients that own them.

    It is the engine thread's outbox: each step's deltas are sent on that thread as the step
    returns. A forwarder thread that took them from a queue took the GIL from the engine thread
    several times a launch (its wake-up, and around each send); sending on the engine thread
    costs it less than waiting for the forwarder did. A send never waits for its client
    (engine_channel.Channel): a client that falls behind gets the steps' deltas merged later."""

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._lock = threading.Lock()
        self._clients: list[_Client] = []
        self._owners: dict[str, _Client] = {}
        self._error: BaseException | None = None
        self._is_empty = threading.Event()  # the last client has left
        self._routed_at = 0.0  # when a step's deltas last went out (with stats when due)
        self.async_engine = AsyncLLMEngine(engine, outbox=self)  # its thread starts here

    def join(self, conn: Connection) -> None:
        client = _Client(conn)
        with self._lock:
            self._clients.append(client)
        client.send((READY, self.engine.limits, self.engine.stats()))
        threading.Thread(target=self._read, args=(client,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:  # shut down: the engine is stopping
                return
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", creds)[1] != os.getuid():  # (pid, uid, gid)
                sock.close()
                continue
            self.join(Connection(sock.detach()))

    def _read(self, client: _Client) -> None:
        while True:
            try:
                command, *args = client.conn.recv()
            except (EOFError, OSError):  # its process is gone
                command = "shutdown"
            if command == "submit":
                prompt_token_ids, params, request_id = args
                with self._lock:
                    self._owners[request_id] = client
                    client.requests.add(request_id)
                try:
                    self.async_engine.submit(prompt_token_ids, params, request_id)
                except ValueError as exc:  # this request alone (a grammar that does not compile)
                    client.send((DELTAS, [delta_row(_refused(request_id, exc))], None))
                    with self._lock:
                        self._owners.pop(request_id, None)
                        client.requests.discard(request_id)
                except BaseException as exc:  # noqa: BLE001 - engine failed or shut down meanwhile
                    with self._lock:
                        self._owners.pop(request_id, None)
                        client.requests.discard(request_id)
                    client.send((ERROR, portable(exc), None))
            elif command == "cancel":
                self.async_engine.cancel(*args)
            else:  # its unfinished requests get their "cancelled" deltas, then it leaves
                with self._lock:
                    client.is_closing = True
                    unfinished = list(client.requests)
                for request_id in unfinished:
                    self.async_engine.cancel(request_id)
                self._leave_if_done(client)
                return

    def _leave_if_done(self, client: _Client) -> None:
        with self._lock:
            done = client.is_closing and (not client.requests or self._error is not None)
            if not done or client not in self._clients:
                return
            self._clients.remove(client)
            num_left = len(self._clients)
        client.send((CLOSED, num_left, self.engine.stats()))
        client.channel.close()
        if not num_left:
            self._is_empty.set()

    def put(self, item: list[StreamDelta] | BaseException) -> None:
        """A step's deltas (or the engine's failure), on the engine thread: one send per client
        that owns some."""
        if not isinstance(item, BaseException):
            self._route(item)
            return
        with self._lock:
            self._error = item
            clients = list(self._clients)
        for client in clients:
            client.send((ERROR, portable(item), self.engine.stats()))
            self._leave_if_done(client)

    def wait_empty(self) -> None:
        """Until the last client has left; while no step sends, clients still get the counters
        of the last steps."""
        while not self._is_empty.wait(STATS_PERIOD_S):
            if time.monotonic() - self._routed_at >= STATS_PERIOD_S:
                self._send_stats()

    def _route(self, deltas: list[StreamDelta]) -> None:
        by_client: dict[_Client, list[tuple]] = {}
        with self._lock:
            for d in deltas:
                client = self._owners.get(d.request_id)
                if client is None:
                    continue
                # plain tuples: a slotted dataclass pickles through Python-level __getstate__,
                # about ten times the engine's GIL time of a tuple
                by_client.setdefault(client, []).append(_row(d))
                if d.finished:
                    del self._owners[d.request_id]
                    client.requests.discard(d.request_id)
        now, stats = time.monotonic(), None
        self._routed_at = now
        with self._lock:  # a client with no deltas this step still gets fresh stats
            clients = [*by_client, *(c for c in self._clients if c not in by_client)]
        for client in clients:
            is_due = now - client.stats_at >= STATS_PERIOD_S
            if is_due:
                stats = stats or self.engine.stats()
                client.stats_at, client.stats = now, stats
            if client in by_client:
                client.send((DELTAS, by_client[client], stats if is_due else None))
                self._leave_if_done(client)
            elif is_due:
                client.send((STATS, None, stats))

    def _send_stats(self) -> None:
        stats = self.engine.stats()
        with self._lock:
            stale = [c for c in self._clients if c.stats != stats]
        for client in stale:
            client.stats_at, client.stats = time.monotonic(), stats
            client.send((STATS, None, stats))

    def serve(self, listener: socket.socket | None) -> None:
        """Route deltas until the last client has left; with a listener (a shared engine), new
        clients join until then."""
        if listener is None:
            self.wait_empty()
            return
        acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        acceptor.start()
        self.wait_empty()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes accept(): nobody joins from here on
        acceptor.join()
        listener.close()
        with self._lock:
            if self._clients:  # joined just before: served to the end
                self._is_empty.clear()
        self.wait_empty()
