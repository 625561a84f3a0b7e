"""Kernel tests run on CUDA, or on CPU through triton's interpreter (TRITON_INTERPRET=1 with
triton importable); otherwise they skip."""

import importlib.util
import os

import pytest
import torch

from pipeline.engine import kernels


@pytest.fixture(scope="session")
def kernel_device() -> torch.device:
    if torch.cuda.is_available() and kernels.is_available("cuda"):
        return torch.device("cuda")
    has_triton = importlib.util.find_spec("triton") is not None
    if os.environ.get("TRITON_INTERPRET") == "1" and has_triton:
        return torch.device("cpu")
    pytest.skip("needs CUDA + triton (or TRITON_INTERPRET=1 with triton installed)")


@pytest.fixture(scope="session")
def assert_close(kernel_device):
    """torch.testing.assert_close allowing two roundings in 16-bit dtypes (fp16 by default
    allows one); bf16 gets 2^-5 under the interpreter, which rounds fp32 -> bf16 toward zero at
    each cast (the GPU rounds to nearest even)."""

    def check(actual: torch.Tensor, expected: torch.Tensor) -> None:
        tolerances = {}
        if actual.dtype == torch.float16:
            tolerances = {"rtol": 2**-9, "atol": 2**-10}
        if actual.dtype == torch.bfloat16:
            # rotary sums cancel: one bf16 ulp of a large term is a large relative error
            tolerances = {"rtol": 2**-5, "atol": 2**-6}
        torch.testing.assert_close(actual, expected, **tolerances)

    return check


@pytest.fixture(autouse=True)
def few_gemv_configs(monkeypatch):
    """CUDA: the decode GEMV autotunes over two configs (the smallest and largest tile), not
    all of them: results do not depend on the pick, and compiling every config for every test
    shape and row bucket takes minutes. (scripts/bench_linear_quant.py checks the real pick.)"""
    if importlib.util.find_spec("triton") is None:
        return
    from pipeline.engine.kernels import int8_gemv

    configs = [int8_gemv.CONFIGS[0], int8_gemv.CONFIGS[-1]]
    monkeypatch.setattr(int8_gemv._tuned, "configs", configs)
