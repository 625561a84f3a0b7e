"""One tritonserver process: start, readiness wait with a timeout, clean stop.

Works for the local wheel server and for the container command alike (both are an argv); the
local one also gets a private python-backend shm prefix and TMPDIR, so stop() removes exactly the
shared-memory segments and python_env_* dirs this server created, even after a crash.
"""

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from pipeline.errors import StageError
from pipeline.server.server_home import ServerHome

log = logging.getLogger(__name__)
SHM_DIR = Path("/dev/shm")
EXIT_TIMEOUT_S = 10


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
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
                try:
                    sock.bind((self.host, port))
                except OSError as exc:
                    raise StageError(
                        f"serve: {self.host}:{port} is in use ({exc.strerror}); stop "
                        f"what listens there or set deploy.{key}=<free port>"
                    ) from exc


def local_argv(
    home: ServerHome,
    repo_dir: Path,
    endpoints: Endpoints,
    shm_prefix: str,
    extra_args: tuple[str, ...] = (),
) -> list:
    return [
        str(home.binary),
        f"--model-repository={Path(repo_dir).resolve()}",
        f"--backend-directory={home.backends_dir}",
        f"--cache-directory={home.caches_dir}",
        "--disable-auto-complete-config",
        "--exit-on-error=true",
        "--strict-readiness=true",
        # Triton 2.51 keeps a client-cancelled ensemble request "in flight" for good, and
        # shutdown waits this long for it before exiting anyway
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
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
    ):
        self.argv, self.endpoints, self.log_path = argv, endpoints, Path(log_path)
        self.startup_timeout_s, self.env = startup_timeout_s, env
        self.shm_prefix, self.tmp_dir = shm_prefix, tmp_dir
        self.process: subprocess.Popen | None = None

    @classmethod
    def local(
        cls,
        home: ServerHome,
        repo_dir: Path,
        endpoints: Endpoints,
        log_path: Path,
        startup_timeout_s: float,
        extra_args: tuple[str, ...] = (),
    ) -> "TritonServer":
        shm_prefix = f"pipeline{os.getpid()}-{secrets.token_hex(3)}_"
        tmp_dir = Path(log_path).parent / f"tmp-{shm_prefix.rstrip('_')}"
        return cls(
            local_argv(home, repo_dir, endpoints, shm_prefix, extra_args),
            endpoints,
            log_path,
            startup_timeout_s,
            home.env(tmp_dir),
            shm_prefix,
            tmp_dir,
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
            )

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
                    self.failure(f"exited with code {self.process.returncode} before it was ready")
                )
            if self.is_ready():
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

    def failure(self, what: str) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()[-50:]
        return (
            f"serve: `{' '.join(self.argv[:2])} ...` {what}; full log {self.log_path}; last "
            f"lines:\n" + "\n".join(lines)
        )

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM, then SIGKILL to the whole process group; then remove shm/tmp leftovers."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
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
            _wait_group_gone(self.process.pid, EXIT_TIMEOUT_S)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        if self.shm_prefix:
            for path in SHM_DIR.glob(f"{self.shm_prefix}*"):
                path.unlink(missing_ok=True)
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


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
