"""OpenAI Triton kernels for the CUDA path; `reference` holds their plain-PyTorch twins.

Kernel modules import triton at import time, so layers get them through `load`, which returns
None off CUDA or without triton (triton ships with CUDA builds of torch; CPU installs need not
have it):

    self.kernel = kernels.load("rmsnorm", device)  # None: plain PyTorch

Every kernel function takes and returns plain tensors, with shapes in its opening comment.
TRITON_INTERPRET=1 runs them on CPU tensors (slowly), which the tests use where triton exists.
"""

import contextlib
import importlib
import importlib.util
from types import ModuleType

import torch

_is_plain = False  # while a model without Triton kernels is built (plain_pytorch)


def is_available(device: torch.device | str) -> bool:
    """True when the Triton kernels run on `device`: a CUDA device, with triton importable, and
    no model is being built under plain_pytorch()."""
    return (
        not _is_plain
        and torch.device(device).type == "cuda"
        and importlib.util.find_spec("triton") is not None
    )


@contextlib.contextmanager
def plain_pytorch(is_plain: bool = True):
    """Layers built inside load no Triton kernels and run their plain-PyTorch ops on CUDA too
    (build.torch.triton_kernels=false)."""
    global _is_plain
    before, _is_plain = _is_plain, is_plain or _is_plain
    try:
        yield
    finally:
        _is_plain = before


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
