"""pipeline.synthetic.weights: each rank of any split holds the slices of one model, as
convert splits a real one, so TP=N and PP=N benchmark engines compute what TP=1 computes."""

import torch

from pipeline.synthetic.shapes import TINY
from pipeline.synthetic.weights import SyntheticWeights, checkpoint_config

SHAPE = {**TINY, "vocab_size": 257}  # not a multiple of 2: the split head is padded


def ranks(tp: int, pp: int, quant: str | None = None) -> list[SyntheticWeights]:
    cfg = checkpoint_config(SHAPE, "float32", tp, pp, quant)
    return [SyntheticWeights(cfg, rank, torch.device("cpu")) for rank in range(tp * pp)]


def test_tp2_slices_join_into_the_tp1_tensors():
    (whole,), (r0, r1) = ranks(1, 1), ranks(2, 1)
    for name in ("mlp.fc", "mlp.gate"):  # column-parallel: output rows
        key = f"transformer.layers.1.{name}.weight"
        assert torch.equal(torch.cat([r0[key], r1[key]]), whole[key])
    for name in ("attention.dense", "mlp.proj"):  # row-parallel: input columns
        key = f"transformer.layers.0.{name}.weight"
        assert torch.equal(torch.cat([r0[key], r1[key]], dim=1), whole[key])
    head = torch.cat([r0["lm_head.weight"], r1["lm_head.weight"]])
    assert head.shape[0] == 258 and torch.equal(head[:257], whole["lm_head.weight"])
    assert torch.equal(
        r1["transformer.vocab_embedding.weight"], whole["transformer.vocab_embedding.weight"]
    )
    # qkv: each rank its query heads and KV heads, in q, k, v order
    q = SHAPE["num_attention_heads"] * SHAPE["hidden_size"] // SHAPE["num_attention_heads"]
    key = "transformer.layers.0.attention.qkv.weight"
    assert torch.equal(torch.cat([r0[key][: q // 2], r1[key][: q // 2]]), whole[key][:q])


def test_pp2_stages_number_their_layers_from_0_and_hold_only_theirs():
    (whole,), (first, last) = ranks(1, 1), ranks(1, 2)
    key = "transformer.layers.{}.mlp.proj.weight"
    assert torch.equal(last[key.format(0)], whole[key.format(1)])
    assert "lm_head.weight" not in first and "transformer.vocab_embedding.weight" not in last


def test_fp8_linears_carry_modelopt_tensors_and_the_head_stays_dense():
    (rank,) = ranks(1, 1, "FP8")
    prefix = "transformer.layers.0.mlp.fc"
    assert rank[f"{prefix}.weight"].dtype == torch.float8_e4m3fn
    assert f"{prefix}.activation_scaling_factor" in rank
    assert rank["lm_head.weight"].dtype == torch.float32
