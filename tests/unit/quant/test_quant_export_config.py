"""modelopt's config.json is rewritten to what convert writes for the same model."""

import pytest

from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.errors import StageError
from pipeline.quant.export import trtllm_config

HF_CONFIG = {  # SmolLM2-135M's config.json (transformers 5 schema), 2 layers
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 49152,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
}
MODELOPT_CONFIG = {  # what modelopt 0.47 writes for it (int4_awq, block 64, tp=3)
    "producer": {"name": "modelopt", "version": "0.47.0"},
    "architecture": "LlamaForCausalLM",
    "dtype": "float16",
    "logits_dtype": "float16",
    "num_hidden_layers": 2,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "hidden_size": 576,
    "norm_epsilon": 1e-5,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "hidden_act": "silu",
    "use_parallel_embedding": True,
    "embedding_sharding_dim": 0,
    "head_size": 64,
    "intermediate_size": 1536,
    "position_embedding_type": "rope_gpt_neox",
    "share_embedding_table": False,
    "residual_mlp": False,
    "bias": False,
    "rotary_pct": 1.0,
    "rank": 2,
    "decoder": "llama",
    "rmsnorm": True,
    "lm_head_bias": False,
    "mapping": {"world_size": 3, "tp_size": 3, "pp_size": 1},
    "quantization": {
        "quant_algo": "W4A16_AWQ",
        "kv_cache_quant_algo": None,
        "group_size": 64,
        "has_zero_point": False,
        "pre_quant_scale": True,
        "exclude_modules": ["lm_head"],
    },
}


def test_config_is_converts_plus_the_quantization_block():
    config = trtllm_config(MODELOPT_CONFIG, HF_CONFIG, "float16", 3, 1, has_prequant_scales=True)
    ours = pretrained_config(HF_CONFIG, "float16", 3, 1)
    assert {k: v for k, v in config.items() if k not in ("quantization", "producer")} == {
        k: v for k, v in ours.items() if k != "quantization"
    }
    assert config["rotary_base"] == 100000.0  # modelopt omits it: TensorRT-LLM would use 1e4
    assert config["logits_dtype"] == "float32" and config["use_parallel_embedding"] is False
    assert "rank" not in config and "decoder" not in config
    assert config["quantization"] == MODELOPT_CONFIG["quantization"]
    assert config["producer"]["name"] == "modelopt"


def test_pre_quant_scale_says_whether_the_tensors_exist():
    config = trtllm_config(MODELOPT_CONFIG, HF_CONFIG, "float16", 3, 1, has_prequant_scales=False)
    assert config["quantization"]["pre_quant_scale"] is False


def test_structural_disagreement_is_refused():
    bad = {**MODELOPT_CONFIG, "num_key_value_heads": 9, "dtype": "bfloat16"}
    with pytest.raises(StageError, match="num_key_value_heads: modelopt 9 vs convert 3; dtype"):
        trtllm_config(bad, HF_CONFIG, "float16", 3, 1, has_prequant_scales=True)


def test_padded_vocabulary_follows_the_tensors():
    padded = {**MODELOPT_CONFIG, "vocab_size": 49216}
    assert trtllm_config(padded, HF_CONFIG, "float16", 3, 1, True)["vocab_size"] == 49216
