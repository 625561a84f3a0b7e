"""The server load generator spread over client processes (bench.client_processes).

Python's gRPC client spends ~250 us of its process's one GIL per streamed response (parsing it,
waking the waiting thread): one process takes a few thousand responses a second, fewer than a
fast engine sends at high concurrency, and then the client, not the server, is measured (on the
H100, SmolLM2 at concurrency 64: served throughput fell as the server sent more responses).
Each client process runs a LoadGenerator over its share of the requests (round robin) and of the
concurrency; all start at one time on one clock (perf_counter is CLOCK_MONOTONIC on Linux, the
same in every process), so their records merge as if one generator had sent them.

The processes start with the first run (spawned: gRPC's threads do not survive a fork), stay for
the next (warm-up, then measure) and stop on close().
"""

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection

from pipeline.bench.arrivals import arrival_offsets
from pipeline.bench.load_generator import LoadGenerator, check_load_shape
from pipeline.bench.records import RequestRecord
from pipeline.bench.workload import BenchRequest

log = logging.getLogger(__name__)
STREAMS_PER_PROCESS = 8  # auto: one client process per this many concurrent requests
START_SLACK_S = 0.05  # every process has its start time before it comes


def auto_client_processes(concurrency: int, cpu_count: int | None = None) -> int:
    """One process per STREAMS_PER_PROCESS streams, on at most half the cores (the server and
    its engine need the rest)."""
    cores = cpu_count if cpu_count is not None else os.cpu_count() or 1
    return max(1, min(concurrency // STREAMS_PER_PROCESS, cores // 2))


def shares(total: int, parts: int) -> list[int]:
    """total split into parts that differ by at most one, larger first."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def _client_main(conn: Connection) -> None:
    make_streams, settings = conn.recv()
    target = make_streams()  # GrpcStreams, OpenAIStreams: a picklable factory of either
    generator = LoadGenerator(target, **settings)
    conn.send("ready")
    try:
        while (message := conn.recv())[0] == "run":
            _, requests, offsets, start, phase = message
            conn.send(generator.run_at(requests, offsets, start, phase, show_progress=False))
    finally:
        target.close()


class ClientProcesses:
    """A LoadGenerator (run, now) whose requests go out from num_processes client processes."""

    def __init__(
        self,
        num_processes: int,
        make_streams: Callable,
        settings: dict,
        name: str = "server",
    ) -> None:
        """make_streams: builds each process's streams (picklable: a partial of a module-level
        callable); settings: LoadGenerator's keyword arguments (mode, concurrency,
        request_rate, temperature, seed, origin_s); each process gets its share of the
        concurrency."""
        check_load_shape(settings["mode"], settings["concurrency"])
        self.name = name
        self.num_processes = max(1, min(num_processes, settings["concurrency"]))
        self.mode, self.request_rate = settings["mode"], settings["request_rate"]
        self.seed, self.origin_s = settings["seed"], settings["origin_s"]
        self.engine_stats: dict = {}  # a server's engine is not visible from here
        self._init = [
            (make_streams, settings | {"concurrency": share})
            for share in shares(settings["concurrency"], self.num_processes)
        ]
        self._clients: list[tuple[multiprocessing.Process, Connection]] = []

    def now(self) -> float:
        return time.perf_counter() - self.origin_s

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        for init in self._init:
            ours, theirs = context.Pipe()
            process = context.Process(target=_client_main, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            ours.send(init)
            self._clients.append((process, ours))
        for process, conn in self._clients:
            if conn.recv() != "ready":
                raise RuntimeError(f"bench: client process {process.pid} did not start")
        log.info("bench: %d client processes send the requests", len(self._clients))

    def run(self, requests: Sequence[BenchRequest], phase: str) -> list[RequestRecord]:
        """Send every request from the client processes; records in request order."""
        if not requests:
            return []
        if not self._clients:
            self._start()
        offsets = arrival_offsets(self.mode, len(requests), self.request_rate, self.seed)
        start = self.now() + START_SLACK_S
        parts = len(self._clients)
        for i, (_, conn) in enumerate(self._clients):
            conn.send(("run", list(requests[i::parts]), offsets[i::parts], start, phase))
        records: list[RequestRecord | None] = [None] * len(requests)
        for i, (process, conn) in enumerate(self._clients):
            try:
                records[i::parts] = conn.recv()
            except EOFError:
                raise RuntimeError(
                    f"bench: client process {process.pid} exited (code {process.exitcode}) "
                    f"during {phase}"
                ) from None
        return records

    def close(self) -> None:
        """Stop the client processes (they close their streams first)."""
        for _, conn in self._clients:
            try:
                conn.send(("stop",))
            except OSError:  # already gone
                pass
        for process, _ in self._clients:
            process.join(30)
            if process.is_alive():
                process.kill()
        self._clients = []
