"""The recipe table: every conf/quant option maps to a recipe; bad keys and targets are refused."""

from pathlib import Path

import pytest

from pipeline.errors import ConfigError, StageError
from pipeline.hardware import target_sm
from pipeline.quant.recipes import (
    RECIPES,
    check_export_labels,
    check_target,
    for_backend,
    recipe_for,
)
from pipeline.specs.quant import QuantSpec
from tests.conftest import CONF_DIR, make_spec

RECIPE_FILES = sorted(p.stem for p in (Path(CONF_DIR) / "quant").glob("*.yaml"))


def test_every_recipe_has_an_option_file_and_back():
    assert set(RECIPE_FILES) == {"none", *RECIPES}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_option_file_composes_to_a_valid_recipe(name, tmp_path):
    quant = make_spec("quantize", f"quant={name}", workdir=tmp_path).quant
    assert quant.name == name
    assert recipe_for(quant) is RECIPES[name]


def test_conf_defaults_match_the_issue(tmp_path):
    spec = lambda name: make_spec("quantize", f"quant={name}", workdir=tmp_path).quant  # noqa: E731
    assert spec("int4_awq").block_size == 128
    assert spec("int8_sq").smoothquant_alpha == 1.0  # modelopt's default
    assert spec("fp8").kv_cache == "none" and spec("fp8").export_dtype == "float16"


def test_unknown_recipe_name_lists_the_recipes():
    with pytest.raises(ConfigError, match="not a recipe; use one of none, fp8, int8_sq, int4_awq"):
        recipe_for(QuantSpec(name="int3"))


def test_every_problem_with_recipe_keys_is_reported_at_once():
    quant = QuantSpec(
        name="fp8", kv_cache="fp4", block_size=64, smoothquant_alpha=0.5, export_dtype="float32"
    )
    with pytest.raises(ConfigError) as err:
        recipe_for(quant)
    message = str(err.value)
    for part in (
        "quant.kv_cache='fp4'",
        "quant.block_size=64 does not apply to fp8",
        "quant.smoothquant_alpha=0.5 applies to int8_sq only",
        "quant.export_dtype='float32'",
    ):
        assert part in message


@pytest.mark.parametrize(
    "quant,expected",
    [
        (QuantSpec(name="int4_awq"), "int4_awq needs quant.block_size >= 1"),
        (QuantSpec(name="int4_wo", block_size=0), "int4_wo needs quant.block_size >= 1"),
        (QuantSpec(name="int8_sq", smoothquant_alpha=1.5), "smoothquant_alpha in [0, 1]"),
    ],
)
def test_recipe_specific_keys_are_required(quant, expected):
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        recipe_for(quant)


@pytest.mark.parametrize(
    "recipe,kv,hardware,expected",
    [
        ("fp8", "none", "a100", "fp8 (FP8) needs SM >= 89"),
        ("w4a8_awq", "none", "a10", "needs SM >= 89"),
        ("nvfp4", "none", "h100", "nvfp4 (NVFP4) needs SM >= 100"),
        ("int8_sq", "none", "b200", "not supported by TensorRT-LLM on SM 100-119"),
        ("int4_awq", "none", "b300", "not supported by TensorRT-LLM on SM 100-119"),
        ("int8_wo", "none", "b200", "not supported by TensorRT-LLM on SM 100-119"),
        ("int4_wo", "none", "gb200", "not supported by TensorRT-LLM on SM 100-119"),
        ("int8_wo", "fp8", "a100", "quant.kv_cache=fp8 needs SM >= 89"),
        ("fp8", "int8", "b200", "quant.kv_cache=int8 is not supported"),
    ],
)
def test_target_refuses_what_the_gpu_cannot_run(recipe, kv, hardware, expected):
    with pytest.raises(ConfigError, match="recipes this GPU runs") as err:
        check_target(RECIPES[recipe], kv, target_sm(hardware), hardware)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "recipe,kv,hardware",
    [
        ("fp8", "fp8", "h100"),
        ("w4a8_awq", "fp8", "l40s"),
        ("nvfp4", "fp8", "b200"),
        ("nvfp4", "none", "rtx5090"),
        ("int8_sq", "int8", "a100"),
        ("int4_awq", "none", "a10"),
        ("int4_awq", "int8", "rtx5090"),  # SM 120 is outside 100-119
        ("fp8", "none", "b300"),
    ],
)
def test_target_accepts_what_the_gpu_runs(recipe, kv, hardware):
    check_target(RECIPES[recipe], kv, target_sm(hardware), hardware)


def test_blackwell_lists_what_it_can_run():
    with pytest.raises(ConfigError, match="recipes this GPU runs: fp8, nvfp4 "):
        check_target(RECIPES["int8_wo"], "none", 100, "b200")


def test_export_labels_must_match_the_table():
    check_export_labels(RECIPES["fp8"], "fp8", {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"})
    with pytest.raises(StageError, match="expected \\('W4A16_AWQ', None\\)"):
        check_export_labels(
            RECIPES["int4_wo"], "none", {"quant_algo": "W4A16", "kv_cache_quant_algo": None}
        )


def test_weight_only_recipes_export_one_format_per_backend(caplog):
    int8, int4 = QuantSpec(name="int8_wo"), QuantSpec(name="int4_wo", block_size=128)
    # torch: modelopt's quantized tensors, which the torch engine reads
    assert recipe_for(int8, "torch") is RECIPES["int8_wo"]
    assert (recipe_for(int4, "torch").quant_algo, recipe_for(int4).uses_block_size) == (
        "W4A16_AWQ",
        True,
    )
    # trtllm: float weights under the labels whose weights trtllm-build quantizes per channel
    with caplog.at_level("INFO", logger="pipeline.quant.recipes"):
        trt8, trt4 = recipe_for(int8, "trtllm"), recipe_for(int4, "trtllm")
    assert (trt8.quant_algo, trt8.build_quantizes_bits) == ("W8A16", 8)
    assert (trt4.quant_algo, trt4.build_quantizes_bits, trt4.uses_block_size) == ("W4A16", 4, False)
    assert "quant.block_size=128 is not used" in caplog.text
    # every other recipe is the same checkpoint for both backends
    for name in set(RECIPES) - {"int8_wo", "int4_wo"}:
        assert for_backend(RECIPES[name], "trtllm") is RECIPES[name]


def test_trtllm_weight_only_keeps_the_sm_rules():
    trt4 = for_backend(RECIPES["int4_wo"], "trtllm")
    with pytest.raises(ConfigError, match="quant=int4_wo \\(W4A16\\) is not supported"):
        check_target(trt4, "none", 100, "b200")
    check_target(trt4, "none", 80, "a100")
