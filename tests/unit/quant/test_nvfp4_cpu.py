"""The pure-torch NVFP4 backend equals a from-scratch e2m1 + fp8-block-scale reference."""

import torch
from modelopt.torch.quantization.config import QuantizerAttributeConfig
from modelopt.torch.quantization.nn import TensorQuantizer

from pipeline.quant.nvfp4_cpu import BACKEND_NAME, ensure_registered

E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def reference_nvfp4(x: torch.Tensor, amax: float) -> torch.Tensor:
    # [R, K] -> [R, K]: per 16 values an fp8 (e4m3) scale relative to the global amax / (6 * 448)
    global_scale = amax / (6.0 * 448.0)
    blocks = x.reshape(-1, 16)
    block_amax = blocks.abs().amax(-1, keepdim=True)
    scale = (block_amax / 6.0 / global_scale).to(torch.float8_e4m3fn).float() * global_scale
    scaled = (blocks / scale).abs().clamp(max=6.0)
    nearest = E2M1_GRID[(scaled.unsqueeze(-1) - E2M1_GRID).abs().argmin(-1)]
    return (nearest * blocks.sign() * scale).reshape(x.shape)


def test_backend_matches_reference():
    ensure_registered()
    quantizer = TensorQuantizer(
        QuantizerAttributeConfig(
            num_bits=(2, 1),
            block_sizes={-1: 16, "type": "dynamic", "scale_bits": (4, 3)},
            backend=BACKEND_NAME,
        )
    )
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    amax = float(x.abs().max())
    quantizer.amax = torch.tensor(amax)
    out = quantizer(x)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(out, reference_nvfp4(x, amax))
    assert 0.05 < (out - x).norm() / x.norm() < 0.2  # 4-bit: lossy, but not garbage
