"""The served ensemble over gRPC streaming (pipeline.client.GrpcClient): the "through Triton"
side of the overhead ratio. Either a server this stage launches on the deployed repository (and
stops), or one already running at bench.server_url.

Token counting: each response's sequence_length output (our ensemble's: a response carries
several tokens when the server coalesces a stream that fell behind). A server without that output
(an upstream ensemble) gets one token per response with text, as one response per engine step.
Synthetic requests send end_id=-1 (as trtllm-bench's --eos_id -1) to run to exactly max_tokens.
"""

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from pipeline.bench import served_path
from pipeline.bench.client_processes import ClientProcesses, auto_client_processes
from pipeline.bench.load_generator import LoadGenerator
from pipeline.bench.target import Chunk
from pipeline.bench.workload import BenchRequest
from pipeline.errors import StageError
from pipeline.profiler.sampler import Sampler
from pipeline.server.launch import server_dir

log = logging.getLogger(__name__)
NO_END_ID = -1


class ServerTarget:
    name = "server"

    def __init__(self, url: str, timeout_s: float, model: str = "ensemble") -> None:
        from pipeline.client import GrpcClient

        self.url = url
        # the load generator's threads keep their streams open between requests (close() them)
        self.client = GrpcClient(url, model=model, timeout_s=timeout_s, keep_streams=True)
        self.count_tokens = False  # set by wait_ready, from the model's outputs
        self.trace_file: Path | None = None  # the server's trace (bench.trace_rate), once stopped
        self._generators: list[ClientProcesses] = []

    def wait_ready(self, timeout_s: float) -> None:
        from pipeline.client.grpc_client import COUNT_OUTPUT

        self.client.wait_ready(timeout_s)
        self.count_tokens = COUNT_OUTPUT in self.client.output_names()

    def close(self) -> None:
        """Stop the client processes and close the streams kept open: the server stops only
        then."""
        for generator in self._generators:
            generator.close()
        self._generators = []
        self.client.close()

    def generator(self, bench, origin_s: float) -> LoadGenerator | ClientProcesses:
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
        generator = ClientProcesses(
            num_processes,
            self.url,
            self.client.model,
            self.client.timeout_s,
            self.count_tokens,
            settings,
        )
        self._generators.append(generator)
        return generator

    def stream(self, request: BenchRequest, temperature: float, seed: int) -> Iterator[Chunk]:
        from pipeline.client import GenerateRequest

        generate = GenerateRequest(
            request.prompt,
            max_tokens=request.max_tokens,
            temperature=temperature,
            seed=seed if temperature > 0 else None,
            end_id=NO_END_ID if request.ignore_eos else None,
        )
        for response in self.client.responses(
            generate.arrays(stream=True),
            count_tokens=self.count_tokens,
            request_id=request.request_id,  # joins the record with the server's trace
        ):
            if self.count_tokens:
                yield Chunk(response.num_tokens)
            elif response.text is not None:
                yield Chunk(1 if response.text else 0)


def _launch(spec, trace_file: Path | None):
    """tritonserver on the deployed repository (deploy runs first when out of date): the wheel's
    server for backend=torch (tracing to trace_file, if any), the NGC container for trtllm where
    docker exists."""
    from pipeline.artifacts import Manifest
    from pipeline.server import launch
    from pipeline.stages import deploy

    artifact = deploy.run(spec)
    if spec.backend.name == "torch":
        args = served_path.trace_args(trace_file, spec.bench.trace_rate) if trace_file else ()
        return launch.local_server(spec.deploy, spec.workdir, args)
    extra = Manifest.read(artifact).extra
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
def server_target(spec, sampler: Sampler | None = None) -> Iterator[ServerTarget]:
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
    server = _launch(spec, trace_file)
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
