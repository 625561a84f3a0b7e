"""RMSNorm and SwiGLU hand an FP8 linear its input already quantized: the same codes the linear's
own quantizer gives (CPU path; the Triton kernels' twins are checked in kernels/test_kernels)."""

import pytest
import torch

from pipeline.engine.kernels.reference import quantize_fp8
from pipeline.engine.layers.activation import SiluAndMul
from pipeline.engine.layers.linear import build_linear
from pipeline.engine.layers.rmsnorm import RMSNorm
from pipeline.engine.quant.fp8_linear import fused_input_scale
from pipeline.engine.quant.synthetic import QUANTIZATION, random_layer


def fp8_linear(algo: str = "FP8", in_features: int = 256):
    tensors = random_layer(algo, ["l.fc", "l.gate"], [64, 64], in_features=in_features)
    return build_linear(tensors, ["l.fc", "l.gate"], QUANTIZATION[algo], torch.bfloat16, "cpu")


def test_fp8_linear_takes_an_input_quantized_before_it_as_its_own():
    linear = fp8_linear()
    x = torch.randn(6, 256).to(torch.bfloat16)
    scale = fused_input_scale(linear)
    assert scale is not None
    assert torch.equal(linear(quantize_fp8(x, scale)), linear(x))


@pytest.mark.parametrize("with_residual", [False, True])
def test_norm_quantizes_its_output_with_the_linears_scale(with_residual):
    torch.manual_seed(0)
    norm = RMSNorm((torch.rand(256) + 0.5).to(torch.bfloat16), 1e-5)
    x, residual = (torch.randn(5, 256).to(torch.bfloat16) for _ in range(2))
    args = (x, residual) if with_residual else (x,)
    plain = norm(*args)
    norm.quantize_output(fused_input_scale(fp8_linear()))
    fused = norm(*args)
    if with_residual:  # the sum stays in the model's dtype: it is the next residual
        assert torch.equal(fused[1], plain[1])
        plain, fused = plain[0], fused[0]
    assert fused.dtype == torch.float8_e4m3fn
    assert torch.equal(fused.float(), quantize_fp8(plain, norm.out_scale).float())


def test_swiglu_quantizes_its_output_with_the_linears_scale():
    torch.manual_seed(0)
    act = SiluAndMul(torch.device("cpu"))
    x = (torch.randn(4, 512) * 3).to(torch.bfloat16)
    plain = act(x)
    act.quantize_output(fused_input_scale(fp8_linear()))
    assert torch.equal(act(x).float(), quantize_fp8(plain, act.out_scale).float())


def test_no_fused_input_where_the_linear_needs_its_prescale_or_is_not_fp8():
    # W4A8 AWQ runs on the FP8 linear, but its input is pre-scaled per channel first
    assert fused_input_scale(fp8_linear("W4A8_AWQ")) is None
    assert fused_input_scale(fp8_linear("W8A16")) is None
