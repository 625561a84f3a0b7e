"""`make build BACKEND=trtllm` without TensorRT-LLM fails before any work; DOCKER=1's docker run."""

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.trtllm.container import docker_command, mounts
from pipeline.trtllm.job_config import composed_config
from tests.conftest import REPO

HAS_TRTLLM = importlib.util.find_spec("tensorrt_llm") is not None


@pytest.mark.skipif(HAS_TRTLLM, reason="TensorRT-LLM is installed here")
def test_make_build_trtllm_fails_before_any_work(tmp_path):
    # -o: never (re)run `make setup` from a test, whatever its stamp says
    proc = subprocess.run(
        [
            "make",
            "-s",
            "-o",
            ".venv/.setup-done",
            "build",
            "BACKEND=trtllm",
            f"ARGS=workdir={tmp_path}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "TensorRT-LLM 1.2.1 (trtllm-build + tensorrt_llm), which is not installed" in output
    assert "`make build BACKEND=trtllm DOCKER=1`" in output
    assert "docs/guide/trtllm.md documents it" in output
    assert "Traceback" not in output
    # nothing was fetched, converted or built: only Hydra's log dir exists
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]
    assert not list(tmp_path.rglob("build-trtllm-*"))


def test_docker_command_mounts_repo_and_runs_the_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "secret")
    config = composed_config("build", ["backend=trtllm", f"workdir={tmp_path / 'work'}"])
    argv = docker_command("build", ["backend=trtllm", f"workdir={tmp_path / 'work'}"], config)
    assert argv[:6] == ["docker", "run", "--rm", "--gpus", "all", "--net"]
    assert "llm-pipeline/tritonserver:25.12-trtllm-1.2.1" in argv
    assert argv[argv.index("-w") + 1] == str(REPO)
    volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert volumes == [f"{REPO}:{REPO}", f"{tmp_path / 'work'}:{tmp_path / 'work'}"]
    assert "--shm-size=2g" in argv and f"{os.getuid()}:{os.getgid()}" in argv
    assert argv[argv.index("HF_TOKEN") - 1] == "-e"  # passed through by name, never by value
    assert "secret" not in " ".join(argv)
    script = argv[-1]
    assert argv[-3:-1] == ["bash", "-c"]
    assert script.endswith(
        f"exec python3 -m pipeline build backend=trtllm workdir={tmp_path / 'work'}"
    )
    assert "hydra-core" in script and "requirements/models.txt" in script


def test_image_is_a_config_value(tmp_path):
    overrides = ["build.trtllm.container_image=registry.local/trtllm:1.2.1", f"workdir={tmp_path}"]
    argv = docker_command("build", overrides, composed_config("build", overrides))
    assert "registry.local/trtllm:1.2.1" in argv


def test_paths_inside_the_repo_are_not_mounted_twice():
    config = {"workdir": "artifacts", "build": {"trtllm": {"timing_cache_dir": "/cache/trt"}}}
    assert mounts(config, Path("/repo")) == [Path("/repo"), Path("/cache/trt")]
