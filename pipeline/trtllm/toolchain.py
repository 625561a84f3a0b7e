"""What TensorRT-LLM toolchain is installed here: trtllm-build, versions, and the GPU it builds for.

Detection only reads package metadata and asks torch for the GPU; it never imports tensorrt_llm
(slow, and it prints a banner).
"""

import importlib
import shutil
from dataclasses import dataclass
from importlib import metadata

from pipeline.specs.build import TrtllmBuildOptions

TENSORRT_DISTS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-libs")


@dataclass(frozen=True, slots=True)
class Toolchain:
    trtllm_version: str  # tensorrt_llm.__version__, what trtllm-build writes into config.json
    tensorrt_version: str
    gpu_name: str
    gpu_sm: int  # 89 = compute capability 8.9


def how_to_run(opts: TrtllmBuildOptions) -> str:
    return (
        f"run the stage inside a TensorRT-LLM {opts.trtllm_version} image instead: `make build "
        f"BACKEND=trtllm DOCKER=1` (docker run --gpus all {opts.container_image} with the repo "
        f"mounted at the same path; image: build.trtllm.container_image, checked by `make "
        f"trtllm-image-check`; needs docker + the NVIDIA Container Toolkit + a GPU); "
        f"docs/guide/trtllm.md documents it"
    )


def _dist_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _tensorrt_version() -> str | None:
    found = _dist_version(TENSORRT_DISTS)
    if found is not None:
        return found
    try:
        return importlib.import_module("tensorrt").__version__
    except ImportError:
        return None


def _cuda_gpu() -> tuple[str, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return torch.cuda.get_device_name(0), major * 10 + minor


def find_toolchain(opts: TrtllmBuildOptions) -> tuple[Toolchain | None, list[str]]:
    """The installed toolchain, or None and what is missing (each with how to get it)."""
    trtllm_version = _dist_version(("tensorrt_llm",))
    if shutil.which("trtllm-build") is None or trtllm_version is None:
        missing = [
            what
            for what, absent in (
                ("no `trtllm-build` on PATH", shutil.which("trtllm-build") is None),
                ("the tensorrt_llm package is not installed", trtllm_version is None),
            )
            if absent
        ]
        return None, [
            f"backend=trtllm needs TensorRT-LLM {opts.trtllm_version} (trtllm-build + "
            f"tensorrt_llm), which is not installed here ({'; '.join(missing)}); "
            f"{how_to_run(opts)}"
        ]
    problems = []
    if trtllm_version != opts.trtllm_version:
        problems.append(
            f"build.trtllm.trtllm_version={opts.trtllm_version}: TensorRT-LLM "
            f"{trtllm_version} is installed, and engines only load in the version that "
            f"built them; use an image with {opts.trtllm_version} "
            f"(build.trtllm.container_image) or set build.trtllm.trtllm_version="
            f"{trtllm_version} if that is what you serve with"
        )
    tensorrt_version = _tensorrt_version()
    if tensorrt_version is None:
        problems.append(
            f"TensorRT (the tensorrt package) is not installed next to TensorRT-LLM "
            f"{trtllm_version}; {how_to_run(opts)}"
        )
    gpu = _cuda_gpu()
    if gpu is None:
        problems.append(
            "no CUDA GPU is visible (trtllm-build needs one); in docker pass "
            "--gpus all, check nvidia-smi and CUDA_VISIBLE_DEVICES"
        )
    if problems:
        return None, problems
    return Toolchain(trtllm_version, tensorrt_version, gpu[0], gpu[1]), []


def gpu_mismatch(toolchain: Toolchain, hardware: str, target_sm: int | None) -> list[str]:
    """A named hardware= target must be the GPU we build on: TensorRT plans are arch-specific."""
    if target_sm is None or target_sm == toolchain.gpu_sm:
        return []
    return [
        f"hardware={hardware}: targets SM {target_sm}, but this machine builds on "
        f"{toolchain.gpu_name} (SM {toolchain.gpu_sm}) and TensorRT engines only run on the "
        f"architecture they were built on; build on the target GPU or set hardware=auto"
    ]
