"""What a tuned kernel launch config holds for: the GPU, its driver, the CUDA, Triton and torch
versions (the environment), and the kernel's own source. Read without importing triton's
kernels, so the CPU side of a build can name them."""

import functools
import hashlib
import importlib.metadata
from pathlib import Path

import torch

KERNEL_DIR = Path(__file__).resolve().parent
# tunable kernel -> the source files its compiled code comes from
KERNEL_SOURCES = {
    "int8_gemv": ("int8_gemv.py",),
    "int8_matmul_decode": ("int8_matmul.py", "dot_operands.py"),
    "int8_matmul_prompt": ("int8_matmul.py", "dot_operands.py"),
    "paged_decode_attention": ("paged_attention.py", "dot_operands.py"),
    "varlen_attention": ("varlen_attention.py", "dot_operands.py"),
    "rmsnorm": ("rmsnorm.py", "fp8_quant.py"),
    "silu_and_mul": ("activation.py", "fp8_quant.py"),
    "rotary_store_kv": ("rotary_kv_store.py", "fp8_quant.py"),
}
ENVIRONMENT_KEYS = ("gpu", "driver", "cuda", "triton", "torch")


def source_hash(kernel: str) -> str:
    """sha256 of the kernel's source files: an edit to them invalidates its tuned configs."""
    digest = hashlib.sha256()
    for name in KERNEL_SOURCES[kernel]:
        digest.update(name.encode() + b"\0" + (KERNEL_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML (no driver, a container without it)
        return "unknown"


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def environment(device_index: int = 0) -> dict[str, str]:
    """The environment key of tuned configs on this host's GPU `device_index`."""
    has_gpu = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name(device_index) if has_gpu else "none",
        "driver": _driver_version() if has_gpu else "none",
        "cuda": torch.version.cuda or "none",
        "triton": _package_version("triton"),
        "torch": torch.__version__,
    }


def differences(recorded: dict, here: dict) -> list[str]:
    """'key: recorded -> here' for every environment key that differs."""
    return [
        f"{key}: {recorded.get(key)!r} -> {here.get(key)!r}"
        for key in ENVIRONMENT_KEYS
        if recorded.get(key) != here.get(key)
    ]
