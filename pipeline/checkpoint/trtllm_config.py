"""config.json of a TensorRT-LLM checkpoint (PretrainedConfig.to_dict()) from an HF config.

Every key is a constructor argument of TensorRT-LLM 1.x's config class for the architecture
(PretrainedConfig + LLaMAConfig / QWenConfig) or one its own converters write through **kwargs
(docs/trtllm_reference.md, section 1.2); anything else draws a warning at every build.
"""

from pathlib import Path

from pipeline.artifacts import read_json_object
from pipeline.checkpoint.architectures import architecture_of

DTYPES = ("float32", "float16", "bfloat16")


def read_checkpoint_config(checkpoint_dir: Path, stage: str) -> dict:
    """A TensorRT-LLM checkpoint's config.json (PretrainedConfig.to_dict())."""
    return read_json_object(
        Path(checkpoint_dir) / "config.json",
        f"{stage} needs a TensorRT-LLM checkpoint (config.json + rank<N>.safetensors); re-run "
        f"convert/quantize with force=true",
    )


def rope_settings(hf_config: dict) -> tuple[float, dict | None]:
    """rope_theta and scaling from transformers 4.x keys or 5.x rope_parameters."""
    params = dict(hf_config.get("rope_parameters") or {})
    theta = hf_config.get("rope_theta", params.get("rope_theta", 10000.0))
    scaling = (
        hf_config.get("rope_scaling")
        or {k: v for k, v in params.items() if k != "rope_theta"}
        or None
    )
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        scaling = None if kind == "default" else {**scaling, "type": kind}
    return float(theta), scaling


def pretrained_config(
    hf_config: dict, dtype: str, tp_size: int, pp_size: int, quantization: dict | None = None
) -> dict:
    arch = architecture_of(hf_config, "convert")
    heads = hf_config["num_attention_heads"]
    theta, scaling = rope_settings(hf_config)
    tied = bool(hf_config.get("tie_word_embeddings", False))
    config = {
        "architecture": arch.trtllm_name,
        "dtype": dtype,
        "logits_dtype": "float32",
        "vocab_size": hf_config["vocab_size"],
        "hidden_size": hf_config["hidden_size"],
        "num_hidden_layers": hf_config["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": hf_config.get("num_key_value_heads") or heads,
        "head_size": hf_config.get("head_dim") or hf_config["hidden_size"] // heads,
        "intermediate_size": hf_config["intermediate_size"],
        "hidden_act": hf_config.get("hidden_act", "silu"),
        "norm_epsilon": hf_config.get("rms_norm_eps", 1e-5),
        "position_embedding_type": "rope_gpt_neox",
        "max_position_embeddings": hf_config.get("max_position_embeddings"),
        "rotary_base": theta,
        "rotary_scaling": scaling,
        "use_parallel_embedding": False,
        "embedding_sharding_dim": 0,
        # no constructor argument, but upstream's converters write it and its models read it
        # (0.x's share_embedding_table is gone: 1.x loads lm_head from the checkpoint)
        "tie_word_embeddings": tied,
        "attn_bias": bool(hf_config.get("attention_bias", arch.hf_name == "Qwen2ForCausalLM")),
        "mlp_bias": bool(hf_config.get("mlp_bias", False)),
        "mapping": {"world_size": tp_size * pp_size, "tp_size": tp_size, "pp_size": pp_size},
        "quantization": quantization or {"quant_algo": None, "kv_cache_quant_algo": None},
    }
    config.update(dict(arch.extra_config))
    return config
