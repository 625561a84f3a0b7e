"""The int8 decode GEMV (int8_gemv) against dequantize + matmul in float32, and the int8 linear
that routes one-row steps to it. N and K leave partial tiles where marked; CPU runs them through
triton's interpreter (see conftest)."""

import pytest
import torch

from pipeline.engine import kernels
from pipeline.engine.quant.int8_linear import Int8WeightOnlyLinear

# bf16 output rounding (and the interpreter's round-toward-zero casts) dominate: ~3e-3 measured
REL_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
ROWS = [1, 2, 3]  # one row a program: any count works, decode sends one


def _rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float().cpu() - expected).norm() / expected.norm()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_rows", ROWS)
@pytest.mark.parametrize("n, k", [(200, 1088), (37, 520), (64, 512)])  # last: whole tiles
def test_w8a16_gemv_matches_dequantized_matmul(kernel_device, dtype, num_rows, n, k):
    pytest.importorskip("triton")
    from pipeline.engine.kernels import int8_gemv

    g = torch.Generator().manual_seed(num_rows * n)
    q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    scale = (torch.rand(n, generator=g) / 100 + 1e-3).to(dtype)
    x = torch.randn(num_rows, k, generator=g).to(dtype)
    expected = x.float() @ (q.float() * scale.float()[:, None]).T
    dev = kernel_device
    out = int8_gemv.w8a16_gemv(x.to(dev), q.to(dev), scale.to(dev))
    assert out.dtype == dtype and out.shape == (num_rows, n)
    assert _rel_err(out, expected) < REL_TOL[dtype]


@pytest.fixture
def kernels_anywhere(kernel_device, monkeypatch):
    """kernels.load returning the module on kernel_device, the interpreter's CPU included."""
    pytest.importorskip("triton")
    import importlib

    monkeypatch.setattr(
        kernels,
        "load",
        lambda name, device: importlib.import_module(f"pipeline.engine.kernels.{name}"),
    )
    return kernel_device


def test_int8_linear_names_the_gemv_and_matches_for_every_row_count(kernels_anywhere):
    dev = kernels_anywhere
    g = torch.Generator().manual_seed(0)
    q = torch.randint(-128, 128, (40, 256), generator=g, dtype=torch.int8)
    scale = torch.rand(40, generator=g) / 100 + 1e-3
    linear = Int8WeightOnlyLinear(q.to(dev), scale.to(dev), None, torch.bfloat16, [40])
    assert linear.kernel.startswith("triton w8a16 (gemv"), linear.kernel
    for num_rows in (1, 2, 33):  # gemv, then tl.dot (decode, prompt tiles)
        x = torch.randn(num_rows, 256, generator=g).to(torch.bfloat16)
        expected = x.float() @ (q.float() * scale.to(torch.bfloat16).float()[:, None]).T
        assert _rel_err(linear(x.to(dev)), expected) < 1e-2, num_rows
