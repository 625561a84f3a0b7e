"""Adapter files without torch: config checks, task ids, the served model's LoRA parameters."""

import json
from pathlib import Path

import pytest

from pipeline.errors import ArtifactError, ConfigError
from pipeline.lora.adapters import adapter_dirs, name_for_task, read_adapter, task_id
from pipeline.specs.lora import LoraSpec
from pipeline.triton_models.lora_parameters import lora_parameters, lora_runtime


def adapter(root: Path, name: str, **config) -> Path:
    path = root / name
    path.mkdir(parents=True)
    base = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    (path / "adapter_config.json").write_text(json.dumps(base | config))
    (path / "adapter_model.safetensors").write_bytes(b"")
    return path


def test_scale_is_alpha_over_rank_or_its_root_with_rslora(tmp_path):
    assert read_adapter(adapter(tmp_path, "a"), "a", 64).scale == 2.0
    rs = read_adapter(adapter(tmp_path, "b", r=16, use_rslora=True), "b", 64)
    assert (rs.rank, rs.scale) == (16, 4.0)


def test_every_unsupported_setting_is_named(tmp_path):
    path = adapter(
        tmp_path, "bad", r=128, use_dora=True, bias="all", target_modules=["q_proj", "lm_head"]
    )
    with pytest.raises(ConfigError) as err:
        read_adapter(path, "bad", 64)
    for part in ("use_dora=True", "bias='all'", "['lm_head']", "r=128 exceeds lora.max_rank=64"):
        assert part in str(err.value)


def test_pickles_and_bad_names_are_refused(tmp_path):
    path = adapter(tmp_path, "p")
    (path / "adapter_model.safetensors").rename(path / "adapter_model.bin")
    with pytest.raises(ArtifactError, match="adapter_model.bin, a pickle"):
        read_adapter(path, "p", 64)
    with pytest.raises(ConfigError, match="adapter name '../x'"):
        read_adapter(path, "../x", 64)


def test_task_ids_find_adapters_by_name(tmp_path):
    adapter(tmp_path, "sql")
    adapter(tmp_path, "chat")
    (tmp_path / "not-an-adapter").mkdir()
    assert list(adapter_dirs(tmp_path)) == ["chat", "sql"]
    assert name_for_task(tmp_path, task_id("sql")) == "sql"
    with pytest.raises(ValueError, match=rf"lora_task_id=1 .*{task_id('chat')} \(chat\)"):
        name_for_task(tmp_path, 1)


def test_served_parameters_round_trip_to_engine_options():
    assert lora_parameters(LoraSpec()) == {}  # a model without adapters: as before
    assert lora_runtime({}, "/repo/tensorrt_llm") == {}
    spec = LoraSpec(adapters={"sql": "/a"}, max_rank=16, max_loras=4, target_modules=("q_proj",))
    params = {k: str(v) for k, v in lora_parameters(spec).items()}
    assert lora_runtime(params, "/repo/tensorrt_llm") == {
        "lora_dir": "/repo/tensorrt_llm/lora",
        "lora_max_rank": 16,
        "lora_max_loras": 4,
        "lora_target_modules": ("q_proj",),
    }
