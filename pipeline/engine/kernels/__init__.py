"""OpenAI Triton kernels for the CUDA path; `reference` holds their plain-PyTorch twins.

Kernel modules import triton at import time, so import them only after `is_available(device)`
is True (triton ships with CUDA builds of torch; CPU installs need not have it):

    if kernels.is_available(device):
        from pipeline.engine.kernels import rmsnorm

Every kernel function takes and returns plain tensors, with shapes in its opening comment.
TRITON_INTERPRET=1 runs them on CPU tensors (slowly), which the tests use where triton exists.
"""

import importlib.util
import os

import torch


def is_available(device: torch.device | str) -> bool:
    """True when the kernels can run on `device`: CUDA (or triton's CPU interpreter) + triton."""
    if importlib.util.find_spec("triton") is None:
        return False
    is_interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return torch.device(device).type == "cuda" or is_interpreted
