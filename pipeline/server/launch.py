"""From specs and the deploy artifact to a TritonServer: local (torch) or container (trtllm)."""

import contextlib
import logging
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from pipeline.errors import StageError
from pipeline.server import stub_python
from pipeline.server.container import container_argv
from pipeline.server.server_home import prepare_home
from pipeline.server.triton_server import Endpoints, TritonServer, exit_description
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.pipeline import PipelineSpec
from pipeline.triton_repo.engine_info import EngineInfo

log = logging.getLogger(__name__)


def endpoints(deploy: DeploySpec) -> Endpoints:
    return Endpoints(deploy.host, deploy.http_port, deploy.grpc_port, deploy.metrics_port)


def server_dir(workdir: str) -> Path:
    return Path(workdir).resolve() / "server"


def run_dir(workdir: str) -> Path:
    """Where the local servers' records are (server_records)."""
    return server_dir(workdir) / "run"


def _log_path(workdir: str) -> Path:
    return server_dir(workdir) / "logs" / f"tritonserver-{time.strftime('%Y%m%d-%H%M%S')}.log"


def local_server(
    deploy: DeploySpec,
    workdir: str,
    extra_args: tuple[str, ...] = (),
    drain_timeout_s: float = 0.0,
) -> TritonServer:
    """drain_timeout_s: how long requests in flight may go on once it is told to stop."""
    python = stub_python.probe(deploy.stub_python)
    stub_python.check_numpy(python)
    home = prepare_home(server_dir(workdir), python)
    return TritonServer.local(
        home,
        Path(deploy.repo_dir),
        endpoints(deploy),
        _log_path(workdir),
        deploy.startup_timeout_s,
        (*deploy.server_args, *extra_args),
        run_dir(workdir),
        drain_timeout_s,
    )


def container_command(spec: PipelineSpec, engine_dir: Path, tokenizer_dir: Path) -> list[str]:
    engine = EngineInfo.read(engine_dir)
    return container_argv(
        spec.build.trtllm.container_image,
        Path(spec.deploy.repo_dir),
        engine.world_size,
        endpoints(spec.deploy),
        spec.deploy.trtllm.shm_size,
        [engine_dir, tokenizer_dir],
    )


def container_server(deploy: DeploySpec, workdir: str, argv: list[str]) -> TritonServer | None:
    """The container as a TritonServer, or None when docker is not on PATH."""
    if shutil.which("docker") is None:
        return None
    return TritonServer(argv, endpoints(deploy), _log_path(workdir), deploy.startup_timeout_s)


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C, so `with server:` still stops
    the server (Python's default for them exits without unwinding)."""

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_stopped(server: TritonServer) -> None:
    """Block until interrupted (the caller's `with` then stops the server) or until the server
    exits by itself (StageError with its log tail)."""
    try:
        raise died_while_serving(server, server.process.wait())
    except KeyboardInterrupt:
        log.info("serve: stopping")


def died_while_serving(server: TritonServer, code: int) -> StageError:
    return StageError(
        server.failure(
            f"{exit_description(code)} while serving; its python models and engine are "
            f"stopped with it; start it again (`make serve`)"
        )
    )
