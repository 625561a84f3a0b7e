"""Each Triton kernel against its PyTorch twin in pipeline/engine/kernels/reference.py."""

import pytest
import torch

from pipeline.engine.kernels import reference

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_and_fused_residual_add_match_reference(kernel_device, assert_close, dtype):
    from pipeline.engine.kernels import rmsnorm

    torch.manual_seed(0)
    x, res = (torch.randn(7, 576, device=kernel_device).to(dtype) for _ in range(2))
    weight = (torch.rand(576, device=kernel_device) + 0.5).to(dtype)
    # within a rounding step: the kernel reduces in another order
    assert_close(rmsnorm.rmsnorm(x, weight, 1e-5), reference.rmsnorm(x, weight, 1e-5))
    out, summed = rmsnorm.add_rmsnorm(x, res, weight, 1e-5)
    ref_out, ref_summed = reference.add_rmsnorm(x, res, weight, 1e-5)
    assert_close(summed, ref_summed)
    assert_close(out, ref_out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_matches_reference(kernel_device, assert_close, dtype):
    from pipeline.engine.kernels import activation

    torch.manual_seed(0)
    x = (torch.randn(5, 2 * 1536, device=kernel_device) * 3).to(dtype)
    assert_close(activation.silu_and_mul(x), reference.silu_and_mul(x))


def assert_same_fp8(actual: torch.Tensor, expected: torch.Tensor, max_moved: float = 0.01) -> None:
    """fp8 codes equal but for a few one-step moves (the kernel's last-bit rounding of the
    16-bit value it quantizes)."""
    assert actual.dtype == expected.dtype == torch.float8_e4m3fn
    a, e = actual.float(), expected.float()
    torch.testing.assert_close(a, e, rtol=2**-3, atol=2**-9)  # one e4m3 step
    assert (a != e).float().mean() < max_moved


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp8_outputs_of_norm_and_swiglu_are_the_quantized_reference(kernel_device, dtype):
    from pipeline.engine.kernels import activation, rmsnorm
    from pipeline.engine.kernels.reference import quantize_fp8

    torch.manual_seed(0)
    scale = torch.tensor(0.01, device=kernel_device)  # some values saturate at +-448
    x, res = (torch.randn(7, 576, device=kernel_device).to(dtype) for _ in range(2))
    weight = (torch.rand(576, device=kernel_device) + 0.5).to(dtype)
    assert_same_fp8(
        rmsnorm.rmsnorm(x, weight, 1e-5, scale),
        quantize_fp8(reference.rmsnorm(x, weight, 1e-5), scale),
    )
    out, summed = rmsnorm.add_rmsnorm(x, res, weight, 1e-5, scale)
    ref_out, ref_summed = reference.add_rmsnorm(x, res, weight, 1e-5)
    assert summed.dtype == dtype and torch.equal(summed, ref_summed)
    assert_same_fp8(out, quantize_fp8(ref_out, scale))
    gate_up = (torch.randn(5, 2 * 1536, device=kernel_device) * 3).to(dtype)
    assert_same_fp8(
        activation.silu_and_mul(gate_up, scale),
        quantize_fp8(reference.silu_and_mul(gate_up), scale),
    )


@pytest.mark.parametrize("with_prequant", [False, True])
def test_fp8_quantize_kernel_matches_primitive(kernel_device, with_prequant):
    from pipeline.engine.kernels import fp8_quant
    from pipeline.engine.kernels.reference import quantize_fp8

    torch.manual_seed(0)
    x = (torch.randn(9, 3000, device=kernel_device) * 4).to(torch.bfloat16)
    prequant = (torch.rand(3000, device=kernel_device) + 0.5).to(torch.bfloat16)
    prequant = prequant if with_prequant else None
    scale = torch.tensor(0.02, device=kernel_device)
    assert_same_fp8(fp8_quant.quantize_fp8(x, scale, prequant), quantize_fp8(x, scale, prequant))


def rotary_tables(kernel_device, dtype, head_dim: int, max_pos: int = 300):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(max_pos).float(), inv_freq).repeat(1, 2)
    return tuple(t.to(kernel_device, dtype) for t in (angles.cos(), angles.sin()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 80])
def test_rotary_store_kv_matches_rotary_then_store(kernel_device, assert_close, dtype, head_dim):
    from pipeline.engine.kernels import rotary_kv_store

    torch.manual_seed(0)
    cos, sin = rotary_tables(kernel_device, dtype, head_dim)
    positions = torch.tensor([0, 5, 299, 17, 3], device=kernel_device)
    slots = torch.tensor([9, 0, 31, -1, 14], device=kernel_device)  # -1: a padding row
    q = torch.randn(5, 9, head_dim, device=kernel_device).to(dtype)
    k, v = (torch.randn(5, 3, head_dim, device=kernel_device).to(dtype) for _ in range(2))
    k_cache = torch.zeros(4, 8, 3, head_dim, dtype=dtype, device=kernel_device)
    v_cache = torch.zeros_like(k_cache)
    q_rot = rotary_kv_store.rotary_store_kv(positions, q, k, v, cos, sin, k_cache, v_cache, slots)
    q_ref, k_ref = reference.rotary_neox(positions, q, k, cos, sin)
    assert_close(q_rot, q_ref)
    stored = slots >= 0
    flat_k, flat_v = k_cache.view(-1, 3, head_dim), v_cache.view(-1, 3, head_dim)
    assert_close(flat_k[slots[stored]], k_ref[stored])
    assert torch.equal(flat_v[slots[stored]], v[stored])
    untouched = torch.ones(32, dtype=torch.bool, device=kernel_device)
    untouched[slots[stored]] = False
    assert not flat_k[untouched].any() and not flat_v[untouched].any()  # padding row: no write


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotary_store_kv_writes_fp8_codes_into_an_fp8_cache(kernel_device, assert_close, dtype):
    from pipeline.engine.kernels import rotary_kv_store
    from pipeline.engine.kernels.reference import quantize_fp8

    torch.manual_seed(0)
    cos, sin = rotary_tables(kernel_device, dtype, 64)
    positions = torch.tensor([0, 5, 299, 17], device=kernel_device)
    slots = torch.tensor([9, 0, 31, 14], device=kernel_device)
    q = torch.randn(4, 9, 64, device=kernel_device).to(dtype)
    k, v = (torch.randn(4, 3, 64, device=kernel_device).to(dtype) * 4 for _ in range(2))
    k_cache = torch.zeros(4, 8, 3, 64, dtype=torch.float8_e4m3fn, device=kernel_device)
    v_cache = torch.zeros_like(k_cache)
    scale = 0.02  # |K| up to ~16: the tails saturate at 448 codes
    q_rot = rotary_kv_store.rotary_store_kv(
        positions, q, k, v, cos, sin, k_cache, v_cache, slots, scale
    )
    q_ref, k_ref = reference.rotary_neox(positions, q, k, cos, sin)
    assert_close(q_rot, q_ref)
    flat_k, flat_v = k_cache.view(-1, 3, 64), v_cache.view(-1, 3, 64)
    # rotated k: 16-bit rotary sums differ by an ulp now and then (see assert_close), and each
    # such difference can move a code (H100, bf16: 1.04% of them)
    assert_same_fp8(flat_k[slots], quantize_fp8(k_ref, scale), max_moved=0.03)
    assert_same_fp8(flat_v[slots], quantize_fp8(v, scale))


def paged_cache(
    kernel_device,
    dtype,
    context_lens: list[int],
    block_size: int = 16,
    num_kv_heads: int = 3,
    head_dim: int = 64,
    kv_scale: float | None = None,
):
    """A cache with shuffled block ownership and random K/V in each sequence's slots (fp8 codes
    of K/V / kv_scale when set)."""
    torch.manual_seed(0)
    per_seq = [-(-n // block_size) for n in context_lens]
    num_blocks = sum(per_seq) + 2
    order = torch.randperm(num_blocks).tolist()
    tables = torch.zeros(len(context_lens), max(per_seq) + 1, dtype=torch.int32)
    cache_dtype = dtype if kv_scale is None else torch.float8_e4m3fn
    k_cache = torch.zeros(
        num_blocks, block_size, num_kv_heads, head_dim, dtype=cache_dtype, device=kernel_device
    )
    v_cache = torch.zeros_like(k_cache)
    for b, n in enumerate(context_lens):
        blocks = [order.pop() for _ in range(per_seq[b])]
        tables[b, : len(blocks)] = torch.tensor(blocks)
        slots = torch.tensor(
            [blocks[p // block_size] * block_size + p % block_size for p in range(n)],
            device=kernel_device,
        )
        k, v = (
            torch.randn(n, num_kv_heads, head_dim, device=kernel_device).to(dtype) for _ in range(2)
        )
        reference.store_kv(k, v, k_cache, v_cache, slots, kv_scale)
    return k_cache, v_cache, tables.to(kernel_device)


@pytest.mark.parametrize("kv_scale", [None, 0.02], ids=["cache-dtype", "fp8-cache"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "context_lens",
    [[1, 16, 17, 70], [300], [1 + (37 * i) % 90 for i in range(48)]],
    ids=["batch", "one-long", "one-split"],
)
def test_paged_decode_attention_matches_reference(kernel_device, dtype, context_lens, kv_scale):
    from pipeline.engine.kernels import paged_attention

    # one-split: 48 sequences x 3 kv heads fill the GPU: one program a head, no merge kernel
    max_blocks = -(-max(context_lens) // 16) + 1  # paged_cache's table width
    num_splits = paged_attention.num_splits_for(len(context_lens), 3, max_blocks)
    assert (num_splits == 1) == (len(context_lens) == 48)
    k_cache, v_cache, tables = paged_cache(kernel_device, dtype, context_lens, kv_scale=kv_scale)
    q = torch.randn(len(context_lens), 9, 64, device=kernel_device).to(dtype)  # GQA: 9 / 3
    lens = torch.tensor(context_lens, dtype=torch.int32, device=kernel_device)
    args = (q, k_cache, v_cache, tables, lens, 0.125, kv_scale)
    out = paged_attention.paged_decode_attention(*args)
    ref = reference.paged_decode_attention(*args)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


def test_paged_decode_split_count_fills_the_gpu_but_not_past_the_blocks(kernel_device):
    from pipeline.engine.kernels.paged_attention import num_splits_for

    assert num_splits_for(batch=1, num_kv_heads=8, max_blocks=64) == 33
    assert num_splits_for(batch=1, num_kv_heads=8, max_blocks=4) == 4
    assert num_splits_for(batch=256, num_kv_heads=8, max_blocks=64) == 1


@pytest.mark.parametrize("kv_scale", [None, 0.02], ids=["cache-dtype", "fp8-cache"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "num_heads, num_kv_heads, head_dim, block_size",
    [(9, 3, 64, 16), (8, 2, 128, 32), (4, 4, 80, 8)],
    ids=["gqa3-bs16", "gqa4-d128-bs32", "mha-d80-bs8"],
)
def test_varlen_attention_matches_the_per_sequence_loop(
    kernel_device, dtype, num_heads, num_kv_heads, head_dim, block_size, kv_scale
):
    """A mixed batch: a fresh prompt, decode rows, a chunk after a cached prefix, a prompt over
    several query tiles; against the reference (SDPA per sequence, the CPU path) in float32."""
    from pipeline.engine.kernels import varlen_attention

    query_lens = [5, 1, 30, 100, 1]
    context_lens = [5, 70, 47, 100, 1]
    k_cache, v_cache, tables = paged_cache(
        kernel_device, dtype, context_lens, block_size, num_kv_heads, head_dim, kv_scale
    )
    q = torch.randn(sum(query_lens), num_heads, head_dim, device=kernel_device).to(dtype)
    starts = torch.tensor([0, *query_lens], device=kernel_device).cumsum(0).int()
    lens = torch.tensor(context_lens, dtype=torch.int32, device=kernel_device)
    out = varlen_attention.varlen_attention(
        q, k_cache, v_cache, tables, starts, lens, 0.1, kv_scale
    )
    if kv_scale is None:  # float32 caches for the reference; fp8 codes it reads as they are
        k_cache, v_cache = k_cache.float(), v_cache.float()
    ref = reference.varlen_attention(
        q.float(), k_cache, v_cache, tables, starts, lens, 0.1, kv_scale
    )
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)


def test_varlen_attention_grid_bounds_every_batch_of_the_same_shape():
    """The launch depends on shapes only: T // BLOCK_Q + B tiles cover any split of T tokens
    into B sequences (each sequence wastes less than one tile)."""
    pytest.importorskip("triton")
    from pipeline.engine.kernels.varlen_attention import tile_shape

    for group in (1, 3, 4, 7, 8, 128):
        block_m, block_q = tile_shape(group)
        assert block_q >= 1 and block_q * group <= block_m
        for lens in ([1] * 9, [block_q + 1, 2 * block_q - 1], [5 * block_q + 3, 1, 1]):
            needed = sum(-(-n // block_q) for n in lens)
            assert needed <= sum(lens) // block_q + len(lens)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_rows", [1, 5, 33, 130])
def test_w8a16_matmul_matches_dequantized_matmul(kernel_device, dtype, num_rows):
    """One row (int8_gemv), decode rows (split K, atomic fp32 sums) and prompt rows (one pass),
    with N and K that leave partial tiles; against x @ (q * scale).T in float32."""
    from pipeline.engine.kernels import int8_matmul

    g = torch.Generator().manual_seed(num_rows)
    n, k = 200, 1088
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) / 100 + 1e-3
    x = torch.randn(num_rows, k, generator=g)
    expected = x @ (q.float() * scale[:, None]).T
    x, q = x.to(kernel_device, dtype), q.to(kernel_device)
    out = int8_matmul.w8a16_matmul(x, q, scale.to(kernel_device, dtype))
    assert out.dtype == dtype and out.shape == (num_rows, n)
    rel = (out.float().cpu() - expected).norm() / expected.norm()
    assert rel < 1e-2, rel
