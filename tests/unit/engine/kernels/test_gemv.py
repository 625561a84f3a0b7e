"""The decode GEMVs (int8_gemv, int4_gemv) against dequantize + matmul in float32, and the
linears that route one-row steps to them. N and K leave partial tiles where marked; CPU runs them
through triton's interpreter (see conftest)."""

import pytest
import torch

from pipeline.engine import kernels
from pipeline.engine.quant.int4_linear import Int4GroupwiseLinear
from pipeline.engine.quant.int8_linear import Int8WeightOnlyLinear
from pipeline.engine.quant.primitives import dequantize_groupwise, pack_int4_rows

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


def _int4_case(n: int, k: int, group: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, k // group, generator=g) / 10 + 1e-3
    prequant = torch.rand(k, generator=g) + 0.5
    return q, scale, prequant


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_rows", ROWS)
@pytest.mark.parametrize("with_prequant", [False, True])
@pytest.mark.parametrize("n, k, group", [(202, 512, 128), (38, 192, 64), (64, 256, 128)])
def test_w4a16_gemv_matches_dequantized_matmul(
    kernel_device, dtype, num_rows, with_prequant, n, k, group
):
    # n = 202, 38: the last tile of packed rows is partial
    pytest.importorskip("triton")
    from pipeline.engine.kernels import int4_gemv

    q, scale, prequant = _int4_case(n, k, group, seed=num_rows * n)
    x = torch.randn(num_rows, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    pre = prequant.to(dtype) if with_prequant else None
    x_in = x.float() * (pre.float() if with_prequant else 1.0)
    expected = x_in @ dequantize_groupwise(q, scale).T
    dev = kernel_device
    out = int4_gemv.w4a16_gemv(
        x.to(dev),
        pack_int4_rows(q).to(dev),
        int4_gemv.pack_scales(scale).to(dev),
        None if pre is None else pre.to(dev),
    )
    assert out.dtype == dtype and out.shape == (num_rows, n)
    assert _rel_err(out, expected) < REL_TOL[dtype]


def test_w4a16_gemv_takes_pairs_of_rows_and_whole_groups():
    pytest.importorskip("triton")
    from pipeline.engine.kernels import int4_gemv

    assert int4_gemv.supports(4096, 4096, 128)
    assert not int4_gemv.supports(4095, 4096, 128)  # rows come in pairs
    assert not int4_gemv.supports(4096, 4096, 48)  # no chunk width divides the group


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


def test_int4_linear_names_the_gemv_and_matches_for_every_row_count(kernels_anywhere):
    dev = kernels_anywhere
    q, scale, prequant = _int4_case(48, 256, 64, seed=1)
    linear = Int4GroupwiseLinear(
        q.to(dev), scale.to(dev), prequant.to(dev), None, torch.bfloat16, [48]
    )
    assert linear.kernel.startswith("triton w4a16 gemv"), linear.kernel
    g = torch.Generator().manual_seed(2)
    for num_rows in (1, 2, 80):  # gemv, then the packed mm or dequantize (device-dependent)
        x = torch.randn(num_rows, 256, generator=g).to(torch.bfloat16)
        x_in = x.float() * prequant.to(torch.bfloat16).float()
        expected = x_in @ dequantize_groupwise(q, scale).T
        assert _rel_err(linear(x.to(dev)), expected) < 1e-2, num_rows
