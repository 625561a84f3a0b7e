"""quantize refuses bad input before loading the model or modelopt, with the key to change."""

import subprocess
import sys

import pytest

from pipeline.errors import ConfigError
from pipeline.stages import quantize
from tests.conftest import REPO, make_spec


def run_cli(*args: str, workdir) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "quantize", *args, f"workdir={workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_recipe_name_lists_the_recipes(tmp_path):
    result = run_cli("quant=int3_awq", workdir=tmp_path)
    assert result.returncode == 1
    assert "Could not find 'quant/int3_awq'" in result.stderr
    for name in ("fp8", "int4_awq", "int4_wo", "int8_sq", "int8_wo", "none", "nvfp4", "w4a8_awq"):
        assert f"\t{name}\n" in result.stderr


def test_calib_size_zero_is_one_line_exit_1(tmp_path):
    result = run_cli("quant=fp8", "quant.calib_size=0", workdir=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output
    assert "quantize: quant.calib_size must be >= 1 (got 0)" in output


def test_recipe_name_override_is_checked_against_the_table(tmp_path):
    with pytest.raises(ConfigError, match="quant.name='fp4' is not a recipe; use one of none, fp8"):
        quantize.run(make_spec("quantize", "quant=fp8", "quant.name=fp4", workdir=tmp_path))


def test_missing_calibration_file(tmp_path):
    spec = make_spec(
        "quantize", "quant=int8_wo", f"quant.calib_dataset={tmp_path}/news.txt", workdir=tmp_path
    )
    with pytest.raises(ConfigError, match="news.txt'?: no such file"):
        quantize.run(spec)


def test_trtllm_target_without_fp8_is_refused(tmp_path):
    spec = make_spec("quantize", "quant=fp8", "backend=trtllm", "hardware=a100", workdir=tmp_path)
    with pytest.raises(
        ConfigError,
        match="hardware=a100 \\(SM 80\\): quant=fp8 \\(FP8\\) needs "
        "SM >= 89; recipes this GPU runs: int8_sq, int4_awq",
    ):
        quantize.run(spec)


def test_smollm_block_size_128_names_a_layer_and_64(session_workdir, smollm_hf_dir):
    spec = make_spec("quantize", "quant=int4_awq", workdir=session_workdir)
    with pytest.raises(ConfigError) as err:
        quantize.run(spec)
    message = str(err.value)
    assert "model.layers.0.mlp.gate_proj has in_features 576 with block size 128" in message
    assert "(180 layers affected); set quant.block_size=64" in message


def test_none_is_converts_checkpoint(session_workdir, smollm_ckpt_dir):
    assert quantize.run(make_spec("quantize", workdir=session_workdir)) == smollm_ckpt_dir
    with pytest.raises(ConfigError, match="quant.kv_cache=fp8 needs a modelopt recipe"):
        quantize.run(make_spec("quantize", "quant.kv_cache=fp8", workdir=session_workdir))


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["quant=nvfp4"], "the torch engine has no NVFP4 kernels"),
        (["quant=fp8", "quant.kv_cache=int8"], "has no int8 KV cache"),
        (["quant=int8_wo", "parallel.tp_size=3"], "runs tp_size=1, pp_size=1 only"),
    ],
)
def test_engine_gate_refuses_what_the_engine_cannot_run(overrides, expected, tmp_path):
    spec = make_spec("quantize", *overrides, "quant.gate_runtime=engine", workdir=tmp_path)
    with pytest.raises(ConfigError, match=f"quant.gate_runtime=engine: .*{expected}"):
        quantize.run(spec)


def test_engine_gate_refuses_the_trtllm_weight_only_format(tmp_path):
    spec = make_spec(
        "quantize", "quant=int8_wo", "backend=trtllm", "quant.gate_runtime=engine", workdir=tmp_path
    )
    with pytest.raises(ConfigError, match="int8_wo for backend=trtllm exports float weights"):
        quantize.run(spec)
    assert not list(tmp_path.rglob("quantize-*"))


def test_trtllm_refuses_shapes_its_weight_only_layers_pad(smollm_hf_dir, tmp_path):
    spec = make_spec(
        "quantize",
        "model=hf-local",
        f"model.source={smollm_hf_dir}",
        "quant=w4a8_awq",
        "quant.block_size=64",
        "backend=trtllm",
        workdir=tmp_path,
    )
    with pytest.raises(
        ConfigError, match="W4A8_AWQ layers pad their features to a multiple of 128"
    ):
        quantize.run(spec)
    assert not list(tmp_path.rglob("quantize-*"))  # before modelopt, nothing written
