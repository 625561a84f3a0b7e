"""OpenAI Triton kernels for the CUDA path; `reference` holds their plain-PyTorch twins.

Kernel modules import triton at import time, so layers get them through `load`, which returns
None off CUDA or without triton (triton ships with CUDA builds of torch; CPU installs need not
have it):

    self.kernel = kernels.load("rmsnorm", device)  # None: plain PyTorch

Every kernel function takes and returns plain tensors, with shapes in its opening comment.
TRITON_INTERPRET=1 runs them on CPU tensors (slowly), which the tests use where triton exists.
"""

import importlib
import importlib.util
import os
from types import ModuleType

import torch

# "off": every layer runs its plain-PyTorch ops on CUDA too (the study's unfused mode; an
# engine's worker ranks inherit the environment it starts them in)
KERNELS_ENV = "PIPELINE_TRITON_KERNELS"


def is_available(device: torch.device | str) -> bool:
    """True when the Triton kernels run on `device`: a CUDA device, with triton importable, and
    PIPELINE_TRITON_KERNELS not "off"."""
    return (
        torch.device(device).type == "cuda"
        and importlib.util.find_spec("triton") is not None
        and os.environ.get(KERNELS_ENV) != "off"
    )


def load(name: str, device: torch.device | str) -> ModuleType | None:
    """Kernel module `name` (rmsnorm, activation, rotary_kv_store, paged_attention,
    varlen_attention, int8_matmul, fp8_quant) when the kernels run on `device`; None: plain
    PyTorch."""
    if not is_available(device):
        return None
    return importlib.import_module(f"pipeline.engine.kernels.{name}")


def drop_triton_kernels(model: torch.nn.Module) -> None:
    """Layers fall back to their plain-PyTorch ops, which inductor fuses itself: our Triton
    kernels inside a compiled graph crashed inductor's autotuning (illegal address, H100)."""
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, ModuleType):
                setattr(module, name, None)
