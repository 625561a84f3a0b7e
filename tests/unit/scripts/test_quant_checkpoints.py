"""scripts.quant_checkpoints: a BF16 checkpoint rewritten per format, as modelopt exports it."""

import argparse
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.engine.layers.linear import build_linear
from scripts import quant_checkpoints

SHAPE = {  # hidden 64 and intermediate 192: 128 divides neither, 64 both
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 32,
}
LINEARS = {  # prefix -> (out, in)
    "transformer.layers.0.attention.qkv": (128, 64),
    "transformer.layers.0.attention.dense": (64, 64),
    "transformer.layers.0.mlp.fc": (192, 64),
    "transformer.layers.0.mlp.gate": (192, 64),
    "transformer.layers.0.mlp.proj": (64, 192),
}
# relative error vs the bf16 weights; measured 7e-3, 0.11, 0.11, 4.2e-2 (round to nearest of
# N(0, 1) weights: int4's step is amax / 7, fp8 keeps 3 mantissa bits)
TOLERANCE = {"int8_wo": 1e-2, "int4_wo": 0.15, "int4_awq": 0.15, "fp8": 6e-2, "fp8_kv": 6e-2}


@pytest.fixture(scope="module")
def bf16_ckpt(tmp_path_factory):
    g = torch.Generator().manual_seed(0)
    tensors = {f"{p}.weight": torch.randn(shape, generator=g) for p, shape in LINEARS.items()}
    tensors |= {
        "transformer.vocab_embedding.weight": torch.randn(32, 64, generator=g),
        "lm_head.weight": torch.randn(32, 64, generator=g),
        "transformer.layers.0.input_layernorm.weight": torch.ones(64),
        "transformer.layers.0.post_layernorm.weight": torch.ones(64),
        "transformer.ln_f.weight": torch.ones(64),
    }
    tensors = {k: v.to(torch.bfloat16) for k, v in tensors.items()}
    out = tmp_path_factory.mktemp("bf16")
    save_file(tensors, out / "rank0.safetensors")
    config = pretrained_config(SHAPE, "bfloat16", 1, 1)
    (out / "config.json").write_text(json.dumps(config))
    return out, tensors


@pytest.mark.parametrize("fmt", list(quant_checkpoints.FORMATS))
def test_quantized_checkpoint_runs_fast_kernels_close_to_bf16(fmt, bf16_ckpt, tmp_path):
    src, dense = bf16_ckpt
    amax = {p: 4.0 for p in LINEARS}  # x below is N(0, 1): 4 sigma
    amax["transformer.layers.0.attention.kv"] = 8.0
    out = quant_checkpoints.write_quantized_checkpoint(src, fmt, amax, tmp_path / fmt, "cpu")
    quantization = json.loads((out / "config.json").read_text())["quantization"]
    tensors = load_file(out / "rank0.safetensors")
    assert quantization["quant_algo"] == quant_checkpoints.FORMATS[fmt]
    assert quantization["exclude_modules"] == ["lm_head"]
    if fmt.startswith("int4"):
        assert quantization["group_size"] == 64
        assert quantization["pre_quant_scale"] == (fmt == "int4_awq")
    kv_scale = tensors.get("transformer.layers.0.attention.kv_cache_scaling_factor")
    if fmt == "fp8_kv":
        assert quantization["kv_cache_quant_algo"] == "FP8"
        assert torch.equal(kv_scale, torch.tensor([8.0 / 448]))
    else:
        assert quantization["kv_cache_quant_algo"] is None and kv_scale is None
    has_prequant = any(k.endswith("prequant_scaling_factor") for k in tensors)
    assert has_prequant == (fmt == "int4_awq")
    for name in ("lm_head.weight", "transformer.vocab_embedding.weight", "transformer.ln_f.weight"):
        assert torch.equal(tensors[name], dense[name])
    g = torch.Generator().manual_seed(1)
    for prefix, (_, in_features) in LINEARS.items():
        linear = build_linear(tensors, [prefix], quantization, torch.float32, "cpu")
        assert not linear.kernel.startswith(("dense", "dequant")), linear.kernel
        x = torch.randn(3, in_features, generator=g)
        expected = x @ dense[f"{prefix}.weight"].float().t()
        y = linear(x)
        assert ((y - expected).norm() / expected.norm()).item() < TOLERANCE[fmt], prefix


def test_group_size_is_128_where_it_divides_else_64():
    assert (
        quant_checkpoints.group_size_for({"hidden_size": 4096, "intermediate_size": 14336}) == 128
    )
    assert quant_checkpoints.group_size_for({"hidden_size": 576, "intermediate_size": 1536}) == 64


def test_quant_plan_defaults_to_the_first_model_and_names_every_problem():
    args = argparse.Namespace(
        quant="int8_wo,fp8",
        quant_models=None,
        quant_decode_only=True,
        quant_throughput_cap_s=60,
    )
    plan = quant_checkpoints.quant_plan(args, ["8b", "smollm"])
    assert plan.formats == ("int8_wo", "fp8") and plan.models == ("8b",)
    assert plan.runs("8b") and not plan.runs("smollm")
    assert plan.reserve_s() == 2 * quant_checkpoints.QUANT_FORMAT_ESTIMATE_S
    bad = argparse.Namespace(**{**vars(args), "quant": "int3", "quant_models": "70b"})
    with pytest.raises(ValueError, match="'int3'.*'70b'"):
        quant_checkpoints.quant_plan(bad, ["8b"])
