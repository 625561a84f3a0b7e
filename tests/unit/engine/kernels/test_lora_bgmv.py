"""The fused BGMV LoRA kernel of decode-sized batches against a per-token loop and the plain
PyTorch delta: fused linears (q, k, v; gate, up) whose parts start mid-tile, one-part linears,
the split shrink of a wide input, slot 0 (no adapter) among the tokens."""

import pytest
import torch

from pipeline.engine.lora.layer import lora_delta


def per_token(x, lora_a, lora_b, slots):
    # the definition: each token times its slot's A then B
    rows = [
        x[t] @ lora_a[s].T @ lora_b[:, s].T if s else x.new_zeros(lora_b.shape[0])
        for t, s in enumerate(slots.tolist())
    ]
    return torch.stack(rows)


def block_diagonal(parts: list[int], num_slots: int, rank: int, inp: int, gen):
    # slots as LoraLinear.load_slot fills them: part g's B rows read its own A rows only
    lora_a = torch.randn(num_slots, len(parts) * rank, inp, generator=gen) / inp**0.5
    lora_b = torch.zeros(sum(parts), num_slots, len(parts) * rank)
    start = 0
    for g, size in enumerate(parts):
        block = torch.randn(size, num_slots, rank, generator=gen) / rank**0.5
        lora_b[start : start + size, :, g * rank : (g + 1) * rank] = block
        start += size
    lora_a[0], lora_b[:, 0] = 0, 0
    return lora_a, lora_b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "parts, inp, fused_max_in",
    [
        ([40, 24, 24], 96, 4096),  # qkv: k starts mid-tile, v at a tile's end
        ([36, 36], 80, 4096),  # gate_up
        ([50], 200, 64),  # down_proj wider than the fused kernel's input: 4 splits of 64
        ([40, 24, 24], 150, 64),  # a split shrink of a fused linear, the last split short
    ],
)
def test_add_lora_equals_each_tokens_delta(
    kernel_device, assert_close, monkeypatch, dtype, parts, inp, fused_max_in
):
    from pipeline.engine.kernels import lora_bgmv

    monkeypatch.setattr(lora_bgmv, "BLOCK_N", 16)
    monkeypatch.setattr(lora_bgmv, "K_CHUNK", 64)
    monkeypatch.setattr(lora_bgmv, "FUSED_MAX_IN", fused_max_in)
    gen = torch.Generator().manual_seed(0)
    num_slots, rank, num_tokens = 4, 16, 6
    lora_a, lora_b = block_diagonal(parts, num_slots, rank, inp, gen)
    x = torch.randn(num_tokens, inp, generator=gen)
    y = torch.randn(num_tokens, sum(parts), generator=gen)
    slots = torch.tensor([2, 0, 1, 2, 3, 0])
    expected = y + per_token(x, lora_a, lora_b, slots)
    onehot = slots[:, None] == torch.arange(num_slots)
    torch.testing.assert_close(y + lora_delta(x, lora_a, lora_b, onehot), expected)
    starts = [0, *torch.tensor(parts).cumsum(0).tolist()]
    dev = [t.to(kernel_device, dtype) for t in (y, x, lora_a, lora_b)]
    got = lora_bgmv.add_lora(*dev, rank, starts, slots.to(kernel_device))
    assert got.data_ptr() == dev[0].data_ptr()  # in place
    assert torch.equal(got[slots == 0].cpu(), y[slots == 0].to(dtype))  # no adapter: untouched
    if dtype == torch.float32:
        assert_close(got.cpu(), expected)
    else:  # x @ A is rounded to bf16 before B, as bf16 GEMMs round it: an ulp of the largest
        scale = expected.abs().max().item()
        torch.testing.assert_close(got.float().cpu(), expected, rtol=2**-6, atol=2**-6 * scale)


@pytest.mark.parametrize(("num_in", "launches"), [(4096, 1), (14336, 2)])
def test_launches_per_linear(num_in, launches):
    pytest.importorskip("triton")
    from pipeline.engine.kernels import lora_bgmv

    assert lora_bgmv.num_launches(num_in) == launches


def test_lora_linear_runs_bgmv_at_decode_sizes_and_sgmv_above(kernel_device, monkeypatch):
    # a fused qkv LoraLinear with an adapter in slot 1: the kernels' paths give the plain path's
    from pipeline.engine.kernels import lora_bgmv, lora_sgmv
    from pipeline.engine.layers.linear import DenseLinear
    from pipeline.engine.lora.layer import LoraBatch, LoraLinear

    calls = []
    for module in (lora_bgmv, lora_sgmv):
        add = module.add_lora
        monkeypatch.setattr(
            module, "add_lora", lambda *a, add=add, m=module: calls.append(m) or add(*a)
        )
    gen = torch.Generator().manual_seed(1)
    parts, inp, rank = [24, 8, 8], 32, 16
    weight = torch.randn(sum(parts), inp, generator=gen)
    base = DenseLinear(weight.to(kernel_device), None, parts)
    batches = {
        "plain": LoraBatch(32, 2, kernel_device, None, None),
        "kernels": LoraBatch(32, 2, kernel_device, lora_sgmv, lora_bgmv),
    }
    linears = {
        k: LoraLinear(base, inp, parts, 2, rank, b, torch.float32, kernel_device)
        for k, b in batches.items()
    }
    adapter = [
        (
            g,
            torch.randn(4, inp, generator=gen).to(kernel_device),
            torch.randn(n, 4, generator=gen).to(kernel_device),
        )
        for g, n in enumerate(parts)
    ]
    for linear in linears.values():
        linear.load_slot(1, adapter)
    for num_tokens, kernel in [
        (lora_bgmv.MAX_TOKENS, lora_bgmv),
        (lora_bgmv.MAX_TOKENS + 1, lora_sgmv),
    ]:
        x = torch.randn(num_tokens, inp, generator=gen).to(kernel_device)
        slots = (torch.arange(num_tokens) % 2).to(kernel_device)
        out = {}
        for key, batch in batches.items():
            batch.set_step(slots)
            batch.prepare(linears[key], (x,))
            out[key] = linears[key](x).cpu()
        assert calls.pop() is kernel and not calls
        assert not torch.equal(out["plain"], base(x).cpu())  # the adapter changes the outputs
        torch.testing.assert_close(out["kernels"], out["plain"])
