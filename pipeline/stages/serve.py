"""serve: deploy, then run tritonserver on deploy.repo_dir until Ctrl-C (127.0.0.1 by default).

backend=torch: the tritonserver from the nvidia-pytriton wheel, on this machine.
backend=trtllm: build.trtllm.container_image with one MPI rank per engine
rank; run through docker when it is on PATH, otherwise the command is printed to run elsewhere.
Beside it, the OpenAI-compatible API (serve.openai; pipeline.openai_api). `serve: ready` is
printed once every port it names accepts connections. SIGTERM or Ctrl-C drains both (new requests
refused, those in flight given serve.drain_timeout_s; pipeline.server.drain), then stops the
frontend, then tritonserver.
serve.verify=full hashes every file of the engine and the repository again before the server
starts (pipeline.artifact_rehash); the default checks their stats (artifacts.verify_outputs).
"""

import logging
import shlex
import time
from pathlib import Path

from pipeline.artifact_rehash import rehash_outputs
from pipeline.errors import ConfigError, StageError
from pipeline.openai_api.server import serve_beside
from pipeline.server import drain, launch
from pipeline.server.ports import wait_accepting
from pipeline.server.triton_server import PORTS_TIMEOUT_S
from pipeline.specs.pipeline import PipelineSpec
from pipeline.specs.serve import VERIFY_MODES
from pipeline.stages import deploy

log = logging.getLogger(__name__)


def run(spec: PipelineSpec) -> Path:
    if spec.serve.verify not in VERIFY_MODES:
        raise ConfigError(
            f"serve: serve.verify={spec.serve.verify!r}; use one of {', '.join(VERIFY_MODES)}"
        )
    artifact = deploy.run(spec)
    facts = deploy.served_facts(artifact)
    if spec.serve.verify == "full":
        for artifact_dir in (Path(facts["engine_dir"]), artifact):
            rehash_outputs(artifact_dir)
    if facts["backend"] == "trtllm":
        argv = launch.container_command(
            spec, Path(facts["engine_dir"]), Path(facts["tokenizer_dir"])
        )
        server = launch.container_server(spec.deploy, spec.workdir, argv)
        if server is None:
            print(
                "serve: docker is not available here; on a GPU host with the NVIDIA Container "
                f"Toolkit run:\n{shlex.join(argv)}"
            )
            return artifact
    else:
        server = launch.local_server(
            spec.deploy, spec.workdir, drain_timeout_s=spec.serve.drain_timeout_s
        )
    start = time.perf_counter()
    with launch.signals_as_interrupt(), server:
        ends = server.endpoints
        with serve_beside(spec, facts, ends) as api:
            _check_listening(server, api)
            print(
                f"serve: ready in {time.perf_counter() - start:.1f} s; {spec.deploy.repo_dir} "
                f"({facts['backend']}) on http {ends.http_url}, grpc {ends.grpc_url}, metrics "
                f"{ends.metrics_url}; log {server.log_path}; Ctrl-C stops it",
                flush=True,
            )
            if api is not None:
                print(f"serve: OpenAI API on {api.url}/v1 (model {api.model_name})", flush=True)
            launch.serve_until_stopped(server)
            _drain(server, api, spec.serve.drain_timeout_s)
    return artifact


def _check_listening(server, api) -> None:
    """Every port the ready line names accepts connections before it is printed."""
    ends = server.endpoints
    ports = {"http": ends.http_port, "grpc": ends.grpc_port, "metrics": ends.metrics_port}
    refusing = wait_accepting(ends.host, ports, PORTS_TIMEOUT_S)
    if api is not None:
        spec = api.recipe.spec
        refusing += wait_accepting(spec.host, {"openai": spec.port}, PORTS_TIMEOUT_S)
    if server.process.poll() is not None:  # killed meanwhile: that is the news
        raise launch.died_while_serving(server, server.process.returncode)
    if refusing:
        raise StageError(f"serve: started, but {', '.join(refusing)} refuses connections")


def _drain(server, api, timeout_s: float) -> None:
    drain.begin(server, api)
    print(
        f"serve: stopping; new requests are refused, those in flight get up to {timeout_s:g} s "
        f"(serve.drain_timeout_s); Ctrl-C again stops at once",
        flush=True,
    )
    start = time.perf_counter()
    num_ended = drain.finish(server, api, timeout_s)
    how = f"{num_ended} OpenAI requests ended by the drain time" if num_ended else "drained"
    print(f"serve: {how} after {time.perf_counter() - start:.1f} s; stopping", flush=True)
