"""The default TensorRT-LLM image and version agree, and a mismatched image is refused.

NGC's tritonserver:25.12-trtllm-python-py3 holds TensorRT-LLM 1.1.0 (docs/trtllm_reference.md,
section 6.1), so the default is the locally built 1.2.1 image. `docker` here is a stand-in on
PATH (tests only) that answers `info`, `image inspect` and the version probe from environment
variables; the logic under test is ours.
"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.specs.build import TrtllmBuildOptions
from pipeline.trtllm import container, image
from tests.conftest import REPO, make_spec

NGC_25_12 = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"
FAKE_DOCKER = """
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_RECORD"], "a") as f:
    f.write(json.dumps(args) + "\\n")
images = json.loads(os.environ.get("FAKE_DOCKER_IMAGES", "{}"))  # name -> TensorRT-LLM version
if args[0] == "info":
    sys.exit(0 if os.environ.get("FAKE_DOCKER_DAEMON", "up") == "up" else 1)
if args[:2] == ["image", "inspect"]:
    sys.exit(0 if args[2] in images else 1)
if args[0] == "run" and "--entrypoint" in args:
    print(images[args[args.index("--entrypoint") + 2]])
    sys.exit(0)
sys.exit(0)
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "docker"
    exe.write_text(f"#!{sys.executable}\n{FAKE_DOCKER}")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    record = tmp_path / "docker-argv.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_RECORD", str(record))
    return record


def images_here(monkeypatch, **by_name) -> None:
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", json.dumps(by_name))


def test_default_image_holds_the_default_version(tmp_path):
    trtllm = make_spec("build", "backend=trtllm", workdir=tmp_path).build.trtllm
    assert trtllm.container_image == image.LOCAL_IMAGE
    assert trtllm.trtllm_version == image.LOCAL_IMAGE_TRTLLM_VERSION == "1.2.1"
    # the dataclass default (used without Hydra) is the composed config's (one source)
    assert TrtllmBuildOptions().container_image == trtllm.container_image
    assert TrtllmBuildOptions().trtllm_version == trtllm.trtllm_version


def test_check_passes_for_the_built_image(fake_docker, monkeypatch, caplog, tmp_path):
    images_here(monkeypatch, **{image.LOCAL_IMAGE: "1.2.1"})
    caplog.set_level("INFO", logger="pipeline.trtllm.image")
    assert image.main([f"workdir={tmp_path}"]) == 0
    assert "holds TensorRT-LLM 1.2.1, as configured" in caplog.text


def test_check_refuses_ngc_25_12_for_1_2_1(fake_docker, monkeypatch, caplog, tmp_path):
    images_here(monkeypatch, **{NGC_25_12: "1.1.0"})
    assert image.main([f"build.trtllm.container_image={NGC_25_12}", f"workdir={tmp_path}"]) == 1
    assert f"{NGC_25_12} holds TensorRT-LLM 1.1.0, but build.trtllm.trtllm_version=1.2.1" in (
        caplog.text
    )


def test_check_says_how_to_get_a_missing_image(fake_docker, monkeypatch, caplog, tmp_path):
    images_here(monkeypatch)
    assert image.main([f"workdir={tmp_path}"]) == 1
    assert f"container_image={image.LOCAL_IMAGE} is not here; build it with upstream's" in (
        caplog.text
    )
    assert "docs/trtllm_reference.md, section 6.2" in caplog.text
    # upstream's recipe with the default tag, and NGC's ready-made image with the version it holds
    recipe = "make -C docker tritonrelease_build CUDA_ARCHS='<sm>-real' IMAGE_WITH_TAG="
    assert recipe + image.LOCAL_IMAGE in caplog.text
    assert (
        f"build.trtllm.container_image={NGC_25_12} build.trtllm.trtllm_version=1.1.0" in caplog.text
    )


def test_check_points_a_1_1_0_config_at_ngc(fake_docker, monkeypatch, caplog, tmp_path):
    images_here(monkeypatch, **{image.LOCAL_IMAGE: "1.2.1"})
    assert image.main(["build.trtllm.trtllm_version=1.1.0", f"workdir={tmp_path}"]) == 1
    assert "holds TensorRT-LLM 1.2.1, but build.trtllm.trtllm_version=1.1.0" in caplog.text
    assert f"`docker pull {NGC_25_12}`, then set build.trtllm.container_image={NGC_25_12}" in (
        caplog.text
    )
    assert "tritonrelease_build" not in caplog.text  # the recipe makes 1.2.1, not 1.1.0


def test_check_reports_a_stopped_daemon(fake_docker, monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("FAKE_DOCKER_DAEMON", "down")
    assert image.main([f"workdir={tmp_path}"]) == 1
    assert "docker is installed but its daemon does not answer" in caplog.text


def test_make_target_without_docker_says_so(tmp_path):
    path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if not Path(p, "docker").exists())
    # -o: never (re)run `make setup` from a test, whatever its stamp says
    proc = subprocess.run(
        ["make", "-s", "-o", ".venv/.setup-done", "trtllm-image-check", f"ARGS=workdir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in output
    assert "needs docker (+ the NVIDIA Container Toolkit to run on GPUs), which is not on PATH" in (
        output
    )


def test_docker_stage_refuses_an_image_it_cannot_start(fake_docker, monkeypatch, tmp_path):
    images_here(monkeypatch)  # the default local image was never built, and cannot be pulled
    assert container.main(["build", "backend=trtllm", f"workdir={tmp_path}"]) == 1
    calls = [json.loads(line)[0] for line in fake_docker.read_text().splitlines()]
    assert "run" not in calls  # refused before any container started


def test_registry_images_may_be_pulled_by_docker_run():
    assert image.is_registry_reference(NGC_25_12)
    assert image.is_registry_reference("localhost:5000/trtllm:1.2.1")
    assert not image.is_registry_reference(image.LOCAL_IMAGE)
    assert not image.is_registry_reference("tritonserver")
