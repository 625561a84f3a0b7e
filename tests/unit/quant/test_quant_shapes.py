"""Block-size and pipeline-split checks run before modelopt, with a size that works."""

import pytest
import torch
from safetensors.torch import save_file

from pipeline.errors import ConfigError
from pipeline.quant.shapes import (
    check_block_size,
    check_pipeline_split,
    check_trtllm_padding,
    decoder_linear_shapes,
    trtllm_linear_features,
)

# one SmolLM2 layer: hidden 576 (= 9 x 64), 9 + 3 + 3 heads of 64, intermediate 1536
SMOLLM_LAYER = {
    "model.layers.0.self_attn.q_proj.weight": (576, 576),
    "model.layers.0.self_attn.k_proj.weight": (192, 576),
    "model.layers.0.self_attn.v_proj.weight": (192, 576),
    "model.layers.0.self_attn.o_proj.weight": (576, 576),
    "model.layers.0.mlp.gate_proj.weight": (1536, 576),
    "model.layers.0.mlp.up_proj.weight": (1536, 576),
    "model.layers.0.mlp.down_proj.weight": (576, 1536),
}


def test_headers_give_only_decoder_linears(tmp_path):
    tensors = {name: torch.zeros(shape) for name, shape in SMOLLM_LAYER.items()}
    tensors["model.layers.0.input_layernorm.weight"] = torch.zeros(576)
    tensors["model.embed_tokens.weight"] = torch.zeros(10, 576)
    save_file(tensors, tmp_path / "model.safetensors")
    assert decoder_linear_shapes(tmp_path) == SMOLLM_LAYER


def test_smollm_hidden_576_refuses_128_and_suggests_64():
    with pytest.raises(ConfigError) as err:
        check_block_size(SMOLLM_LAYER, 128, 1, "int4_awq", is_fixed=False)
    message = str(err.value)
    assert "model.layers.0.self_attn.q_proj has in_features 576 with block size 128" in message
    assert "(6 layers affected)" in message and "set quant.block_size=64" in message
    check_block_size(SMOLLM_LAYER, 64, 1, "int4_awq", is_fixed=False)


def test_tp_splits_row_parallel_in_features():
    # tp=3: o_proj gets 192 per rank, down_proj 512; 64 still works; 1728 / 3 = 576 does not
    # hold whole 128-blocks
    check_block_size(SMOLLM_LAYER, 64, 3, "int4_awq", is_fixed=False)
    with pytest.raises(
        ConfigError,
        match="down_proj has in_features 576 per TP rank "
        "\\(tp_size=3\\).*set quant.block_size=64 .*or change "
        "parallel.tp_size",
    ):
        check_block_size(
            {"model.layers.0.mlp.down_proj.weight": (576, 1728)}, 128, 3, "int4_wo", is_fixed=False
        )


def test_no_useful_block_size_says_so():
    # tp=9: down_proj's 1536 inputs split into 170.67 -> 170 per rank; only tiny groups divide it
    with pytest.raises(ConfigError, match="no block size >= 16 divides every layer per TP rank"):
        check_block_size(
            {"model.layers.0.mlp.down_proj.weight": (576, 1530)}, 128, 9, "int4_wo", is_fixed=False
        )


def test_fixed_block_formats_say_the_model_cannot_use_them():
    with pytest.raises(ConfigError, match="fixed by the nvfp4 format, so this model cannot use it"):
        check_block_size(
            {"model.layers.0.mlp.down_proj.weight": (8, 40)}, 16, 1, "nvfp4", is_fixed=True
        )


def test_pipeline_split_must_be_even():
    check_pipeline_split(30, 3)
    with pytest.raises(
        ConfigError,
        match="num_hidden_layers=30 is not divisible by "
        "parallel.pp_size=4; use one of \\[1, 2, 3, 5, 6",
    ):
        check_pipeline_split(30, 4)


SMOLLM_CONFIG = {  # SmolLM2-135M: hidden 576 = 9 x 64, 9 + 3 + 3 heads of 64, intermediate 1536
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
}


@pytest.mark.parametrize(
    "quant_algo,group,tp,bad",
    [
        ("W4A8_AWQ", 64, 1, "attention.qkv in_features 576"),  # pads to 128
        ("W8A16", None, 2, "attention.qkv in_features 576"),  # 64 x 2
        ("W4A16", None, 2, "mlp.proj out_features 576"),
        ("W4A16_AWQ", 64, 2, "attention.dense in_features 576"),
    ],
)
def test_trtllm_weight_only_padding_is_refused(quant_algo, group, tp, bad):
    with pytest.raises(ConfigError) as err:
        check_trtllm_padding(SMOLLM_CONFIG, quant_algo, group, tp, "recipe")
    message = str(err.value)
    assert bad in message and "layers pad their features to a multiple of" in message
    assert "parallel.tp_size" in message


@pytest.mark.parametrize(
    "quant_algo,group,tp",
    [
        ("W8A16", None, 1),
        ("W4A16", None, 3),  # 576 / 192, 960 / 192, 1536 / 192
        ("W4A16_AWQ", 64, 1),
        ("W4A16_AWQ", 64, 3),
        ("FP8", None, 2),  # FP8 / SmoothQuant / NVFP4 layers do not pad
        ("W8A8_SQ_PER_CHANNEL", None, 2),
        ("NVFP4", None, 2),
    ],
)
def test_trtllm_shapes_that_load(quant_algo, group, tp):
    check_trtllm_padding(SMOLLM_CONFIG, quant_algo, group, tp, "recipe")


def test_kv_heads_repeated_up_to_tp_count_in_qkv():
    # 9 heads, 3 KV heads at tp 9: each rank gets one KV head, qkv out = (9 + 2 * 9) * 64
    assert trtllm_linear_features(SMOLLM_CONFIG, 9)["attention.qkv"] == (576, 27 * 64)
    assert trtllm_linear_features(SMOLLM_CONFIG, 1)["attention.qkv"] == (576, 960)
