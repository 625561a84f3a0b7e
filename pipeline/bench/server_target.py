"""The served ensemble over gRPC streaming (grpc_streams): the "through Triton" side of the
overhead ratio. Either a server launched here on the repository the deploy stage wrote (the
calling stage runs deploy and passes its artifact in), and stopped after, or one already running
at bench.server_url.
"""

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from pipeline.bench import served_path
from pipeline.bench.client_processes import ClientProcesses, auto_client_processes
from pipeline.bench.grpc_streams import GrpcStreams, counting_streams
from pipeline.bench.load_generator import LoadGenerator
from pipeline.errors import StageError
from pipeline.profiler.sampler import Sampler
from pipeline.server.launch import server_dir
from pipeline.specs.pipeline import PipelineSpec

log = logging.getLogger(__name__)


class ServedLoad:
    """A served target's load generator: threads in this process on the target's own streams, or
    (see bench.client_processes) client processes each with the streams make_streams() gives;
    those are stopped when the target closes, before its streams."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._client_processes: list[ClientProcesses] = []

    def served_generator(
        self, bench, origin_s: float, make_streams, name: str = "server"
    ) -> LoadGenerator | ClientProcesses:
        num_processes = bench.client_processes or auto_client_processes(bench.concurrency)
        settings = {
            "mode": bench.mode,
            "concurrency": bench.concurrency,
            "request_rate": bench.request_rate,
            "temperature": bench.temperature,
            "seed": bench.seed,
            "origin_s": origin_s,
        }
        if num_processes == 1:
            return LoadGenerator(self, **settings)
        generator = ClientProcesses(num_processes, make_streams, settings, name=name)
        self._client_processes.append(generator)
        return generator

    def close(self) -> None:
        for generator in self._client_processes:
            generator.close()
        self._client_processes = []
        super().close()


class ServerTarget(ServedLoad, GrpcStreams):
    """The streams, and the load generator that sends them. Closing it stops the client
    processes and closes the streams kept open: the server stops only then."""

    def __init__(self, url: str, timeout_s: float, model: str = "ensemble") -> None:
        super().__init__(url, timeout_s, model)
        self.trace_file: Path | None = None  # the server's trace (bench.trace_rate), once stopped

    def generator(self, bench, origin_s: float) -> LoadGenerator | ClientProcesses:
        make_streams = functools.partial(
            counting_streams, self.url, self.client.timeout_s, self.client.model, self.count_tokens
        )
        return self.served_generator(bench, origin_s, make_streams)


def launches_server(bench, target: str) -> bool:
    """Whether measuring `target` (session.TARGETS) needs the deploy artifact: to start a server
    on its repository (the stage then deploys first and passes it to server_target), or for the
    OpenAI frontend's tokenizer and engine limits, even in front of bench.server_url."""
    if target in ("openai", "all"):
        return True
    return target in ("server", "both") and not bench.server_url


def _launch(spec: PipelineSpec, trace_file: Path | None, deployed: Path):
    """tritonserver on the deployed repository (the deploy artifact `deployed`): the wheel's
    server for backend=torch (tracing to trace_file, if any), the trtllm image where
    docker exists."""
    from pipeline.artifacts import Manifest
    from pipeline.server import launch

    if spec.backend.name == "torch":
        args = served_path.trace_args(trace_file, spec.bench.trace_rate) if trace_file else ()
        return launch.local_server(spec.deploy, spec.workdir, args)
    extra = Manifest.read(deployed).extra
    argv = launch.container_command(spec, Path(extra["engine_dir"]), Path(extra["tokenizer_dir"]))
    server = launch.container_server(spec.deploy, spec.workdir, argv)
    if server is None:
        raise StageError(
            f"bench: backend={spec.backend.name} is served from a container and "
            f"docker is not on PATH; start the server where it runs (`make serve`) "
            f"and set bench.server_url=<host>:<grpc port>, or bench.target=direct"
        )
    return server


@contextlib.contextmanager
def server_target(
    spec, sampler: Sampler | None = None, deployed: Path | None = None
) -> Iterator[ServerTarget]:
    """The target at bench.server_url, or a server launched on `deployed` (the deploy
    artifact; see launches_server) for the block's length."""
    bench = spec.bench
    if bench.server_url:
        if bench.trace_rate:
            log.warning("bench.trace_rate: only a server the bench launches is traced")
        target = ServerTarget(bench.server_url, bench.request_timeout_s)
        target.wait_ready(spec.deploy.startup_timeout_s)
        try:
            yield target
        finally:
            target.close()
        return
    trace_file = None
    if bench.trace_rate and spec.backend.name != "torch":
        log.warning("bench.trace_rate: the container's server is not traced (torch backend only)")
    elif bench.trace_rate:  # a fresh name: the trace's files are trace_file.0, .1, ...
        trace_file = server_dir(spec.workdir) / "traces" / f"trace-{time.time_ns()}.json"
        trace_file.parent.mkdir(parents=True, exist_ok=True)
    if deployed is None:
        raise StageError(
            "bench: no deployed repository to serve (the stage deploys before it measures); "
            "set bench.server_url=<host>:<grpc port> for a running server"
        )
    server = _launch(spec, trace_file, deployed)
    with contextlib.ExitStack() as stack:
        with sampler.phase("server:start") if sampler else contextlib.nullcontext():
            server.start()
            stack.callback(server.stop)
            if sampler is not None:  # from its first sample on, not counted as the bench's
                sampler.watch_process("server", server.process.pid)
            server.wait_ready()
        target = ServerTarget(server.endpoints.grpc_url, bench.request_timeout_s)
        target.trace_file = trace_file
        stack.callback(target.close)  # before server.stop
        target.wait_ready(spec.deploy.startup_timeout_s)
        yield target
