"""Contract: every key of our checkpoint config.json is one TensorRT-LLM 1.x's loader takes.

PretrainedConfig.from_dict builds the architecture's config class with **config: a key that is
not a constructor argument is set as an attribute with a warning at every build ("Implicitly
setting PretrainedConfig.<key>"), and `quantization` goes to the QuantConfig dataclass, which
refuses unknown keys outright (docs/trtllm_reference.md, section 1.2). The argument lists below
are upstream's; the only extra keys allowed are those upstream's own converters write too.
"""

import pytest

from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.quant.export import trtllm_config

# PretrainedConfig.__init__ (tensorrt_llm/models/modeling_utils.py)
PRETRAINED_CONFIG_ARGS = {
    "architecture",
    "dtype",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "hidden_act",
    "logits_dtype",
    "norm_epsilon",
    "position_embedding_type",
    "max_position_embeddings",
    "rotary_embedding_dim",
    "num_key_value_heads",
    "intermediate_size",
    "mapping",
    "quantization",
    "use_parallel_embedding",
    "embedding_sharding_dim",
    "head_size",
    "qk_layernorm",
    "runtime_defaults",
}
# LLaMAConfig.__init__ (models/llama/config.py; MistralForCausalLM maps to it) and
# QWenConfig.__init__ (models/qwen/config.py)
LLAMA_ARGS = {
    "mlp_bias",
    "attn_bias",
    "rotary_base",
    "rotary_scaling",
    "residual_mlp",
    "disable_weight_only_quant_plugin",
    "moe",
    "remove_duplicated_kv_heads",
    "embedding_multiplier",
    "attention_multiplier",
    "residual_multiplier",
    "output_multiplier_scale",
}
QWEN_ARGS = {
    "mlp_bias",
    "attn_bias",
    "rotary_base",
    "rotary_scaling",
    "disable_weight_only_quant_plugin",
    "use_logn_attn",
    "moe",
    "num_labels",
}
# set through **kwargs by upstream's own from_hugging_face of that class (the model reads them)
LLAMA_UPSTREAM_EXTRA = {"tie_word_embeddings"}
QWEN_UPSTREAM_EXTRA = {"tie_word_embeddings", "qwen_type", "seq_length"}
ALLOWED = {
    "LlamaForCausalLM": PRETRAINED_CONFIG_ARGS | LLAMA_ARGS | LLAMA_UPSTREAM_EXTRA,
    "MistralForCausalLM": PRETRAINED_CONFIG_ARGS | LLAMA_ARGS | LLAMA_UPSTREAM_EXTRA,
    "Qwen2ForCausalLM": PRETRAINED_CONFIG_ARGS | QWEN_ARGS | QWEN_UPSTREAM_EXTRA,
}
# QuantConfig dataclass fields (modeling_utils.py) and Mapping.to_dict keys (mapping.py)
QUANT_CONFIG_FIELDS = {
    "quant_algo",
    "kv_cache_quant_algo",
    "group_size",
    "smoothquant_val",
    "clamp_val",
    "use_meta_recipe",
    "has_zero_point",
    "pre_quant_scale",
    "exclude_modules",
    "mamba_ssm_cache_dtype",
}
MAPPING_KEYS = {"world_size", "tp_size", "pp_size", "cp_size", "gpus_per_node", "moe_tp_size"}


def hf_config(architecture: str, **extra) -> dict:
    return {
        "architectures": [architecture],
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "num_hidden_layers": 2,
        "vocab_size": 49152,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
        **extra,
    }


def unknown_keys(config: dict) -> set[str]:
    return set(config) - ALLOWED[config["architecture"]]


@pytest.mark.parametrize(
    "architecture", ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"]
)
def test_convert_writes_only_constructor_arguments(architecture):
    config = pretrained_config(hf_config(architecture), "bfloat16", 2, 1)
    assert unknown_keys(config) == set()
    assert set(config["quantization"]) <= QUANT_CONFIG_FIELDS
    assert set(config["mapping"]) <= MAPPING_KEYS


def test_share_embedding_table_is_not_written():
    # a 0.x PretrainedConfig argument; 1.x shares the table by leaving lm_head out instead
    config = pretrained_config(hf_config("LlamaForCausalLM"), "float16", 1, 1)
    assert "share_embedding_table" not in config


def test_quantized_export_writes_only_constructor_arguments():
    modelopt = {  # modelopt 0.47's own config.json keys for an int4_awq export
        "producer": {"name": "modelopt", "version": "0.47.0"},
        "architecture": "LlamaForCausalLM",
        "dtype": "float16",
        "num_hidden_layers": 2,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "head_size": 64,
        "hidden_act": "silu",
        "vocab_size": 49152,
        "share_embedding_table": False,
        "quantization": {
            "quant_algo": "W4A16_AWQ",
            "kv_cache_quant_algo": None,
            "group_size": 64,
            "has_zero_point": False,
            "pre_quant_scale": True,
            "exclude_modules": ["lm_head"],
        },
    }
    hf = hf_config("LlamaForCausalLM", head_dim=64)
    for build_quant_algo in (None, "W8A16"):
        config = trtllm_config(modelopt, hf, "float16", 1, 1, True, build_quant_algo)
        # `producer` is modelopt's, and upstream's own modelopt flow keeps it as well
        assert unknown_keys(config) == {"producer"}
        assert set(config["quantization"]) <= QUANT_CONFIG_FIELDS
