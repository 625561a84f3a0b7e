"""build_linear on synthetic checkpoints laid out like modelopt's TensorRT-LLM export.

The reference dequantizes the same tensors in float32 and applies the same activation quantizer,
so the only differences left are float rounding: tolerances are a few float32/bf16 ulps.
"""

import pytest
import torch

from pipeline.engine.layers.linear import ConcatLinear, build_linear, kernel_counts
from pipeline.engine.quant.primitives import (
    dequantize_groupwise,
    pack_int4_rows,
    quantize_int4_groupwise,
)
from pipeline.engine.quant.synthetic import QUANTIZATION as QUANT
from pipeline.engine.quant.synthetic import fused_reference
from pipeline.engine.quant.synthetic import random_layer as make_layer
from pipeline.engine.quant.synthetic import reference_forward as reference
from pipeline.errors import ArtifactError, ConfigError


@pytest.mark.parametrize("algo", list(QUANT))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_quantized_linear_matches_dequantized_reference(algo, dtype):
    prefixes, sizes = ["l.q", "l.kv"], [128, 64]
    tensors = make_layer(algo, prefixes, sizes, in_features=256)
    tensors["l.kv.bias"] = torch.randn(64)
    linear = build_linear(tensors, prefixes, QUANT[algo], dtype, "cpu")
    assert linear.output_sizes == sizes and not linear.kernel.startswith("dense")
    x = torch.randn(5, 256)
    bias = torch.cat([torch.zeros(128), tensors["l.kv.bias"]])
    expected = fused_reference(algo, tensors, prefixes, x) + bias
    y = linear(x.to(dtype)).float()
    # float32: only accumulation order differs; bf16: activations/outputs rounded to 8 bits
    # (and one bf16-rounded input can move an int8/fp8 activation code by one step)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    rel = ((y - expected).norm() / expected.norm()).item()
    assert rel < tol, f"{algo} {dtype}: relative error {rel:.2e} via {linear.kernel}"


@pytest.mark.parametrize("algo", ["W4A16_AWQ", "W4A8_AWQ"])
def test_members_with_different_prequant_scales_run_as_separate_gemms(algo):
    prefixes = ["mlp.fc", "mlp.gate"]
    tensors = make_layer(algo, prefixes, [128, 128], in_features=256, shared_input=False)
    linear = build_linear(tensors, prefixes, QUANT[algo], torch.float32, "cpu")
    assert isinstance(linear, ConcatLinear) and linear.output_sizes == [128, 128]
    x = torch.randn(3, 256)
    expected = torch.cat([reference(algo, tensors, p, x) for p in prefixes], dim=-1)
    torch.testing.assert_close(linear(x), expected, rtol=1e-4, atol=1e-4)


def test_int4_group_tinygemm_cannot_take_falls_back_to_dequant():
    torch.manual_seed(0)
    q, scale = quantize_int4_groupwise(torch.randn(64, 96), group=48)  # 48: not a tinygemm group
    tensors = {"l.o.weight": pack_int4_rows(q), "l.o.weights_scaling_factor": scale}
    linear = build_linear(tensors, ["l.o"], QUANT["W4A16_AWQ"], torch.float32, "cpu")
    assert linear.kernel.startswith("dequant (tinygemm needs group")
    x = torch.randn(2, 96)
    torch.testing.assert_close(linear(x), x @ dequantize_groupwise(q, scale).t())


def test_excluded_member_stays_dense_next_to_quantized_one():
    tensors = make_layer("W8A16", ["a"], [64], in_features=128) | {
        "lm_head.weight": torch.randn(32, 128)
    }
    quant = {"quant_algo": "W8A16", "exclude_modules": ["lm_head"]}
    head = build_linear(tensors, ["lm_head"], quant, torch.float32, "cpu")
    both = build_linear(tensors, ["a", "lm_head"], quant, torch.float32, "cpu")
    assert head.kernel == "dense" and isinstance(both, ConcatLinear)
    assert kernel_counts(torch.nn.ModuleList([head, both])) == {
        "dense": 1,
        "dense+torch._weight_int8pack_mm": 1,
    }


def test_unsupported_quant_algo_is_a_config_error():
    tensors = {"a.weight": torch.zeros(8, 8, dtype=torch.uint8)}
    with pytest.raises(ConfigError, match="quant_algo=NVFP4"):
        build_linear(tensors, ["a"], {"quant_algo": "NVFP4"}, torch.float32, "cpu")


def test_missing_scale_is_an_artifact_error():
    tensors = {"a.weight": torch.zeros(8, 8, dtype=torch.int8)}
    with pytest.raises(ArtifactError, match="a.weights_scaling_factor"):
        build_linear(tensors, ["a"], {"quant_algo": "W8A16"}, torch.float32, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("algo", list(QUANT))
@pytest.mark.parametrize("num_tokens", [1, 40, 130])
def test_quantized_linear_on_cuda_uses_a_fast_kernel_and_matches_reference(algo, num_tokens):
    prefixes, sizes = ["l.q", "l.kv"], [256, 128]
    tensors = make_layer(algo, prefixes, sizes, in_features=512)
    linear = build_linear(tensors, prefixes, QUANT[algo], torch.bfloat16, "cuda")
    x = torch.randn(num_tokens, 512)
    expected = fused_reference(algo, tensors, prefixes, x)
    y = linear(x.to("cuda", torch.bfloat16)).float().cpu()
    rel = ((y - expected).norm() / expected.norm()).item()
    assert rel < 2e-2, f"{algo}: relative error {rel:.2e} via {linear.kernel}"
    # an H100 (SM 90) runs every format on a low-precision kernel (PyTorch's or our Triton
    # weight-only one), no dequant fallback
    if torch.cuda.get_device_capability() >= (9, 0):
        assert not linear.kernel.startswith("dequant"), linear.kernel


def test_int4_steps_past_the_packed_row_limit_dequantize_to_the_same_result():
    """CUDA sends steps above PACKED_MAX_ROWS rows (prompts) through a dequantized dense GEMM;
    the same switch, forced on CPU, agrees with the packed kernel."""
    torch.manual_seed(0)
    q, scale = quantize_int4_groupwise(torch.randn(64, 128), group=32)
    tensors = {"l.o.weight": pack_int4_rows(q), "l.o.weights_scaling_factor": scale}
    linear = build_linear(tensors, ["l.o"], QUANT["W4A16_AWQ"], torch.float32, "cpu")
    assert linear.is_packed
    x = torch.randn(3, 128)
    packed = linear(x)
    linear.register_buffer("packed_rows", pack_int4_rows(q), persistent=False)
    linear.register_buffer("scale", scale.float(), persistent=False)
    linear.max_packed_rows = 2
    torch.testing.assert_close(linear(x), packed, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(linear(x), x @ dequantize_groupwise(q, scale).t())
