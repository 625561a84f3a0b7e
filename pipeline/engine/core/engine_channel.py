"""The engine process's side of one client connection: sends that never wait for the client.

The engine thread sends each step's deltas as the step returns. A client that reads slower than
the engine steps (its process busy sending responses, tokenizing, detokenizing) fills the
socket's buffer, and a blocking send would then hold the engine thread, and so the GPU, until
the client catches up: the engine would step at the pace of its slowest reader. Here a send
writes what the socket takes at once (MSG_DONTWAIT); the rest, and every message after it,
waits in a backlog that a writer thread drains with blocking writes. Messages that wait
together leave as one: consecutive deltas and stats merge into one deltas message (rows in
order, the newest stats), so a client that falls behind gets fewer, larger messages, each step's
rows still in order, and none of them twice. The writer thread wakes only when the socket was
full: in the common case, a send is one non-blocking write on the sending thread.

Frames are multiprocessing.connection's (a 4-byte big-endian length, then the pickle; above
2 GiB, -1 then an 8-byte length), so the client reads them with Connection.recv as before.
"""

import contextlib
import socket
import struct
import threading
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

# merged when they wait together: (kind, rows or None, stats or None)
MERGED_KINDS = ("deltas", "stats")


def frame(message: tuple) -> bytes:
    payload = ForkingPickler.dumps(message)
    n = len(payload)
    header = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
    return header + bytes(payload)


def merged(backlog: list[tuple]) -> list[tuple]:
    """The backlog's messages with each run of deltas / stats messages made one."""
    out: list[tuple] = []
    for kind, payload, stats in backlog:
        if kind not in MERGED_KINDS:
            out.append((kind, payload, stats))
            continue
        if not out or out[-1][0] not in MERGED_KINDS:
            out.append(("stats", [], None))
        _, rows, last_stats = out[-1]
        rows.extend(payload or ())
        out[-1] = ("deltas" if rows else "stats", rows, stats or last_stats)
    return [(k, p or None, s) if k in MERGED_KINDS else (k, p, s) for k, p, s in out]


class Channel:
    """Sends to one client connection from any thread, none of them ever blocked by it."""

    def __init__(self, conn: Connection):
        self.conn = conn
        # a second handle on the same socket: Connection has no non-blocking send
        self._sock = socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
        self._lock = threading.Condition()
        self._backlog: list[tuple] = []  # messages after a write that did not go out whole
        self._unsent = b""  # the rest of the frame the socket did not take
        self._is_writing = False  # the writer thread owns the socket's writes
        self._is_gone = False  # a write failed: the client hung up
        self._writer: threading.Thread | None = None
        self.num_backlogged = 0  # messages that waited for the writer (a slow client)

    def send(self, message: tuple) -> None:
        with self._lock:
            if self._is_gone:
                return
            if self._is_writing:
                self._backlog.append(message)
                self.num_backlogged += 1
                return
            data = frame(message)
            try:
                sent = self._sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except OSError:  # gone: its reader sees EOF
                self._is_gone = True
                return
            if sent < len(data):
                self._unsent, self._is_writing = data[sent:], True
                self.num_backlogged += 1
                self._wake_writer()

    def _wake_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write, name="engine-client", daemon=True)
            self._writer.start()
        self._lock.notify_all()

    def _write(self) -> None:
        while True:
            with self._lock:
                while not self._is_writing and not self._is_gone:
                    self._lock.wait()
                if self._is_gone:
                    return
                unsent, self._unsent = self._unsent, b""
                backlog, self._backlog = self._backlog, []
                if not unsent and not backlog:
                    self._is_writing = False
                    self._lock.notify_all()  # close() waits for this
                    continue
            # pickled and written without the lock: the engine thread's sends meanwhile only
            # append to the backlog, and go out after these
            data = unsent + b"".join(frame(m) for m in merged(backlog))
            try:
                self._sock.sendall(data)
            except OSError:
                with self._lock:
                    self._is_gone = True
                    self._backlog.clear()
                    self._lock.notify_all()
                return

    def close(self) -> None:
        """After every message sent so far has been written (or the client is gone)."""
        with self._lock:
            while self._is_writing and not self._is_gone:
                self._lock.wait()
            self._is_gone = True
            self._lock.notify_all()
        with contextlib.suppress(OSError):
            self._sock.close()
        self.conn.close()
