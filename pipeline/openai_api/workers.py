"""The frontend in several processes on one port, so that what one event loop does per token
(gRPC stream handling, detokenizing, JSON and SSE encoding) spreads over more than one core.

Each worker is a spawned process (nothing forked from the caller's threads or gRPC channels)
that binds a listening socket of its own with SO_REUSEPORT: the kernel spreads new connections
over the workers, and a connection stays with its worker, with its streams, its gRPC channel to
Triton and the cancelling of a stream whose client left. What holds for the port as a whole is
shared: the limits on engine requests in flight and on requests queued (admission.Admission
over an array of per-worker counts) and the metrics (metrics.FrontendMetrics over a directory of
per-process files). A worker that dies is started again, its slots and queue places given back
(and so dropped from the gauges).
"""

import logging
import multiprocessing
import os
import shutil
import socket
import tempfile
import threading
import time
from multiprocessing.connection import wait

import uvicorn

from pipeline.errors import StageError
from pipeline.openai_api.admission import Admission
from pipeline.openai_api.app import build_app
from pipeline.openai_api.metrics import FrontendMetrics
from pipeline.openai_api.recipe import (
    FrontendRecipe,
    ServesRecipe,
    check_free,
    uvicorn_config,
)
from pipeline.server.triton_server import exit_description
from pipeline.specs.serve import OpenAISpec

log = logging.getLogger(__name__)
STARTUP_TIMEOUT_S = 120.0  # each process imports the frontend and loads the tokenizer
STOP_TIMEOUT_S = 30.0
MAX_RESTARTS = 5  # in the pool's life: past it a worker that dies stays down
PARENT_POLL_S = 1.0


class FrontendWorkers(ServesRecipe):
    def __init__(self, recipe: FrontendRecipe):
        self.recipe, self.num_workers = recipe, recipe.num_workers
        self._context = multiprocessing.get_context("spawn")
        self._processes: list = [None] * self.num_workers
        self._readies: list = [None] * self.num_workers  # set by each process once it listens
        self._counts = None
        self._closed = self._context.Event()  # Admission.closed, in every worker
        self._shared_dir: str | None = None
        self._lock = threading.Lock()  # the process list, between the watcher and __exit__
        self._stopping = False
        self._watcher: threading.Thread | None = None
        self._num_restarts = 0

    @property
    def pids(self) -> list[int]:
        """The workers listening now."""
        with self._lock:
            workers = zip(self._processes, self._readies, strict=True)
            return [p.pid for p, ready in workers if p and p.is_alive() and ready.is_set()]

    def __enter__(self) -> "FrontendWorkers":
        check_free(self.recipe.spec)
        self._shared_dir = tempfile.mkdtemp(prefix="openai-metrics-")
        self._counts = Admission.shared_counts(self._context, self.num_workers)
        self.admission = Admission(
            self.recipe.spec.max_concurrent_requests,
            self.recipe.spec.max_queued_requests,
            self._counts,
            closed=self._closed,
        )
        try:
            readies = [self._start(index) for index in range(self.num_workers)]
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            for index, ready in enumerate(readies):
                self._wait_ready(index, ready, deadline)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self._watcher = threading.Thread(target=self._watch, name="openai-workers", daemon=True)
        self._watcher.start()
        log.info(
            "openai: serving %s at %s/v1 from %d processes",
            self.model_name,
            self.url,
            self.num_workers,
        )
        return self

    def __exit__(self, *exc_info) -> None:
        """SIGTERM: each worker gives its open streams a few seconds (uvicorn's graceful stop),
        then cancels them, and so their requests."""
        with self._lock:
            self._stopping = True
            processes = [p for p in self._processes if p is not None]
        for process in processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        if self._watcher is not None:
            self._watcher.join()
        if self._shared_dir is not None:
            shutil.rmtree(self._shared_dir, ignore_errors=True)

    def _start(self, index: int):
        ready = self._context.Event()
        process = self._context.Process(
            target=run_worker,
            args=(
                self.recipe,
                index,
                self._counts,
                self._closed,
                self._shared_dir,
                ready,
                os.getpid(),
            ),
            name=f"openai-worker-{index}",
            daemon=True,
        )
        process.start()
        self._processes[index], self._readies[index] = process, ready
        return ready

    def _wait_ready(self, index: int, ready, deadline: float) -> None:
        process = self._processes[index]
        while not ready.wait(0.1):
            if not process.is_alive() or time.monotonic() > deadline:
                how = (
                    "still starting"
                    if process.exitcode is None
                    else "it " + exit_description(process.exitcode)
                )
                raise StageError(
                    f"serve: OpenAI frontend worker {index} did not start on {self.url} ({how}; "
                    f"its error is logged above); change "
                    f"serve.openai.host/port, set serve.openai.workers=1, or set "
                    f"serve.openai.enabled=false"
                )

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                sentinels = {p.sentinel: i for i, p in enumerate(self._processes) if p}
            for sentinel in wait(list(sentinels), timeout=0.5):
                self._replace(sentinels[sentinel])

    def _replace(self, index: int) -> None:
        with self._lock:
            if self._stopping:
                return
            process = self._processes[index]
            process.join()
            Admission.forget_worker(self._counts, index)  # the gauges read these
            if self._num_restarts >= MAX_RESTARTS:
                log.error(
                    "openai: worker %d (pid %d) %s and stays down (%d restarts already); the "
                    "other workers serve the port",
                    index,
                    process.pid,
                    exit_description(process.exitcode),
                    self._num_restarts,
                )
                self._processes[index] = None
                return
            log.error(
                "openai: worker %d (pid %d) %s; starting another",
                index,
                process.pid,
                exit_description(process.exitcode),
            )
            self._num_restarts += 1
            self._start(index)


def run_worker(
    recipe: FrontendRecipe,
    index: int,
    counts,
    closed,
    shared_dir: str,
    ready,
    parent_pid: int,
) -> None:
    """A worker process: its frontend on a socket of its own until SIGTERM or SIGINT (uvicorn's
    handlers), or until its parent is gone."""
    # a terminal's Ctrl-C reaches its foreground process group: the parent drains the port
    # first (closed), then stops the workers
    os.setpgrp()
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s openai-worker-{index} %(levelname)s %(name)s: %(message)s",
    )
    spec = recipe.spec
    admission = Admission(
        spec.max_concurrent_requests, spec.max_queued_requests, counts, index, closed
    )
    metrics = FrontendMetrics(admission, recipe.engine_metrics_url, shared_dir)
    frontend = recipe.frontend(admission, metrics)
    server = uvicorn.Server(uvicorn_config(build_app(frontend), recipe.spec))
    watcher = threading.Thread(
        target=_report_ready_then_watch_parent, args=(server, ready, parent_pid), daemon=True
    )
    watcher.start()
    try:
        server.run(sockets=[reuse_port_socket(recipe.spec)])
    except KeyboardInterrupt:  # uvicorn raises a caught SIGINT again once it has stopped
        pass


def reuse_port_socket(spec: OpenAISpec) -> socket.socket:
    """Bound (uvicorn listens on it) beside the other workers' sockets on the same port."""
    family, kind, proto, _, address = socket.getaddrinfo(
        spec.host, spec.port, type=socket.SOCK_STREAM
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def _report_ready_then_watch_parent(server: uvicorn.Server, ready, parent_pid: int) -> None:
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.05)
    ready.set()
    while not server.should_exit:
        if os.getppid() != parent_pid:  # the parent was killed: nothing will stop this one
            server.should_exit = True
        time.sleep(PARENT_POLL_S)
