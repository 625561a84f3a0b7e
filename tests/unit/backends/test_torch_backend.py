"""backend=torch refuses what its engine cannot run, with the key to change, before any copy."""

import json

import pytest
import torch
from safetensors.torch import save_file

from pipeline.backends.torch_backend import TorchBackend, build_engine_dir
from pipeline.errors import ArtifactError, ConfigError
from tests.conftest import make_spec

CHECKPOINT = {
    "architecture": "LlamaForCausalLM",
    "dtype": "float32",
    "vocab_size": 16,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_size": 4,
    "intermediate_size": 8,
    "hidden_act": "silu",
    "position_embedding_type": "rope_gpt_neox",
    "max_position_embeddings": 64,
    "rotary_base": 10000.0,
    "rotary_scaling": None,
    "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
    "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
}


def backend(tmp_path, *overrides):
    return TorchBackend(make_spec("build", "backend=torch", *overrides, workdir=tmp_path))


def checkpoint(tmp_path, **changes):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({**CHECKPOINT, **changes}))
    save_file({"lm_head.weight": torch.zeros(16, 8)}, ckpt / "rank0.safetensors")
    return ckpt


def tokenizer(tmp_path):
    tok = tmp_path / "hf"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "model.safetensors").write_text("weights")
    (tok / "manifest.json").write_text("{}")
    return tok


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("build.max_beam_width=65", "widths 1 to 64"),
        ("build.kv_cache_type=continuous", "kv_cache_type=paged"),
        ("build.max_input_len=4096", "max_input_len=4096 exceeds"),
    ],
)
def test_build_limits_are_checked_before_work(tmp_path, override, match):
    with pytest.raises(ConfigError, match=match):
        backend(tmp_path, override).check_available()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"architecture": "GPTJForCausalLM"}, "GPTJForCausalLM"),
        ({"rotary_scaling": {"type": "yarn", "factor": 4.0}}, "yarn"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"quantization": {"quant_algo": "NVFP4"}}, "NVFP4"),
        (
            {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "INT8"}},
            "kv_cache_quant_algo=INT8 is not supported: quantize with quant.kv_cache=fp8",
        ),
    ],
)
def test_unrunnable_checkpoints_are_refused(tmp_path, changes, match):
    out = tmp_path / "engine"
    out.mkdir()
    with pytest.raises(ConfigError, match=match):
        backend(tmp_path).build(checkpoint(tmp_path, **changes), tokenizer(tmp_path), out)
    assert not any(out.iterdir())


def test_missing_rank_file_is_an_artifact_error(tmp_path):
    ckpt = checkpoint(tmp_path)
    (ckpt / "rank0.safetensors").unlink()
    out = tmp_path / "engine"
    out.mkdir()
    with pytest.raises(ArtifactError, match="rank0.safetensors"):
        backend(tmp_path).build(ckpt, tokenizer(tmp_path), out)


def test_a_tensor_parallel_checkpoint_needs_every_rank_file(tmp_path):
    ckpt = checkpoint(tmp_path, mapping={"world_size": 2, "tp_size": 2, "pp_size": 1})
    out = tmp_path / "engine"
    out.mkdir()
    with pytest.raises(ArtifactError, match="rank1.safetensors is missing"):
        backend(tmp_path).build(ckpt, tokenizer(tmp_path), out)


def test_engine_dir_is_self_contained(tmp_path):
    out = tmp_path / "engine"
    out.mkdir()
    spec = make_spec("build", "backend=torch", "build.tokens_per_block=16", workdir=tmp_path)
    # no probe: this checkpoint's weights are a stub no model loads from (the probe's own tests
    # build real engines: tests/integration/test_engine_probe.py)
    extra = build_engine_dir(
        spec.build, checkpoint(tmp_path), tokenizer(tmp_path), out, probe_device=None
    )
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["backend"] == "torch" and cfg["pretrained_config"] == CHECKPOINT
    build = cfg["build_config"]
    assert build["plugin_config"]["tokens_per_block"] == 16 and build["max_beam_width"] == 1
    assert build["torch"] == {
        "use_cuda_graph": True,
        "compile": False,
        "triton_kernels": True,
        "enable_prefix_caching": True,
    }
    assert (out / "rank0.safetensors").is_file()
    assert sorted(p.name for p in (out / "tokenizer").iterdir()) == ["tokenizer.json"]
    assert extra["quant_algo"] is None
