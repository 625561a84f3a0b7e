"""serve: deploy, then run tritonserver on deploy.repo_dir until Ctrl-C (127.0.0.1 by default).

backend=torch: the tritonserver from the nvidia-pytriton wheel, on this machine.
backend=trtllm: the NGC container (build.trtllm.container_image) with one MPI rank per engine
rank; run through docker when it is on PATH, otherwise the command is printed to run elsewhere.
Beside it, the OpenAI-compatible API (serve.openai; pipeline.openai_api), stopped first.
serve.verify=full hashes every file of the engine and the repository again before the server
starts (pipeline.artifact_rehash); the default checks their stats (artifacts.verify_outputs).
"""

import logging
import shlex
import time
from pathlib import Path

from pipeline.artifact_rehash import rehash_outputs
from pipeline.errors import ConfigError
from pipeline.openai_api.server import serve_beside
from pipeline.server import launch
from pipeline.specs.serve import VERIFY_MODES
from pipeline.stages import deploy

log = logging.getLogger(__name__)


def run(spec) -> Path:
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
        server = launch.local_server(spec.deploy, spec.workdir)
    start = time.perf_counter()
    with launch.signals_as_interrupt(), server:
        ends = server.endpoints
        print(
            f"serve: ready in {time.perf_counter() - start:.1f} s; {spec.deploy.repo_dir} "
            f"({facts['backend']}) on http {ends.http_url}, grpc {ends.grpc_url}, metrics "
            f"{ends.metrics_url}; log {server.log_path}; Ctrl-C stops it",
            flush=True,
        )
        with serve_beside(spec, facts, ends) as api:
            if api is not None:
                print(f"serve: OpenAI API on {api.url}/v1 (model {api.model_name})")
            launch.serve_until_stopped(server)
    return artifact
