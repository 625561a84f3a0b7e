import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from pipeline.engine.layers.rotary import RotaryEmbedding, inverse_frequencies

SCALINGS = [
    None,
    {"type": "linear", "factor": 4.0},
    {
        "type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
]


def hf_config(base: float, scaling: dict | None) -> LlamaConfig:
    params = {"rope_type": "default", "rope_theta": base}
    if scaling:
        params.update({k: v for k, v in scaling.items() if k != "type"}, rope_type=scaling["type"])
    return LlamaConfig(
        hidden_size=128, num_attention_heads=4, max_position_embeddings=512, rope_parameters=params
    )


@pytest.mark.parametrize("scaling", SCALINGS, ids=["default", "linear", "llama3"])
def test_rotary_matches_transformers(scaling):
    base, head_dim = 500000.0, 32
    hf = LlamaRotaryEmbedding(hf_config(base, scaling))
    torch.testing.assert_close(inverse_frequencies(head_dim, base, scaling), hf.inv_freq)
    positions = torch.tensor([0, 3, 100, 511])
    q, k = torch.randn(4, 4, head_dim), torch.randn(4, 2, head_dim)
    ours = RotaryEmbedding(head_dim, 512, base, scaling, torch.float32, torch.device("cpu"))
    q_ours, k_ours = ours(positions, q, k)
    cos, sin = hf(q, positions[None])  # [1, T, D]
    q_hf, k_hf = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    torch.testing.assert_close(q_ours, q_hf[0].transpose(0, 1))
    torch.testing.assert_close(k_ours, k_hf[0].transpose(0, 1))


def test_unknown_scaling_is_refused():
    with pytest.raises(ValueError, match="yarn"):
        inverse_frequencies(32, 10000.0, {"type": "yarn", "factor": 2.0})
