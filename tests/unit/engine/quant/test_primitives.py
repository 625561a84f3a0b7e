import torch

from pipeline.engine.quant.primitives import (
    FP8_MAX,
    dequantize_groupwise,
    pack_int4_rows,
    pack_int4_tinygemm,
    quantize_fp8_per_tensor,
    quantize_int4_groupwise,
    quantize_int8_activation,
    quantize_int8_per_channel,
    requantize_fp8,
    tinygemm_scales_and_zeros,
    to_fp8,
    unpack_int4_rows,
)


def test_int4_rows_pack_unpack_is_exact_for_every_value():
    q = torch.arange(-8, 8, dtype=torch.int8).repeat(4, 3).reshape(8, 24)  # [out, in]
    packed = pack_int4_rows(q)
    assert packed.shape == (4, 24) and packed.dtype == torch.int8
    assert torch.equal(unpack_int4_rows(packed), q)


def test_int4_rows_layout_low_nibble_is_even_row():
    # modelopt's TRT-LLM export: byte = (row 2i & 0xF) | (row 2i+1 << 4), signed nibbles
    q = torch.tensor([[-1, 3], [2, -8]], dtype=torch.int8)  # rows 0, 1
    packed = pack_int4_rows(q).view(torch.uint8)
    assert packed.tolist() == [[0x2F, 0x83]]


def test_tinygemm_pack_puts_even_column_in_high_nibble_offset_by_8():
    q = torch.tensor([[-8, 7, 0, -1]], dtype=torch.int8)
    assert pack_int4_tinygemm(q).tolist() == [[0x0F, 0x87]]


def test_tinygemm_scales_and_zeros_layout():
    scale = torch.arange(6, dtype=torch.float32).reshape(2, 3)  # [out, groups]
    sz = tinygemm_scales_and_zeros(scale)
    assert sz.shape == (3, 2, 2)  # [groups, out, (scale, zero)]
    assert torch.equal(sz[..., 0], scale.t()) and not sz[..., 1].any()


def test_int8_per_channel_error_is_within_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(16, 64)
    q, scale = quantize_int8_per_channel(w)
    error = (q.float() * scale[:, None] - w).abs()
    assert (error <= scale[:, None] / 2 + 1e-7).all()
    assert q.abs().max() == 127  # the amax element maps to the top code


def test_int4_groupwise_error_is_within_half_a_step_per_group():
    torch.manual_seed(0)
    w = torch.randn(8, 128)
    q, scale = quantize_int4_groupwise(w, group=32)
    assert scale.shape == (8, 4) and q.min() >= -8 and q.max() <= 7
    error = (dequantize_groupwise(q, scale) - w).abs()
    assert (error <= scale.repeat_interleave(32, dim=1) / 2 + 1e-7).all()


def test_fp8_per_tensor_relative_error_is_within_e4m3_precision():
    torch.manual_seed(0)
    w = torch.randn(32, 64)
    q, scale = quantize_fp8_per_tensor(w)
    assert q.dtype == torch.float8_e4m3fn and q.float().abs().max() == FP8_MAX
    normal = w.abs() > 2**-6 * scale  # e4m3 normals: 3 mantissa bits -> rel error <= 2^-4
    rel = ((q.float() * scale - w).abs() / w.abs())[normal]
    assert rel.max() <= 2**-4


def test_to_fp8_saturates_instead_of_producing_nan():
    assert to_fp8(torch.tensor([1e6, -1e6])).float().tolist() == [FP8_MAX, -FP8_MAX]


def test_int8_activation_quantizer_rounds_and_clamps():
    x = torch.tensor([[0.26, -0.26, 100.0, -100.0]])
    assert quantize_int8_activation(x, torch.tensor([0.1])).tolist() == [[3, -3, 127, -128]]


def test_fp8_requantized_to_a_larger_scale_keeps_its_values_within_a_rounding():
    torch.manual_seed(0)
    w = torch.randn(64, 128)
    q, scale = quantize_fp8_per_tensor(w)
    assert torch.equal(requantize_fp8(q, scale, scale).float(), q.float())  # its own scale
    larger = scale * 1.37
    moved = requantize_fp8(q, scale, larger).float() * larger
    before = q.float() * scale
    # one more e4m3 rounding (3 mantissa bits) on top of the first: a few % of the norm
    assert (moved - before).norm() / before.norm() < 0.05
    assert ((moved - before).abs() <= before.abs() * 2**-4 + larger * 2**-9).all()
