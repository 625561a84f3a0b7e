"""The wheel is the product: built from this checkout, installed without dependencies into a
fresh virtual environment outside it (the installed dependencies reused through a .pth file), and
run from another directory, it answers --help, runs the CPU chain up to `build` on the default
model and the study's smallest synthetic-weights run. Whatever the package reads at run time
(conf/, the Triton python models, the kernels' sources) must be in the wheel, and nothing may
come from the checkout: neither its `pipeline` nor its `scripts`."""

import json
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.test_study_cpu import TINY_STUDY

pytestmark = pytest.mark.slow

# what the wheel is built from: the package's sources and its config (a copy, so the build's
# build/ and egg-info never land in the checkout, and no conf/local/ goes in)
SOURCES = ("pyproject.toml", "setup.py", "pipeline", "conf")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "local")


def run(argv: list, cwd: Path, timeout: float = 300, check: bool = True):
    # no PYTHONPATH: the checkout must not be importable from the new environment
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env | {"OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, f"{argv[:3]}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> Path:
    """bin/ of a fresh venv holding only the wheel, the current venv's packages beside it."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=IGNORED)
        else:
            shutil.copy2(REPO / name, src / name)
    dist = root / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", dist, src], cwd=root)  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], cwd=root)
    # path lines, not site.addsitedir: the current venv's own .pth files (the checkout's
    # editable install among them) do not run in the new one
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root)
    pth = Path(purelib.stdout.strip()) / "current_env.pth"
    pth.write_text("\n".join(site.getsitepackages()) + "\n")
    return env_dir / "bin"


def test_the_installed_package_is_the_wheel_and_never_the_checkout(wheel_env, tmp_path):
    probe = "import pipeline, pipeline.cli as c; print(pipeline.__file__); print(c.CONF_DIR)"
    out = run([wheel_env / "python", "-c", probe], tmp_path).stdout.split()
    env_dir = wheel_env.parent.resolve()
    package_file, conf_dir = (Path(p).resolve() for p in out)
    assert package_file.is_relative_to(env_dir), package_file
    assert conf_dir.is_relative_to(env_dir), conf_dir
    assert (conf_dir / "config.yaml").is_file() and not (conf_dir / "local").exists()
    kernel_source = package_file.parent / "engine" / "kernels" / "int4_mma.cu"
    assert kernel_source.is_file()
    no_scripts = run([wheel_env / "python", "-c", "import scripts"], tmp_path, 60, check=False)
    assert "No module named 'scripts'" in no_scripts.stderr


def test_help_and_a_stage_help_compose_the_packaged_config(wheel_env, tmp_path):
    assert "stages: fetch" in run([wheel_env / "pipeline", "--help"], tmp_path).stdout
    helped = run([wheel_env / "pipeline", "build", "--help"], tmp_path).stdout
    # every config group's options, and the default model's resolved config
    assert "quant: fp8, int4_awq" in helped and "name: smollm2-135m" in helped


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wheel-workdir")


def test_the_cpu_chain_builds_the_default_model(wheel_env, workdir, tmp_path):
    # build runs fetch -> convert -> quantize (none) first, each an artifact of its own
    run([wheel_env / "pipeline", "build", "backend=torch", f"workdir={workdir}"], tmp_path, 600)
    (manifest,) = workdir.rglob("build-torch*/manifest.json")
    engine_dir = manifest.parent
    assert (engine_dir / "config.json").is_file()
    assert any(engine_dir.rglob("*.safetensors"))


def test_the_study_runs_on_synthetic_weights_of_the_smallest_shape(wheel_env, workdir, tmp_path):
    overrides = [*TINY_STUDY, "study.mappings=[tp1]", "study.batch_sizes=[1]"]
    overrides += ["study.synthetic_shape=smollm2-135m", "study.synthetic_dtype=float32"]
    argv = [wheel_env / "pipeline", "study", *overrides, f"workdir={workdir}"]
    run(argv, tmp_path, 600)
    (report,) = workdir.rglob("study.json")
    cells = json.loads(report.read_text())["cells"]
    assert [c["key"] for c in cells] == ["tp1-unfused-16x8-b1"]
    assert all(c["is_ok"] for c in cells), [c["detail"] for c in cells]
    (engine_manifest,) = workdir.rglob("study-engine-tp1pp1*/manifest.json")
    assert "pipeline.synthetic.weights:" in engine_manifest.read_text()
