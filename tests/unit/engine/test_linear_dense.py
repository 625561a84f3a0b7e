import pytest
import torch

from pipeline.engine.layers.linear import build_linear, is_excluded
from pipeline.errors import ArtifactError


def test_fused_dense_matches_separate_linears_with_partial_bias():
    torch.manual_seed(0)
    weights = {
        "a.weight": torch.randn(4, 3),
        "b.weight": torch.randn(2, 3),
        "b.bias": torch.randn(2),
    }
    linear = build_linear(weights, ["a", "b"], {"quant_algo": None}, torch.float32, "cpu")
    x = torch.randn(5, 3)  # [T, in]
    expected = torch.cat(
        [x @ weights["a.weight"].T, x @ weights["b.weight"].T + weights["b.bias"]], dim=-1
    )
    assert linear.output_sizes == [4, 2]
    torch.testing.assert_close(linear(x), expected)


def test_dense_casts_to_requested_dtype():
    weights = {"a.weight": torch.randn(4, 3)}
    linear = build_linear(weights, ["a"], {"quant_algo": None}, torch.bfloat16, "cpu")
    assert linear(torch.randn(2, 3, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_missing_weight_is_a_clear_error():
    with pytest.raises(ArtifactError, match="x.weight"):
        build_linear({}, ["x"], {"quant_algo": None}, torch.float32, "cpu")


def test_exclude_modules_matches_full_prefix_or_leaf_name():
    quant = {"quant_algo": "W8A16", "exclude_modules": ["lm_head", "*.mlp.proj"]}
    assert is_excluded("lm_head", quant)
    assert is_excluded("transformer.layers.3.mlp.proj", quant)
    assert not is_excluded("transformer.layers.3.mlp.fc", quant)
    assert is_excluded("transformer.layers.3.mlp.fc", {"quant_algo": None})
