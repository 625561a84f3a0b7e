"""The container image backend=trtllm builds and serves in: present here, holding the right version.

No registry holds a Triton image with TensorRT-LLM 1.2.1 (docs/trtllm_reference.md, section 6.1):
LOCAL_IMAGE, which build.trtllm.container_image names by default, is built locally with upstream's
recipe (tensorrtllm_backend r26.04 docs/build.md: `make -C docker tritonrelease_build` in its
tensorrt_llm submodule; section 6.2). NGC's ready-made NGC_IMAGE holds TensorRT-LLM 1.1.0 and
serves with build.trtllm.trtllm_version=1.1.0. `make trtllm-image-check` (python -m
pipeline.trtllm.image [overrides]) says whether the configured image is here and holds
build.trtllm.trtllm_version; DOCKER=1 stages refuse an image that is neither here nor pullable
before starting it.
"""

import logging
import shutil
import subprocess
import sys

from pipeline.errors import PipelineError, StageError
from pipeline.trtllm.job_config import composed_config

log = logging.getLogger(__name__)

LOCAL_IMAGE = "llm-pipeline/tritonserver:25.12-trtllm-1.2.1"
LOCAL_IMAGE_TRTLLM_VERSION = "1.2.1"
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"
NGC_IMAGE_TRTLLM_VERSION = "1.1.0"
VERSION_PROBE = "import importlib.metadata as m; print(m.version('tensorrt_llm'))"
UPSTREAM_RECIPE = (
    "build it with upstream's recipe (tensorrtllm_backend r26.04 docs/build.md; in its "
    "tensorrt_llm submodule: `make -C docker tritonrelease_build CUDA_ARCHS='<sm>-real' "
    f"IMAGE_WITH_TAG={LOCAL_IMAGE}`, '90-real' for an H100; it compiles TensorRT-LLM from "
    "source, about 63 GB of disk, and upstream gives no build time)"
)
NGC_ALTERNATIVE = (
    f"use NGC's ready-made {NGC_IMAGE} (TensorRT-LLM {NGC_IMAGE_TRTLLM_VERSION}): "
    f"`docker pull {NGC_IMAGE}`, then set build.trtllm.container_image={NGC_IMAGE} "
    f"build.trtllm.trtllm_version={NGC_IMAGE_TRTLLM_VERSION} (build and serve then both run "
    f"{NGC_IMAGE_TRTLLM_VERSION}; deploy refuses engines built by another version)"
)


def how_to_get(version: str) -> str:
    """The ways to an image holding TensorRT-LLM `version`, each with the keys to set."""
    ways = [UPSTREAM_RECIPE] if version == LOCAL_IMAGE_TRTLLM_VERSION else []
    if version == NGC_IMAGE_TRTLLM_VERSION:
        ways.append(
            f"use NGC's {NGC_IMAGE}, which holds it: `docker pull {NGC_IMAGE}`, then set "
            f"build.trtllm.container_image={NGC_IMAGE}"
        )
    else:
        ways.append(NGC_ALTERNATIVE)
    ways.append(f"set build.trtllm.container_image to an image that holds TensorRT-LLM {version}")
    return "; or ".join(ways) + " (docs/trtllm_reference.md, section 6.2; docs/guide/trtllm.md)"


def _docker(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def is_registry_reference(image: str) -> bool:
    """True when the name carries a registry host (nvcr.io/..., localhost:5000/...): pullable."""
    first = image.split("/", 1)[0]
    return "/" in image and ("." in first or ":" in first or first == "localhost")


def check_docker(what: str) -> None:
    if shutil.which("docker") is None:
        raise StageError(
            f"{what} needs docker (+ the NVIDIA Container Toolkit to run on GPUs), which is not "
            f"on PATH; install it, or run on a machine with TensorRT-LLM installed"
        )
    info = _docker("info", "--format", "{{.ServerVersion}}")
    if info.returncode != 0:
        raise StageError(
            f"{what}: docker is installed but its daemon does not answer (`docker info` exited "
            f"{info.returncode}: {info.stderr.strip()[-300:]}); start it or fix its permissions"
        )


def _is_here(image: str) -> bool:
    return _docker("image", "inspect", image).returncode == 0


def check_runnable(image: str, trtllm_version: str, what: str) -> None:
    """`docker run image` can start (after check_docker): it is here or can be pulled."""
    if not _is_here(image) and not is_registry_reference(image):
        raise StageError(
            f"{what}: build.trtllm.container_image={image} is not present here and names no "
            f"registry to pull it from; " + how_to_get(trtllm_version)
        )


def image_trtllm_version(image: str) -> str:
    probe = _docker("run", "--rm", "--entrypoint", "python3", image, "-c", VERSION_PROBE)
    if probe.returncode != 0:
        raise StageError(
            f"{image}: cannot read its TensorRT-LLM version (python3 in the image exited "
            f"{probe.returncode}: {probe.stderr.strip()[-300:]}); is it a TensorRT-LLM image?"
        )
    return probe.stdout.strip().splitlines()[-1]


def check_image(image: str, trtllm_version: str) -> str:
    """The image's TensorRT-LLM version, which must equal trtllm_version (StageError if not)."""
    what = "the TensorRT-LLM image check"
    check_docker(what)
    if not _is_here(image):
        fetch = (
            f"`docker pull {image}` first"
            if is_registry_reference(image)
            else how_to_get(trtllm_version)
        )
        raise StageError(f"{what}: build.trtllm.container_image={image} is not here; {fetch}")
    found = image_trtllm_version(image)
    if found != trtllm_version:
        raise StageError(
            f"build.trtllm.container_image={image} holds TensorRT-LLM {found}, but "
            f"build.trtllm.trtllm_version={trtllm_version}, and engines only load in the "
            f"version that built them; " + how_to_get(trtllm_version)
        )
    return found


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(name)s] %(message)s")
    try:
        trtllm = composed_config("build", ["backend=trtllm", *argv])["build"]["trtllm"]
        found = check_image(trtllm["container_image"], trtllm["trtllm_version"])
    except PipelineError as exc:
        log.error("%s", exc)
        return 1
    log.info("%s holds TensorRT-LLM %s, as configured", trtllm["container_image"], found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
