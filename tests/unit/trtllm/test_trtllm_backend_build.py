"""TrtllmBackend.check_available and build().

build() is exercised past the availability check with a fake `trtllm-build` on PATH that records
its argv and writes what the reference says the real one writes (see trtllm_helpers). That fake is
the only stand-in for TensorRT-LLM (which cannot be installed here) and is used only in tests; the
Toolchain passed to the backend is plain data (versions, GPU) the fake build pretends to run on.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from pipeline.backends.trtllm_backend import TrtllmBackend
from pipeline.errors import ConfigError, StageError
from pipeline.trtllm.toolchain import Toolchain
from tests.unit.trtllm.trtllm_helpers import (
    install_fake_trtllm_build,
    trtllm_spec,
    write_checkpoint,
)

H100 = Toolchain(
    trtllm_version="1.2.1",
    tensorrt_version="10.14.1.48",
    gpu_name="NVIDIA H100 80GB HBM3",
    gpu_sm=90,
)
HAS_TRTLLM = importlib.util.find_spec("tensorrt_llm") is not None


@pytest.fixture
def fake_build(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)  # so a relative model.cache would show up here
    return install_fake_trtllm_build(tmp_path / "bin", monkeypatch)


def build(tmp_path: Path, name: str, *overrides: str, toolchain: Toolchain = H100) -> tuple:
    spec = trtllm_spec(tmp_path / "work", "hardware=auto", *overrides)
    out_dir = tmp_path / name
    out_dir.mkdir()
    ckpt = write_checkpoint(tmp_path / "ckpt")
    extra = TrtllmBackend(spec, toolchain=toolchain).build(ckpt, tmp_path / "tok", out_dir)
    return spec, out_dir, extra


@pytest.mark.skipif(HAS_TRTLLM, reason="TensorRT-LLM is installed here")
def test_check_available_says_how_to_run_it(tmp_path):
    with pytest.raises(StageError) as err:
        TrtllmBackend(trtllm_spec(tmp_path)).check_available()
    message = str(err.value)
    assert "TensorRT-LLM 1.2.1 (trtllm-build + tensorrt_llm), which is not installed" in message
    assert "`make build BACKEND=trtllm DOCKER=1`" in message
    assert "llm-pipeline/tritonserver:25.12-trtllm-1.2.1" in message
    assert "`make trtllm-image-check`" in message
    assert "docs/guide/trtllm.md documents it" in message


@pytest.mark.skipif(HAS_TRTLLM, reason="TensorRT-LLM is installed here")
def test_check_available_reports_config_problems_first(tmp_path):
    spec = trtllm_spec(tmp_path, "build.kv_cache_type=continuous")
    with pytest.raises(StageError) as err:
        TrtllmBackend(spec).check_available()
    message = str(err.value)
    assert "2 problem(s): (1) build.kv_cache_type=continuous" in message
    assert "(2) backend=trtllm needs TensorRT-LLM" in message


def test_check_available_with_toolchain(tmp_path):
    TrtllmBackend(trtllm_spec(tmp_path, "hardware=auto"), toolchain=H100).check_available()
    with pytest.raises(
        ConfigError,
        match="hardware=a100: targets SM 80, but this machine builds "
        "on NVIDIA H100 80GB HBM3 \\(SM 90\\)",
    ):
        TrtllmBackend(trtllm_spec(tmp_path, "hardware=a100"), toolchain=H100).check_available()


def test_build_runs_trtllm_build_and_records_versions(tmp_path, fake_build):
    spec, out_dir, extra = build(tmp_path, "engine")
    (argv,) = [json.loads(line) for line in fake_build.read_text().splitlines()]
    assert Path(argv[0]).name == "trtllm-build"
    assert argv[1:5] == ["--checkpoint_dir", str(tmp_path / "ckpt"), "--output_dir", str(out_dir)]
    assert extra["trtllm_build_argv"][1:] == argv[1:]
    assert extra["trtllm_version"] == "1.2.1" and extra["tensorrt_version"] == "10.14.1.48"
    assert extra["gpu"] == {"name": "NVIDIA H100 80GB HBM3", "sm": 90}
    assert extra["container_image"] == spec.build.trtllm.container_image
    assert {p.name for p in out_dir.iterdir()} == {"config.json", "rank0.engine", "build.log"}
    log = (out_dir / "build.log").read_text()
    assert log.startswith("$ trtllm-build --checkpoint_dir") and "fake trtllm-build done" in log
    assert not (tmp_path / "model.cache").exists()


def test_timing_cache_is_reused_by_the_next_build(tmp_path, fake_build):
    _, _, first = build(tmp_path, "engine1")
    cache_dir = (
        tmp_path / "work" / "trtllm-timing-cache" / "nvidia-h100-80gb-hbm3-sm90-trt10.14.1.48"
    )
    assert first["timing_cache"]["hit"] is False and first["timing_cache"]["written"] is True
    assert (cache_dir / "model.cache").read_bytes() == b"tactics\n"
    _, _, second = build(tmp_path, "engine2")
    argvs = [json.loads(line) for line in fake_build.read_text().splitlines()]
    assert "--input_timing_cache" not in argvs[0]
    assert argvs[1][argvs[1].index("--input_timing_cache") + 1] == str(cache_dir / "model.cache")
    assert second["timing_cache"]["hit"] is True
    assert second["timing_cache"]["input_sha256"] == first["timing_cache"]["output_sha256"]
    assert (cache_dir / "model.cache").read_bytes() == b"tactics\ntactics\n"
    assert [p.name for p in cache_dir.iterdir() if p.name.startswith(".")] == []


def test_corrupted_timing_cache_is_not_fed_back(tmp_path, fake_build):
    build(tmp_path, "engine1")
    cache = next((tmp_path / "work" / "trtllm-timing-cache").glob("*/model.cache"))
    cache.write_bytes(b"trunc")
    _, _, extra = build(tmp_path, "engine2")
    assert extra["timing_cache"]["hit"] is False


def test_another_gpu_gets_its_own_timing_cache(tmp_path, fake_build):
    build(tmp_path, "engine1")
    l40s = Toolchain("1.2.1", "10.14.1.48", "NVIDIA L40S", 89)
    _, _, extra = build(tmp_path, "engine2", toolchain=l40s)
    assert extra["timing_cache"]["hit"] is False
    assert extra["timing_cache"]["key"] == "nvidia-l40s-sm89-trt10.14.1.48"


def test_failed_build_reports_command_exit_code_and_log(tmp_path, fake_build, monkeypatch):
    monkeypatch.setenv("FAKE_TRTLLM_EXIT", "3")
    with pytest.raises(StageError) as err:
        build(tmp_path, "engine")
    message = str(err.value)
    assert "trtllm-build failed with exit code 3; command: trtllm-build --checkpoint_dir" in message
    assert "simulated build failure" in message
    kept = list((tmp_path / "work" / "logs").glob("trtllm-build-*.log"))
    assert len(kept) == 1 and "simulated build failure" in kept[0].read_text()
    assert not list((tmp_path / "work" / "trtllm-timing-cache").glob("*/model.cache"))
    assert not list((tmp_path / "work" / "trtllm-timing-cache").glob("*/.model.cache.tmp-*"))


def test_engine_from_another_version_fails_the_build(tmp_path, fake_build, monkeypatch):
    monkeypatch.setenv("FAKE_TRTLLM_VERSION", "1.1.0")
    with pytest.raises(
        StageError, match="config.json says TensorRT-LLM 1.1.0, but 1.2.1 is installed"
    ):
        build(tmp_path, "engine")


def test_preflight_runs_before_trtllm_build(tmp_path, fake_build):
    with pytest.raises(ConfigError, match="build.max_input_len=4096"):
        build(tmp_path, "engine", "build.max_input_len=4096")
    assert not fake_build.exists()  # trtllm-build never started


def test_timing_cache_off(tmp_path, fake_build):
    _, out_dir, extra = build(tmp_path, "engine", "build.trtllm.timing_cache=false")
    assert extra["timing_cache"] == {"enabled": False}
    assert not (out_dir / "model.cache").exists()
    assert not (tmp_path / "work" / "trtllm-timing-cache").exists()
