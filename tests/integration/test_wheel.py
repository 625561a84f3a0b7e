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

# what the wheel is built from: the package's sources and its config, copied so that the build's
# build/ and egg-info never land in the checkout (a conf/local/ there goes too: setup.py leaves
# it out of the wheel)
SOURCES = ("pyproject.toml", "setup.py", "pipeline", "conf")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


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


def install_the_wheel(root: Path) -> Path:
    """bin/ of a fresh venv holding only the wheel, the current venv's packages beside it."""
    src = root / "src"
    src.mkdir(parents=True)
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


def check_the_package_is_the_wheel(bin_dir: Path, cwd: Path) -> None:
    probe = "import pipeline, pipeline.cli as c; print(pipeline.__file__); print(c.CONF_DIR)"
    out = run([bin_dir / "python", "-c", probe], cwd).stdout.split()
    env_dir = bin_dir.parent.resolve()
    package_file, conf_dir = (Path(p).resolve() for p in out)
    assert package_file.is_relative_to(env_dir), package_file
    assert conf_dir.is_relative_to(env_dir), conf_dir
    assert (conf_dir / "config.yaml").is_file() and not (conf_dir / "local").exists()
    assert (package_file.parent / "engine" / "kernels" / "int4_mma.cu").is_file()
    no_scripts = run([bin_dir / "python", "-c", "import scripts"], cwd, 60, check=False)
    assert "No module named 'scripts'" in no_scripts.stderr


def check_help(bin_dir: Path, cwd: Path) -> None:
    assert "stages: fetch" in run([bin_dir / "pipeline", "--help"], cwd).stdout
    helped = run([bin_dir / "pipeline", "build", "--help"], cwd).stdout
    # every config group's options, and the default model's resolved config
    assert "quant: fp8, int4_awq" in helped and "name: smollm2-135m" in helped


def check_the_cpu_chain(bin_dir: Path, cwd: Path, workdir: Path) -> None:
    # build runs fetch -> convert -> quantize (none) first, each an artifact of its own
    run([bin_dir / "pipeline", "build", "backend=torch", f"workdir={workdir}"], cwd, 600)
    (manifest,) = workdir.rglob("build-torch*/manifest.json")
    assert (manifest.parent / "config.json").is_file()
    assert any(manifest.parent.rglob("*.safetensors"))


def check_the_synthetic_study(bin_dir: Path, cwd: Path, workdir: Path) -> None:
    overrides = [*TINY_STUDY, "study.mappings=[tp1]", "study.batch_sizes=[1]"]
    overrides += ["study.synthetic_shape=smollm2-135m", "study.synthetic_dtype=float32"]
    run([bin_dir / "pipeline", "study", *overrides, f"workdir={workdir}"], cwd, 600)
    (report,) = workdir.rglob("study.json")
    cells = json.loads(report.read_text())["cells"]
    assert [c["key"] for c in cells] == ["tp1-unfused-16x8-b1"]
    assert all(c["is_ok"] for c in cells), [c["detail"] for c in cells]
    (engine_manifest,) = workdir.rglob("study-engine-tp1pp1*/manifest.json")
    assert "pipeline.synthetic.weights:" in engine_manifest.read_text()


def test_the_wheel_alone_runs_the_product_from_another_directory(tmp_path):
    # one test, so that parallel workers never build the wheel twice; each step says what failed
    bin_dir = install_the_wheel(tmp_path / "wheel")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    check_the_package_is_the_wheel(bin_dir, cwd)
    check_help(bin_dir, cwd)
    check_the_cpu_chain(bin_dir, cwd, tmp_path / "work")  # the study reuses its fetch
    check_the_synthetic_study(bin_dir, cwd, tmp_path / "work")
