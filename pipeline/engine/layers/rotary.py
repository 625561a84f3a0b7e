"""Rotary position embedding, GPT-NeoX layout (rotate halves), as TensorRT-LLM's rope_gpt_neox.
Its cos/sin tables, and the plain-PyTorch rotation (kernels.reference's); on CUDA the attention
layer applies them in the kernel that writes the KV cache (kernels/rotary_kv_store.py).

Frequencies follow transformers' rope init functions, so positions match the HF reference
bit for bit in fp32. Scalings: none, linear, llama3.
"""

import math

import torch
from torch import nn

from pipeline.engine.kernels.reference import rotary_neox

SUPPORTED_SCALINGS = ("linear", "llama3")


def scaling_type(scaling: dict | None) -> str | None:
    """The checkpoint's rotary_scaling kind; None for plain RoPE."""
    if not scaling:
        return None
    kind = scaling.get("type", scaling.get("rope_type"))
    return None if kind == "default" else kind


def _llama3(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def inverse_frequencies(head_dim: int, base: float, scaling: dict | None) -> torch.Tensor:
    # [head_dim / 2] float32
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = scaling_type(scaling)
    if kind is None:
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        return _llama3(inv_freq, scaling)
    raise ValueError(
        f"rotary_scaling type {kind!r} is not supported; supported: {', '.join(SUPPORTED_SCALINGS)}"
    )


class RotaryEmbedding(nn.Module):
    def __init__(
        self,
        head_dim: int,
        max_positions: int,
        base: float,
        scaling: dict | None,
        dtype: torch.dtype,
        device: torch.device,
    ):
        super().__init__()
        inv_freq = inverse_frequencies(head_dim, base, scaling)
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)  # [max_positions, head_dim]
        self.register_buffer("cos", angles.cos().to(device, dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(device, dtype), persistent=False)

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # positions [T]; q [T, H, D]; k [T, Hkv, D] -> rotated q, k
        return rotary_neox(positions, q, k, self.cos, self.sin)
