"""The SGMV LoRA kernel against the plain-PyTorch delta and a per-token loop, with tokens of
several slots interleaved (decode) and in runs (prompts), slot 0 (no adapter) among them."""

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens, runs", [(7, False), (150, True)])
def test_add_lora_equals_the_plain_delta(kernel_device, assert_close, dtype, num_tokens, runs):
    from pipeline.engine.kernels import lora_sgmv

    gen = torch.Generator().manual_seed(0)
    num_slots, rank, parts, inp, out = 4, 16, 3, 600, 80  # 3 K splits at 7 tokens
    lora_a = torch.randn(num_slots, parts * rank, inp, generator=gen) / inp**0.5
    lora_b = torch.randn(out, num_slots, parts * rank, generator=gen) / rank**0.5
    lora_a[0], lora_b[:, 0] = 0, 0
    x = torch.randn(num_tokens, inp, generator=gen)
    y = torch.randn(num_tokens, out, generator=gen)
    if runs:  # prompts: each slot's tokens in one run
        slots = torch.arange(num_tokens) * num_slots // num_tokens
    else:
        slots = torch.randint(0, num_slots, (num_tokens,), generator=gen)
    expected = y + per_token(x, lora_a, lora_b, slots)
    onehot = slots[:, None] == torch.arange(num_slots)
    torch.testing.assert_close(y + lora_delta(x, lora_a, lora_b, onehot), expected)
    dev = [t.to(kernel_device, dtype) for t in (y, x, lora_a, lora_b)]
    slots_d = slots.to(kernel_device)
    got = lora_sgmv.add_lora(*dev, rank, *lora_sgmv.segments(slots_d, num_slots))
    assert got.data_ptr() == dev[0].data_ptr()  # in place
    if dtype == torch.float32:
        assert_close(got.cpu(), expected)
    else:  # x @ A is rounded to bf16 before B, as bf16 GEMMs round it: an ulp of the largest
        scale = expected.abs().max().item()
        torch.testing.assert_close(got.float().cpu(), expected, rtol=2**-6, atol=2**-6 * scale)
