"""One tritonserver process: start, readiness wait with a timeout, clean stop.

Works for the local wheel server and for the container command alike (both are an argv); the
local one also gets a private python-backend shm prefix and TMPDIR, so stop() removes exactly the
shared-memory segments and python_env_* dirs this server created, even after a crash.

Lifetime: the server gets SIGTERM when the thread that started it ends (Linux's parent-death
signal; start it from a thread that lives as long as it should, as serve does from its main
thread), so a wrapper killed with SIGKILL does not leave it running; its python stubs follow it
(each polls its parent) and the engine process follows its stubs (it exits when its last client
connection closes). The local server also leaves a record in run_dir (server_records), from
which the next start stops what is left of a server whose wrapper died.
"""

import ctypes
import logging
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from pipeline.errors import StageError
from pipeline.server import server_records
from pipeline.server.ports import wait_accepting
from pipeline.server.server_home import ServerHome
from pipeline.triton_models.drain import DRAIN_FILE_ENV, DRAIN_TIMEOUT_ENV, write_drain

log = logging.getLogger(__name__)
SHM_DIR = server_records.SHM_DIR
EXIT_TIMEOUT_S = 30  # past the drain: for the models to unload
PORTS_TIMEOUT_S = 30.0  # after /v2/health/ready, for the gRPC and metrics ports to accept
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True, slots=True)
class Endpoints:
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def check_free(self) -> None:
        for key, port in (
            ("http_port", self.http_port),
            ("grpc_port", self.grpc_port),
            ("metrics_port", self.metrics_port),
        ):
            check_port_free(self.host, port, f"deploy.{key}")


def check_port_free(host: str, port: int, setting: str) -> None:
    """StageError naming what listens on host:port and the setting to change, unless a server
    could bind it now."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            sock.bind((host, port))
        except OSError as exc:
            holder = server_records.listener(host, port)
            what = (
                f"pid {holder[0]} (`{holder[1]}`) listens there: stop it (kill {holder[0]})"
                if holder
                else "stop what listens there"
            )
            raise StageError(
                f"serve: {host}:{port} is in use ({exc.strerror}); {what} or set "
                f"{setting}=<free port>"
            ) from exc


def local_argv(
    home: ServerHome,
    repo_dir: Path,
    endpoints: Endpoints,
    shm_prefix: str,
    extra_args: tuple[str, ...] = (),
    exit_timeout_s: int = EXIT_TIMEOUT_S,
) -> list:
    return [
        str(home.binary),
        f"--model-repository={Path(repo_dir).resolve()}",
        f"--backend-directory={home.backends_dir}",
        f"--cache-directory={home.caches_dir}",
        "--disable-auto-complete-config",
        "--exit-on-error=true",
        "--strict-readiness=true",
        # on SIGTERM Triton 2.51 waits for the requests it counts in flight (the ensemble's and
        # the BLS's; it keeps a client-cancelled ensemble request "in flight" for good), then
        # for the models to unload (tensorrt_llm's finalize waits out the drain, then stops the
        # engine: seconds on a loaded CPU); past this it exits anyway, code 1
        f"--exit-timeout-secs={exit_timeout_s}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        *(f"--{kind}-address={endpoints.host}" for kind in ("http", "grpc", "metrics")),
        f"--http-port={endpoints.http_port}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-port={endpoints.metrics_port}",
        *extra_args,
    ]


class TritonServer:
    """`with TritonServer.local(...) as server:` starts it and waits until it is ready."""

    def __init__(
        self,
        argv: list[str],
        endpoints: Endpoints,
        log_path: Path,
        startup_timeout_s: float,
        env: dict | None = None,
        shm_prefix: str | None = None,
        tmp_dir: Path | None = None,
        run_dir: Path | None = None,
        exit_timeout_s: float = EXIT_TIMEOUT_S,
    ):
        """exit_timeout_s: how long the server may take to exit after SIGTERM (its drain and
        its models' unloading)."""
        self.argv, self.endpoints, self.log_path = argv, endpoints, Path(log_path)
        self.startup_timeout_s, self.env = startup_timeout_s, env
        self.shm_prefix, self.tmp_dir, self.run_dir = shm_prefix, tmp_dir, run_dir
        self.exit_timeout_s = exit_timeout_s
        self.process: subprocess.Popen | None = None
        self.record_path: Path | None = None
        self.is_stopping = False  # SIGTERM sent

    @classmethod
    def local(
        cls,
        home: ServerHome,
        repo_dir: Path,
        endpoints: Endpoints,
        log_path: Path,
        startup_timeout_s: float,
        extra_args: tuple[str, ...] = (),
        run_dir: Path | None = None,
        drain_timeout_s: float = 0.0,
    ) -> "TritonServer":
        """drain_timeout_s: after begin_stop, how long requests in flight may go on."""
        shm_prefix = f"pipeline{os.getpid()}-{secrets.token_hex(3)}_"
        tmp_dir = Path(log_path).parent / f"tmp-{shm_prefix.rstrip('_')}"
        exit_timeout_s = math.ceil(drain_timeout_s) + EXIT_TIMEOUT_S
        env = home.env(tmp_dir) | {
            DRAIN_FILE_ENV: str(tmp_dir / "drain.json"),
            DRAIN_TIMEOUT_ENV: str(drain_timeout_s),
        }
        return cls(
            local_argv(home, repo_dir, endpoints, shm_prefix, extra_args, exit_timeout_s),
            endpoints,
            log_path,
            startup_timeout_s,
            env,
            shm_prefix,
            tmp_dir,
            run_dir,
            exit_timeout_s,
        )

    def __enter__(self) -> "TritonServer":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        if self.run_dir is not None:
            server_records.stop_orphans(self.run_dir, grace_s=self.exit_timeout_s + 5)
        self.endpoints.check_free()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.tmp_dir is not None:
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
        log.info("serve: starting %s (log %s)", " ".join(self.argv), self.log_path)
        with open(self.log_path, "ab") as log_file:
            # own session: stop() can reach the python stubs even if tritonserver dies first
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_exit_with_parent(os.getpid()),
            )
        if self.run_dir is not None and self.shm_prefix is not None:
            record = server_records.ServerRecord.of(
                self.process.pid, self.argv, self.shm_prefix, self.tmp_dir
            )
            self.record_path = record.write(self.run_dir)

    def is_ready(self) -> bool:
        try:
            return requests.get(f"{self.endpoints.http_url}/v2/health/ready", timeout=2).ok
        except requests.RequestException:
            return False

    def wait_ready(self) -> float:
        """Seconds until /v2/health/ready said 200; StageError on exit or timeout."""
        start = time.perf_counter()
        while time.perf_counter() - start < self.startup_timeout_s:
            if self.process.poll() is not None:
                raise StageError(
                    self.failure(f"{exit_description(self.process.returncode)} before it was ready")
                )
            if self.is_ready():
                self._wait_ports()
                elapsed = time.perf_counter() - start
                log.info("serve: ready in %.1f s at %s", elapsed, self.endpoints.http_url)
                return elapsed
            time.sleep(0.25)
        raise StageError(
            self.failure(
                f"not ready after {self.startup_timeout_s:.0f} s "
                f"(raise deploy.startup_timeout_s if the model load is "
                f"just slow)"
            )
        )

    def _wait_ports(self) -> None:
        """Triton says ready once its models are, and may open its other ports after it."""
        ends = self.endpoints
        ports = {"grpc": ends.grpc_port, "metrics": ends.metrics_port}
        refusing = wait_accepting(ends.host, ports, PORTS_TIMEOUT_S)
        if refusing:
            raise StageError(self.failure(f"ready, but {', '.join(refusing)} refuses connections"))

    def begin_stop(self) -> None:
        """The server refuses new requests from now on and drains those in flight (it exits by
        itself once they are done, or once its exit timeout is over): its models are told
        (pipeline.triton_models.drain), then it gets SIGTERM."""
        if self.process is None or self.process.poll() is not None or self.is_stopping:
            return
        self._tell_models(None)
        self.process.send_signal(signal.SIGTERM)
        self.is_stopping = True

    def end_drain(self, message: str) -> None:
        """The server's models end every request they still run, with message as its error (the
        pipeline's python models only: a container's are not told)."""
        if self.process is not None and self.process.poll() is None:
            self._tell_models(message)

    def _tell_models(self, end_message: str | None) -> None:
        path = (self.env or {}).get(DRAIN_FILE_ENV)
        if path is not None:
            write_drain(Path(path), end_message)

    def failure(self, what: str) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        # a model's load error (its cause, one line) scrolls out of the tail while the server
        # takes its time to stop: it goes first
        load_errors = [line for line in lines[:-50] if "failed to load" in line]
        lines = load_errors + lines[-50:]
        return (
            f"serve: `{' '.join(self.argv[:2])} ...` {what}; full log {self.log_path}; last "
            f"lines:\n" + "\n".join(lines)
        )

    def stop(self, timeout_s: float | None = None) -> None:
        """SIGTERM (unless begin_stop sent it), then after timeout_s (default: the exit timeout
        and a margin) SIGKILL to the whole process group; then remove shm/tmp leftovers."""
        timeout_s = self.exit_timeout_s + 30 if timeout_s is None else timeout_s
        if self.process is not None and self.process.poll() is None:
            self.begin_stop()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "serve: no exit %.0f s after SIGTERM; killing its process group", timeout_s
                )
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # stubs left behind, if any
            except ProcessLookupError:
                pass
            self.process.wait()
            _wait_group_gone(self.process.pid, self.exit_timeout_s)
        self._remove_leftovers()
        if self.record_path is not None:
            self.record_path.unlink(missing_ok=True)

    def _remove_leftovers(self) -> None:
        if self.shm_prefix:
            for path in SHM_DIR.glob(f"{self.shm_prefix}*"):
                path.unlink(missing_ok=True)
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


def _exit_with_parent(parent_pid: int):
    """A preexec_fn: SIGTERM this child when the thread that forked it ends (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None

    def preexec() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def exit_description(code: int) -> str:
    """'exited with code N', or for a signal its name and who usually sends it."""
    if code >= 0:
        return f"exited with code {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
    if -code == signal.SIGKILL:
        return f"was killed by {name} (kill -9, or the kernel's OOM killer: see dmesg)"
    return f"was stopped by {name}"


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Until the group's last process is reaped: one that outlived the server (an engine process
    whose stub left first) belongs to init by now, which reaps it a moment later."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
