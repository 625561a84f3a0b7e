"""Which tp_size / pp_size a checkpoint splits over: every constraint, listed together."""

import pytest

from pipeline.checkpoint.sharding import check_mapping, valid_tp_sizes
from pipeline.errors import ConfigError

# Qwen2-0.5B's shapes (its config.json): 14 heads, 2 KV heads, intermediate 4864, 24 layers
QWEN2_05B = {
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
}


def test_valid_tp_sizes_meet_every_constraint_not_the_heads_alone():
    # 7 and 14 divide the heads, but 2 KV heads and 4864 split over neither
    assert valid_tp_sizes(QWEN2_05B) == [1, 2]
    # SmolLM2-135M: 9 heads, 3 KV heads, intermediate 1536: 9 leaves 1536 unsplit
    smollm = {"num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}
    assert valid_tp_sizes(smollm) == [1, 3]
    # fewer KV heads than ranks: they are duplicated, so 8 ranks over 2 KV heads is fine
    llama = {"num_attention_heads": 32, "num_key_value_heads": 2, "intermediate_size": 14336}
    assert valid_tp_sizes(llama) == [1, 2, 4, 8, 16, 32]


@pytest.mark.parametrize("tp_size", [7, 14, 4])
def test_a_refused_tp_size_lists_only_sizes_that_work(tp_size):
    with pytest.raises(ConfigError) as err:
        check_mapping(QWEN2_05B, tp_size, 1, "convert")
    message = str(err.value)
    assert message.startswith("convert: cannot shard: ") and "valid tp_size: [1, 2];" in message
    for size in valid_tp_sizes(QWEN2_05B):
        check_mapping(QWEN2_05B, size, 1, "convert")


def test_pp_size_is_bounded_by_the_layers():
    check_mapping(QWEN2_05B, 2, 24, "convert")
    with pytest.raises(ConfigError, match=r"pp_size=25 exceeds num_hidden_layers=24 \(valid pp_"):
        check_mapping(QWEN2_05B, 2, 25, "convert")
