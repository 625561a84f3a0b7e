"""The int4 tensor-core kernel (int4_mma): its packed layout on CPU, through an emulation of the
PTX mma.m16n8k16 fragments written from the PTX ISA's fragment tables (not from pack's index
code), and the kernel itself on CUDA against dequantize + matmul in float32."""

import pytest
import torch

from pipeline.engine.kernels import int4_mma
from pipeline.engine.quant.primitives import dequantize_groupwise


def _weights(n: int, k: int, group: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8)
    # bf16-representable scales: the kernel keeps them in bf16
    scale = (torch.rand(n, k // group, generator=g) / 50 + 1e-3).bfloat16().float()
    return q, scale


def _unpack(words: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """pack's inverse, by its own index code: (q [N, K] int8, scale [N, K / group] float32)."""
    tiles, blocks = words.shape[:2]
    rows, cols, shifts = int4_mma._fragment_index()
    spread = words.to(torch.int64).reshape(tiles, blocks, 32, 4, 1).expand(-1, -1, -1, -1, 8)
    nibbles = (spread.reshape(tiles, blocks, -1) >> shifts) & 0xF
    u = torch.empty(tiles, blocks, 16, 64, dtype=torch.int64)
    u[:, :, rows, cols] = nibbles
    q = (u.permute(0, 2, 1, 3).reshape(tiles * 16, blocks * 64) - 8).to(torch.int8)
    pairs = scales.to(torch.int64) & 0xFFFFFFFF
    bits = torch.cat([pairs & 0xFFFF, pairs >> 16], dim=-1)  # [tiles, groups, 16]
    bits = torch.where(bits >= 2**15, bits - 2**16, bits).to(torch.int16)
    scale = bits.view(torch.bfloat16).float().permute(0, 2, 1).reshape(tiles * 16, -1)
    return q, scale


def _emulate(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, group: int):
    """What int4_mma.cu computes, lane by lane, with the PTX ISA's m16n8k16 .bf16 fragments:
    A a0..a3 = (row g, k 2t..2t+1), (g + 8, same), (g, +8), (g + 8, +8); B b0, b1 = (k 2t..2t+1,
    column g), (k + 8, column g); D d0..d3 = (row g, column 2t..2t+1), (g + 8, same); g = lane / 4,
    t = lane % 4. A lane's B words are its 16 activations x[16 t + 64 block ...] in order; scale
    word r of a (tile, group) holds rows r (low half) and r + 8 (high)."""
    num_rows, k = x.shape
    tiles, blocks = words.shape[:2]
    q = torch.zeros(tiles, blocks, 4, 16, 16)  # logical A per (tile, block, mma step)
    xs = torch.zeros(num_rows, blocks, 4, 16)  # logical B column per activation row
    for lane in range(32):
        g, t = divmod(lane, 4)
        for s in range(4):
            word = words[:, :, lane, s].to(torch.int64) & 0xFFFFFFFF
            for i, (row, kk) in enumerate(
                [(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]
            ):
                q[:, :, s, row, kk] = ((word >> (4 * i)) & 0xF).float() - 8
                q[:, :, s, row, kk + 1] = ((word >> (16 + 4 * i)) & 0xF).float() - 8
            for b, kk in enumerate([2 * t, 2 * t + 8]):  # B word 2 s + b: x at 16 t + 4 s + 2 b
                for h in range(2):
                    x_block = x.view(num_rows, blocks, 64)
                    xs[:, :, s, kk + h] = x_block[:, :, 16 * t + 4 * s + 2 * b + h]
    # D per (tile, block): sum over steps of A @ B; then scaled per group
    partial = torch.einsum("tbsrk,mbsk->tbrm", q, xs)  # [tiles, blocks, 16, rows]
    per_group = partial.reshape(tiles, k // group, group // 64, 16, num_rows).sum(2)
    pairs = scales.to(torch.int64) & 0xFFFFFFFF  # word r: bf16 scales of rows r, r + 8
    bits = torch.cat([pairs & 0xFFFF, pairs >> 16], dim=-1).to(torch.int32) << 16
    scale = bits.view(torch.float32)  # [tiles, groups, 16]
    return torch.einsum("tgrm,tgr->mtr", per_group, scale).reshape(num_rows, -1)


@pytest.mark.parametrize("n, k, group", [(32, 128, 64), (48, 256, 128), (16, 512, 256)])
def test_pack_unpack_round_trip(n, k, group):
    q, scale = _weights(n, k, group, seed=n + k)
    words, scales = int4_mma.pack(q, scale)
    assert words.shape == (n // 16, k // 64, 32, 4) and words.dtype == torch.int32
    assert scales.shape == (n // 16, k // group, 8) and scales.dtype == torch.int32
    q2, scale2 = _unpack(words, scales)
    assert torch.equal(q2, q)
    assert torch.equal(scale2, scale)


@pytest.mark.parametrize("num_rows", [1, 3])
@pytest.mark.parametrize("n, k, group", [(32, 128, 64), (48, 256, 128)])
def test_packed_layout_is_what_the_mma_fragments_compute(num_rows, n, k, group):
    q, scale = _weights(n, k, group, seed=7 * n + k)
    x = torch.randn(num_rows, k, generator=torch.Generator().manual_seed(k))
    words, scales = int4_mma.pack(q, scale)
    expected = x @ dequantize_groupwise(q, scale).T
    torch.testing.assert_close(_emulate(x, words, scales, group), expected, rtol=1e-4, atol=1e-4)


def test_fits_names_the_shape_it_refuses():
    assert int4_mma.fits(4096, 4096, 128) is None
    reason = int4_mma.fits(200, 4096, 128)
    assert "(200, 4096)" in reason and "out % 16" in reason
    assert int4_mma.fits(64, 4096, 32) is not None  # group 32: half a 64-k block


def test_every_row_count_has_configs_for_any_group_that_fit_in_shared_memory():
    for slices in int4_mma.SLICES:
        step_blocks = [kb for *_, kb in int4_mma.configs(slices)]
        assert 1 in step_blocks, slices  # group 64: one 64-k block a step
        for tiles, warps, nb, _ in int4_mma.configs(slices):
            assert warps * tiles * nb * 512 <= int4_mma.SHARED_MEMORY_BYTES


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("num_rows", [1, 2, 7, 8, 9, 33, 64])
@pytest.mark.parametrize("n, k, group", [(4096, 4096, 128), (96, 576, 64), (48, 1536, 128)])
def test_kernel_matches_dequantized_matmul(num_rows, n, k, group):
    if reason := int4_mma.unavailable():
        pytest.skip(reason)
    q, scale = _weights(n, k, group, seed=num_rows + n)
    x = torch.randn(num_rows, k, generator=torch.Generator().manual_seed(n)).bfloat16()
    words, scales = (t.cuda() for t in int4_mma.pack(q, scale))
    out = int4_mma.matmul(x.cuda(), words, scales, group)
    expected = x.float() @ dequantize_groupwise(q, scale).T
    assert out.shape == (num_rows, n) and out.dtype == torch.bfloat16
    err = ((out.float().cpu() - expected).norm() / expected.norm()).item()
    assert err < 1e-2, err  # bf16 output rounding: ~3e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("num_rows", [1, 12])
def test_kernel_applies_the_prequant_scale_as_the_rounded_product(num_rows):
    if reason := int4_mma.unavailable():
        pytest.skip(reason)
    n, k, group = 64, 512, 128
    q, scale = _weights(n, k, group, seed=num_rows)
    g = torch.Generator().manual_seed(k)
    x = torch.randn(num_rows, k, generator=g).bfloat16()
    prequant = (torch.rand(k, generator=g) + 0.5).bfloat16()
    words, scales = (t.cuda() for t in int4_mma.pack(q, scale))
    fused = int4_mma.matmul(x.cuda(), words, scales, group, prequant.cuda())
    apart = int4_mma.matmul((x * prequant).cuda(), words, scales, group)
    assert torch.equal(fused, apart)  # x * prequant rounds to bf16 once either way


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n, k, group", [(4096, 4096, 128), (96, 576, 64)])
def test_dequantize_gives_the_bf16_weight(n, k, group):
    if reason := int4_mma.unavailable():
        pytest.skip(reason)
    q, scale = _weights(n, k, group, seed=n - k)
    words, scales = (t.cuda() for t in int4_mma.pack(q, scale))
    w = int4_mma.dequantize(words, scales, group)
    assert torch.equal(w.cpu(), dequantize_groupwise(q, scale).bfloat16())
