import pytest
import torch
from torch.nn import functional as F

from pipeline.engine.kernels.reference import quantize_fp8, store_kv, varlen_attention
from pipeline.engine.layers.attention import paged_decode_attention

H, HKV, D, BS, NB = 4, 2, 8, 4, 16


def reference(q, k, v):
    # q [Tq, H, D] the last Tq of Tk positions; k, v [Tk, HKV, D] -> [Tq, H, D], causal
    tq, tk = q.shape[0], k.shape[0]
    k, v = k.repeat_interleave(H // HKV, 1), v.repeat_interleave(H // HKV, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * D**-0.5
    mask = torch.arange(tk)[None, :] <= torch.arange(tk - tq, tk)[:, None]
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", weights, v)


def paged(lengths, generator, kv_scale=None):
    """Random K/V for sequences of these lengths, scattered over shuffled cache blocks (fp8 codes
    of K/V / kv_scale when set)."""
    dtype = torch.float32 if kv_scale is None else torch.float8_e4m3fn
    k_cache, v_cache = (torch.zeros(NB, BS, HKV, D, dtype=dtype) for _ in range(2))
    free = torch.randperm(NB, generator=generator).tolist()
    tables, kvs = [], []
    for n in lengths:
        table = [free.pop() for _ in range(-(-n // BS))]
        k, v = (
            torch.randn(n, HKV, D, generator=generator),
            torch.randn(n, HKV, D, generator=generator),
        )
        slots = torch.tensor([table[p // BS] * BS + p % BS for p in range(n)])
        store_kv(k, v, k_cache, v_cache, slots, kv_scale)
        tables.append(table)
        kvs.append((k, v))
    width = max(len(t) for t in tables)
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    return k_cache, v_cache, block_tables, kvs


def test_paged_decode_matches_dense_attention():
    g = torch.Generator().manual_seed(0)
    lengths = [5, 1, 12]
    k_cache, v_cache, tables, kvs = paged(lengths, g)
    q = torch.randn(3, H, D, generator=g)
    out = paged_decode_attention(
        q, k_cache, v_cache, tables, torch.tensor(lengths, dtype=torch.int32), D**-0.5
    )
    for i, (k, v) in enumerate(kvs):
        torch.testing.assert_close(out[i], reference(q[i : i + 1], k, v)[0])


def test_varlen_with_cached_context_matches_dense_attention():
    g = torch.Generator().manual_seed(1)
    # a whole prompt, a chunk after 7 cached tokens, and a graph-padding sequence with no tokens
    lengths, query_lens = [7, 10, 1], [7, 3, 0]
    k_cache, v_cache, tables, kvs = paged(lengths, g)
    q = torch.randn(sum(query_lens), H, D, generator=g)
    starts = torch.tensor([0, 7, 10, 10], dtype=torch.int32)
    lens = torch.tensor(lengths, dtype=torch.int32)
    out = varlen_attention(q, k_cache, v_cache, tables, starts, lens, D**-0.5)
    torch.testing.assert_close(out[:7], reference(q[:7], *kvs[0]))
    torch.testing.assert_close(out[7:], reference(q[7:], *kvs[1]))


def test_sdpa_causal_agrees_with_reference():
    g = torch.Generator().manual_seed(2)
    q, k, v = (
        torch.randn(6, H, D, generator=g),
        torch.randn(6, HKV, D, generator=g),
        torch.randn(6, HKV, D, generator=g),
    )
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
    ).transpose(0, 1)
    torch.testing.assert_close(out, reference(q, k, v))


def dequantized(kv, scale):
    return tuple(quantize_fp8(x, scale).float() * scale for x in kv)


def test_an_fp8_cache_holds_the_codes_of_k_and_v_over_the_scale():
    g = torch.Generator().manual_seed(3)
    k_cache, v_cache, tables, kvs = paged([5, 12], g, kv_scale=0.02)  # 3 sd = 150 codes
    assert k_cache.dtype == torch.float8_e4m3fn
    k, v = kvs[1]
    slots = [tables[1, p // BS].item() * BS + p % BS for p in range(12)]
    assert torch.equal(k_cache.view(-1, HKV, D)[slots].float(), quantize_fp8(k, 0.02).float())
    assert torch.equal(v_cache.view(-1, HKV, D)[slots].float(), quantize_fp8(v, 0.02).float())


@pytest.mark.parametrize("kv_scale", [0.02, 0.004])  # 0.004: the tails saturate at 448 codes
def test_attention_over_fp8_codes_is_attention_over_their_dequantized_values(kv_scale):
    """The scale folded into the softmax scale and the output (no dequantized copy) computes
    attention over codes * scale: decode (the CPU layer path) and varlen (the reference)."""
    g = torch.Generator().manual_seed(4)
    lengths, query_lens = [7, 10, 1], [7, 3, 0]
    k_cache, v_cache, tables, kvs = paged(lengths, g, kv_scale)
    lens = torch.tensor(lengths, dtype=torch.int32)
    q = torch.randn(3, H, D, generator=g)
    out = paged_decode_attention(q, k_cache, v_cache, tables, lens, D**-0.5, kv_scale)
    for i, kv in enumerate(kvs):
        torch.testing.assert_close(out[i], reference(q[i : i + 1], *dequantized(kv, kv_scale))[0])
    q = torch.randn(sum(query_lens), H, D, generator=g)
    starts = torch.tensor([0, 7, 10, 10], dtype=torch.int32)
    out = varlen_attention(q, k_cache, v_cache, tables, starts, lens, D**-0.5, kv_scale)
    torch.testing.assert_close(out[:7], reference(q[:7], *dequantized(kvs[0], kv_scale)))
    torch.testing.assert_close(out[7:], reference(q[7:], *dequantized(kvs[1], kv_scale)))


def test_fp8_cache_attention_stays_near_the_unquantized():
    """e4m3 keeps 3 mantissa bits: attention outputs move by a few percent, not more."""
    lengths = [9, 16]
    q = torch.randn(2, H, D, generator=torch.Generator().manual_seed(6))
    lens = torch.tensor(lengths, dtype=torch.int32)
    outs = []
    for kv_scale in (None, 4.0 / 448):  # K/V amax ~4 (random normal): the calibrated scale
        k_cache, v_cache, tables, _ = paged(lengths, torch.Generator().manual_seed(5), kv_scale)
        outs.append(paged_decode_attention(q, k_cache, v_cache, tables, lens, D**-0.5, kv_scale))
    error = ((outs[1] - outs[0]).norm() / outs[0].norm()).item()
    assert 0 < error < 0.05
