"""The BGMV LoRA kernels of decode-sized batches (split-K shrink, expand) against a per-token
loop: fused linears (q, k, v; gate, up) with parts of different widths, one-part linears, `in`
a whole or a partial number of chunks, 1 to 4 tokens, slot 0 (no adapter) among them, 16-bit
and fp32 inputs and outputs; and LoraLinear's choice of BGMV or SGMV by the token count."""

import pytest
import torch


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


def run_add_lora(kernel_device, dtype, y_dtype, parts, inp, rank, slots):
    # the kernels' delta on a block-diagonal stack of 4 slots against the per-token one
    from pipeline.engine.kernels import lora_bgmv

    gen = torch.Generator().manual_seed(0)
    lora_a, lora_b = block_diagonal(parts, 4, rank, inp, gen)
    x = torch.randn(len(slots), inp, generator=gen)
    y = torch.randn(len(slots), sum(parts), generator=gen)
    expected = y + per_token(x, lora_a, lora_b, slots)
    starts = [0, *torch.tensor(parts).cumsum(0).tolist()]
    dev = [t.to(kernel_device, dtype) for t in (x, lora_a, lora_b)]
    y_dev = y.to(kernel_device, y_dtype)
    got = lora_bgmv.add_lora(y_dev, *dev, rank, starts, slots.to(kernel_device))
    assert got.data_ptr() == y_dev.data_ptr()  # in place
    assert torch.equal(got[slots == 0].cpu(), y[slots == 0].to(y_dtype))  # no adapter: untouched
    if dtype == torch.float32:
        torch.testing.assert_close(got.cpu(), expected)
    else:  # x @ A is rounded to 16 bits before B, as 16-bit GEMMs round it: an ulp of the largest
        scale = expected.abs().max().item()
        torch.testing.assert_close(got.float().cpu(), expected, rtol=2**-6, atol=2**-6 * scale)


@pytest.fixture
def small_blocks(monkeypatch):
    # several K chunks and output tiles a part at test sizes
    from pipeline.engine.kernels import lora_bgmv

    monkeypatch.setattr(lora_bgmv, "BLOCK_K", 16)
    monkeypatch.setattr(lora_bgmv, "BLOCK_N", 16)


@pytest.mark.parametrize(
    ("dtype", "y_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.float32),
    ],
)
@pytest.mark.parametrize(
    ("parts", "inp"),
    [
        ([40, 24, 24], 96),  # qkv: each part's last tile short, `in` a whole number of chunks
        ([36, 36], 80),  # gate_up
        ([50], 200),  # down_proj: 13 chunks, the last short
    ],
)
def test_add_lora_equals_each_tokens_delta(kernel_device, small_blocks, dtype, y_dtype, parts, inp):
    slots = torch.tensor([2, 0, 1, 3])
    run_add_lora(kernel_device, dtype, y_dtype, parts, inp, 16, slots)


@pytest.mark.parametrize("rank", [8, 16])
@pytest.mark.parametrize("slots", [[2], [0], [3, 3], [1, 0, 1], [0, 2, 2, 1]])
def test_add_lora_at_one_to_four_tokens(kernel_device, small_blocks, rank, slots):
    run_add_lora(
        kernel_device, torch.float32, torch.float32, [24, 8, 8], 40, rank, torch.tensor(slots)
    )


def test_add_lora_launches_its_kernels_count(kernel_device, monkeypatch):
    # the count scripts/bench_lora.py reports a batch-1 decode step
    from pipeline.engine.kernels import lora_bgmv

    launches = []

    class Counted:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launches.append(grid)
            return self.kernel[grid]

    for name in ("_shrink_kernel", "_expand_kernel"):
        monkeypatch.setattr(lora_bgmv, name, Counted(getattr(lora_bgmv, name)))
    run_add_lora(kernel_device, torch.float32, torch.float32, [24, 8, 8], 40, 16, torch.tensor([1]))
    assert len(launches) == lora_bgmv.NUM_LAUNCHES_PER_LINEAR


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
