"""Every option file of every config group composes and converts to specs; bad keys are refused."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pipeline.config import to_specs
from pipeline.errors import ConfigError
from tests.conftest import CONF_DIR, make_spec

GROUPS = [p for p in Path(CONF_DIR).iterdir() if p.is_dir() and p.name != "local"]
NEEDS_SOURCE = {("model", "hf-local"), ("model", "hub")}


@pytest.mark.parametrize(
    "group,option", sorted((g.name, f.stem) for g in GROUPS for f in g.glob("*.yaml"))
)
def test_every_option_composes(group, option, tmp_path):
    extra = ["model.source=org/name"] if (group, option) in NEEDS_SOURCE else []
    spec = make_spec("convert", f"{group}={option}", *extra, workdir=tmp_path)
    assert spec.stage == "convert"


def test_unknown_key_and_wrong_type_are_all_reported(tmp_path):
    with pytest.raises(ConfigError) as err:
        make_spec("convert", "+model.colour=red", "build.max_batch_size=lots", workdir=tmp_path)
    assert "model.colour: unknown key" in str(err.value)
    assert "build.max_batch_size: expected int, got 'lots'" in str(err.value)


def test_overrides_reach_the_specs(tmp_path):
    spec = make_spec("convert", "parallel.tp_size=3", "model.dtype=bfloat16", workdir=tmp_path)
    assert spec.parallel.tp_size == 3 and spec.parallel.world_size == 3
    assert spec.model.dtype == "bfloat16"


def test_bad_values_are_all_reported_at_once(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(ConfigError) as err:
        make_spec(
            "convert",
            "parallel.tp_size=0",
            "parallel.pp_size=-1",
            "model.name=../escape",
            workdir=a_file,
        )
    message = str(err.value)
    assert "parallel.tp_size: 0, must be 1 or more" in message
    assert "parallel.pp_size: -1, must be 1 or more" in message
    assert "model.name: '../escape'" in message and "[A-Za-z0-9]" in message
    assert f"workdir: {str(a_file)!r} is a file" in message


def _composed(tmp_path):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=["stage=convert", f"workdir={tmp_path}"])


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".", "/etc", ".hidden", "a\\b", ""])
def test_model_names_that_leave_the_workdir_are_refused(name, tmp_path):
    cfg = _composed(tmp_path)
    OmegaConf.update(cfg, "model.name", name)
    with pytest.raises(ConfigError, match=r"model.name: .* \(fix the YAML"):
        to_specs(cfg)


@pytest.mark.parametrize("name", ["smollm2-135m", "Llama-3.1-8B-Instruct", "qwen2_0.5b"])
def test_ordinary_model_names_are_accepted(name, tmp_path):
    spec = make_spec("convert", f"model.name={name}", workdir=tmp_path)
    assert spec.model.name == name


def test_workdir_under_a_file_is_refused(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        ConfigError, match=r"workdir: .*a_file/artifacts.* cannot be made: .*a_file is a file"
    ):
        make_spec("convert", workdir=tmp_path / "a_file" / "artifacts")
    assert make_spec("convert", workdir=tmp_path / "new" / "artifacts").workdir.endswith(
        "artifacts"
    )


@pytest.mark.parametrize(
    "overrides, dtype",
    [
        (("hardware=cpu",), "float32"),  # the torch engine on the CPU: bf16 would be far slower
        (("hardware=h100",), "bfloat16"),
        (("hardware=h100", "backend.device=cpu"), "float32"),
        (("hardware=cpu", "backend=trtllm"), "bfloat16"),  # TensorRT-LLM runs on a GPU
        (("hardware=cpu", "model.dtype=bfloat16"), "bfloat16"),  # asked for: kept
    ],
)
@pytest.mark.parametrize("model", ["hf-local", "hub"])
def test_a_models_auto_dtype_suits_the_hardware(tmp_path, model, overrides, dtype):
    spec = make_spec("convert", f"model={model}", "model.source=org/name", *overrides,
                     workdir=tmp_path)  # fmt: skip
    assert spec.model.dtype == dtype


def test_value_overrides_reach_the_spec_check_and_the_rest_stay_as_given():
    from pipeline.cli import _overrides_checked_together

    argv = ["model=hub", "model.dtype=float16,bfloat16", "workdir=w", "hydra.run.dir=x",
            "hydra/launcher=basic", "+extra=1", "~gone", "--multirun"]  # fmt: skip
    assert _overrides_checked_together(argv) == [
        "model=hub", "++model.dtype=float16,bfloat16", "++workdir=w", "hydra.run.dir=x",
        "hydra/launcher=basic", "+extra=1", "~gone", "--multirun",
    ]  # fmt: skip
