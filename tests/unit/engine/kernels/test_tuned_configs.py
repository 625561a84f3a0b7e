"""A tuned config reaches the kernel launch (tuned_configs.lookup in each wrapper), and the
kernel's outputs stay those of its reference under it."""

import pytest
import torch

from pipeline.engine.kernels import reference
from pipeline.engine.kernels.tuned_configs import TUNED

pytestmark = pytest.mark.gpu


class Spy:
    """Stands in for a @triton.jit kernel: records each launch's grid and keywords."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        launcher = self.kernel[grid]

        def launch(*args, **kwargs):
            self.launches.append((grid, kwargs))
            return launcher(*args, **kwargs)

        return launch


def spy(monkeypatch, module, name: str) -> Spy:
    recorder = Spy(getattr(module, name))
    monkeypatch.setattr(module, name, recorder)
    return recorder


def test_rmsnorm_and_silu_take_the_tuned_warps_and_block(kernel_device, assert_close, monkeypatch):
    from pipeline.engine.kernels import activation, rmsnorm

    torch.manual_seed(0)
    x = torch.randn(5, 576, device=kernel_device)
    weight = torch.rand(576, device=kernel_device) + 0.5
    norm = spy(monkeypatch, rmsnorm, "_rmsnorm_kernel")
    with TUNED.trying("rmsnorm", ("float32", 576, 8), {"num_warps": 2}):
        assert_close(rmsnorm.rmsnorm(x, weight, 1e-5), reference.rmsnorm(x, weight, 1e-5))
    assert norm.launches[-1][1]["num_warps"] == 2
    y = torch.randn(5, 2 * 1536, device=kernel_device)
    silu = spy(monkeypatch, activation, "_silu_and_mul_kernel")
    with TUNED.trying("silu_and_mul", ("float32", 1536, 8), {"BLOCK": 256, "num_warps": 1}):
        assert_close(activation.silu_and_mul(y), reference.silu_and_mul(y))
    grid, kwargs = silu.launches[-1]
    assert grid == (5, 6) and kwargs["BLOCK"] == 256 and kwargs["num_warps"] == 1
    activation.silu_and_mul(y)  # outside: the constant again
    assert silu.launches[-1][1]["BLOCK"] == 1024


def test_paged_decode_takes_the_tuned_split_count(kernel_device, monkeypatch):
    from pipeline.engine.kernels import paged_attention
    from tests.unit.engine.kernels.test_kernels import paged_cache

    context_lens = [300, 17]
    k_cache, v_cache, tables = paged_cache(kernel_device, torch.float32, context_lens)
    q = torch.randn(2, 9, 64, device=kernel_device)
    lens = torch.tensor(context_lens, dtype=torch.int32, device=kernel_device)
    args = (q, k_cache, v_cache, tables, lens, 0.125, None)
    decode = spy(monkeypatch, paged_attention, "_decode_kernel")
    shape = ("float32", "float32", 9, 3, 64, 16, 2)
    for splits in (1, 3):
        with TUNED.trying("paged_decode_attention", shape, {"num_splits": splits, "num_warps": 2}):
            out = paged_attention.paged_decode_attention(*args)
        assert decode.launches[-1][0] == (2, 3, splits)
        ref = reference.paged_decode_attention(*args)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_varlen_takes_the_tuned_tiles(kernel_device, monkeypatch):
    from pipeline.engine.kernels import varlen_attention
    from tests.unit.engine.kernels.test_kernels import paged_cache

    query_lens, context_lens = [5, 1, 30], [5, 70, 47]
    k_cache, v_cache, tables = paged_cache(kernel_device, torch.float32, context_lens)
    q = torch.randn(sum(query_lens), 9, 64, device=kernel_device)
    starts = torch.tensor([0, *query_lens], device=kernel_device).cumsum(0).int()
    lens = torch.tensor(context_lens, dtype=torch.int32, device=kernel_device)
    args = (q, k_cache, v_cache, tables, starts, lens, 0.1)
    kernel = spy(monkeypatch, varlen_attention, "_varlen_attention_kernel")
    shape = ("float32", "float32", 9, 3, 64, 16, 64)
    with TUNED.trying("varlen_attention", shape, {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 2}):
        out = varlen_attention.varlen_attention(*args)
    grid, kwargs = kernel.launches[-1]
    assert grid == (36 // 5 + 3, 3)  # BLOCK_Q = 16 // 3 tokens a tile
    assert kwargs["BLOCK_M"] == 16 and kwargs["BLOCK_N"] == 32 and kwargs["BLOCK_Q"] == 5
    torch.testing.assert_close(out, reference.varlen_attention(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "num_rows, kernel, config",
    [
        (1, "int8_gemv", {"BLOCK_N": 8, "BLOCK_K": 128, "num_warps": 1}),
        (5, "int8_matmul_decode", {"BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 4, "num_warps": 4}),
        (130, "int8_matmul_prompt", {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}),
    ],
)
def test_int8_linears_take_the_tuned_tiles(kernel_device, monkeypatch, num_rows, kernel, config):
    from pipeline.engine.kernels import int8_gemv, int8_matmul

    g = torch.Generator().manual_seed(0)
    n, k = 200, 1088
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) / 100 + 1e-3
    x = torch.randn(num_rows, k, generator=g)
    expected = x @ (q.float() * scale[:, None]).T
    x, q = x.to(kernel_device, torch.bfloat16), q.to(kernel_device)
    module, name = (
        (int8_gemv, "_w8a16_gemv_kernel") if num_rows == 1 else (int8_matmul, "_w8a16_kernel")
    )
    recorder = spy(monkeypatch, module, name)
    shape = ("bfloat16", n, k, 16) if kernel == "int8_matmul_decode" else ("bfloat16", n, k)
    with TUNED.trying(kernel, shape, config):
        out = int8_matmul.w8a16_matmul(x, q, scale.to(kernel_device, torch.bfloat16))
    kwargs = recorder.launches[-1][1]
    assert {key: kwargs[key] for key in config if key != "BLOCK_M"} == {
        key: v for key, v in config.items() if key != "BLOCK_M"
    }
    if "BLOCK_M" in config:  # a prompt tile's rows come from the config too
        assert kwargs["BLOCK_M"] == config["BLOCK_M"]
    rel = (out.float().cpu() - expected).norm() / expected.norm()
    assert rel < 1e-2, rel
