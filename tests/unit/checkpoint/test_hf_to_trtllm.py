"""Convert tiny HF models, reassemble the TP/PP shards by the reference's rules, compare exactly.

The reassembly here is written from docs/trtllm_reference.md section 1.4 (rank = pp_rank*tp +
tp_rank, local layer indices per pp rank, first pp ranks take the extra layers, fused qkv =
per-rank [q; k; v], lm_head split by vocab rows), independently of pipeline.checkpoint.sharding.
"""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.errors import ArtifactError, ConfigError


def _save(model, path):
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=101,
        tie_word_embeddings=False,
        rope_theta=50000.0,
    )
    return _save(LlamaForCausalLM(cfg), tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    torch.manual_seed(1)
    cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        vocab_size=100,
        tie_word_embeddings=True,
    )
    return _save(Qwen2ForCausalLM(cfg), tmp_path_factory.mktemp("qwen"))


def _layer_ranges(num_layers, pp):
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for r in range(pp):
        n = base + (1 if r < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def _reassemble(ckpt_dir, hf_cfg, tp, pp):
    """HF-named full tensors rebuilt from rank files."""
    ranks = {
        (r // tp, r % tp): load_file(ckpt_dir / f"rank{r}.safetensors") for r in range(tp * pp)
    }
    heads, kv = hf_cfg.num_attention_heads, hf_cfg.num_key_value_heads
    hd = hf_cfg.hidden_size // heads
    kv_per_rank = max(kv // tp, 1)
    out = {"model.embed_tokens.weight": ranks[(0, 0)]["transformer.vocab_embedding.weight"]}
    last = {k: v for k, v in ranks.items() if k[0] == pp - 1}
    out["model.norm.weight"] = last[(pp - 1, 0)]["transformer.ln_f.weight"]
    lm = torch.cat([last[(pp - 1, t)]["lm_head.weight"] for t in range(tp)])
    out["lm_head.weight"] = lm[: hf_cfg.vocab_size]
    for p, layers in enumerate(_layer_ranges(hf_cfg.num_hidden_layers, pp)):
        for local, layer in enumerate(layers):
            pre, src = f"transformer.layers.{local}.", f"model.layers.{layer}."
            shards = [ranks[(p, t)] for t in range(tp)]
            for suffix in ("weight", "bias"):
                if pre + f"attention.qkv.{suffix}" not in shards[0]:
                    continue
                qkv = [s[pre + f"attention.qkv.{suffix}"] for s in shards]
                nq = heads // tp * hd
                nk = kv_per_rank * hd
                out[src + f"self_attn.q_proj.{suffix}"] = torch.cat([x[:nq] for x in qkv])
                ks = [x[nq : nq + nk] for x in qkv]
                vs = [x[nq + nk :] for x in qkv]
                if kv >= tp:
                    out[src + f"self_attn.k_proj.{suffix}"] = torch.cat(ks)
                    out[src + f"self_attn.v_proj.{suffix}"] = torch.cat(vs)
                else:  # duplicated heads: rank t holds head t*kv//tp
                    out[src + f"self_attn.k_proj.{suffix}"] = torch.cat(ks[:: tp // kv])
                    out[src + f"self_attn.v_proj.{suffix}"] = torch.cat(vs[:: tp // kv])
            out[src + "self_attn.o_proj.weight"] = torch.cat(
                [s[pre + "attention.dense.weight"] for s in shards], dim=1
            )
            for hf_name, trt_name in (("gate_proj", "fc"), ("up_proj", "gate")):
                out[src + f"mlp.{hf_name}.weight"] = torch.cat(
                    [s[pre + f"mlp.{trt_name}.weight"] for s in shards]
                )
            out[src + "mlp.down_proj.weight"] = torch.cat(
                [s[pre + "mlp.proj.weight"] for s in shards], dim=1
            )
            out[src + "input_layernorm.weight"] = shards[0][pre + "input_layernorm.weight"]
            out[src + "post_attention_layernorm.weight"] = shards[0][pre + "post_layernorm.weight"]
    return out


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("which", ["llama", "qwen"])
def test_shards_reassemble_to_hf_tensors_exactly(which, tp, pp, llama_dir, qwen_dir, tmp_path):
    hf_dir = llama_dir if which == "llama" else qwen_dir
    model_cls = LlamaForCausalLM if which == "llama" else Qwen2ForCausalLM
    hf = model_cls.from_pretrained(hf_dir)
    convert(hf_dir, tmp_path, "float32", tp, pp)
    assert sorted(p.name for p in tmp_path.glob("rank*.safetensors")) == [
        f"rank{r}.safetensors" for r in range(tp * pp)
    ]
    rebuilt = _reassemble(tmp_path, hf.config, tp, pp)
    expected = hf.state_dict()
    if hf.config.tie_word_embeddings:
        expected["lm_head.weight"] = expected["model.embed_tokens.weight"]
    assert set(rebuilt) == set(expected)
    for name, tensor in expected.items():
        assert torch.equal(rebuilt[name], tensor), name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dtype_cast(llama_dir, tmp_path, dtype):
    convert(llama_dir, tmp_path, dtype, 1, 1)
    tensors = load_file(tmp_path / "rank0.safetensors")
    assert {t.dtype for t in tensors.values()} == {getattr(torch, dtype)}
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == dtype


def test_config_fields_match_reference(llama_dir, qwen_dir, tmp_path):
    (tmp_path / "l").mkdir()
    cfg = convert(llama_dir, tmp_path / "l", "bfloat16", 2, 1)
    written = json.loads((tmp_path / "l" / "config.json").read_text())
    assert written == cfg
    assert written["architecture"] == "LlamaForCausalLM"
    assert written["dtype"] == "bfloat16"
    assert written["mapping"] == {"world_size": 2, "tp_size": 2, "pp_size": 1}
    assert written["quantization"] == {"quant_algo": None, "kv_cache_quant_algo": None}
    assert (written["vocab_size"], written["hidden_size"]) == (101, 64)
    assert (written["num_attention_heads"], written["num_key_value_heads"]) == (4, 2)
    assert written["head_size"] == 16 and written["intermediate_size"] == 96
    assert written["position_embedding_type"] == "rope_gpt_neox"
    assert written["rotary_base"] == 50000.0 and written["rotary_scaling"] is None
    assert written["hidden_act"] == "silu"
    (tmp_path / "q").mkdir()
    qwen = convert(qwen_dir, tmp_path / "q", "float16", 1, 1)
    assert qwen["architecture"] == "Qwen2ForCausalLM" and qwen["qwen_type"] == "qwen2"
    assert qwen["attn_bias"] is True and qwen["tie_word_embeddings"] is True


def test_llama3_rope_scaling_is_carried(tmp_path):
    torch.manual_seed(0)
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=50,
        rope_theta=500000.0,
        rope_scaling=scaling,
    )
    hf_dir = _save(LlamaForCausalLM(cfg), tmp_path / "hf")
    (tmp_path / "out").mkdir()
    written = convert(hf_dir, tmp_path / "out", "float32", 1, 1)
    assert written["rotary_base"] == 500000.0
    assert written["rotary_scaling"]["type"] == "llama3"
    assert written["rotary_scaling"]["factor"] == 8.0


def test_unknown_architecture_lists_supported(llama_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in llama_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bad / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="GPT2LMHeadModel.*supported: LlamaForCausalLM"):
        convert(bad, tmp_path, "float32", 1, 1)


def test_tp_that_does_not_divide_heads_is_refused(llama_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"num_attention_heads=4 is not divisible by tp_size=3"):
        convert(llama_dir, tmp_path, "float32", 3, 1)


def test_corrupted_weights_name_the_file(llama_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in llama_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    weights = bad / "model.safetensors"
    weights.write_bytes(b"\x00garbage" + weights.read_bytes()[:100])
    with pytest.raises(ArtifactError, match="model.safetensors: corrupted"):
        convert(bad, tmp_path, "float32", 1, 1)
