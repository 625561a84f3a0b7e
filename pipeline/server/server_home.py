"""A runnable tritonserver from the nvidia-pytriton wheel (Triton 2.51 + the python backend).

The wheel's bin/backends are copied once into a cache dir with the python stub matching the
stubs' Python (stub_python.py; the wheel keeps stubs apart), as pytriton itself does. The copy
loses the $ORIGIN RPATH to the bundled libs, so env() puts them on LD_LIBRARY_PATH, after that
Python's LIBDIR: the stub must load the same libpython as its env, or stdlib and C core disagree.
"""

import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pipeline.errors import StageError
from pipeline.package_files import package_dir
from pipeline.server.stub_python import StubPython


def _pytriton_dir() -> Path:
    # found, not imported: only the bundled server is used, not pytriton's Python API and deps
    root = package_dir("pytriton")
    if root is None:
        raise StageError(
            "serve: nvidia-pytriton is not installed (it ships tritonserver); run "
            "`make setup` or `pip install -e '.[serve]'`"
        )
    return root


@dataclass(frozen=True, slots=True)
class ServerHome:
    root: Path
    libs_dir: Path
    python: StubPython

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def backends_dir(self) -> Path:
        return self.root / "backends"

    @property
    def caches_dir(self) -> Path:
        return self.root / "caches"

    def env(self, tmp_dir: Path) -> dict[str, str]:
        env = dict(os.environ)
        lib_path = [
            self.python.libdir,
            str(self.libs_dir),
            env.get("LD_LIBRARY_PATH", ""),
        ]
        env["LD_LIBRARY_PATH"] = ":".join(p for p in lib_path if p)
        # the stub finds its prefix (and so the venv's site-packages) through python3 on PATH
        env["PATH"] = f"{self.python.bin_dir}:{env.get('PATH', '')}"
        env["TMPDIR"] = str(tmp_dir)  # python_env_* extraction dirs land where stop() cleans up
        return env


def prepare_home(cache_root: Path, python: StubPython) -> ServerHome:
    """Copy the wheel's server once per (pytriton version, python version) under cache_root."""
    dist = _pytriton_dir() / "tritonserver"
    python_version = python.version
    stub = dist / "python_backend_stubs" / python_version / "triton_python_backend_stub"
    if not stub.is_file():
        raise StageError(
            f"serve: nvidia-pytriton has no python backend stub for Python "
            f"{python_version} ({stub}); use Python 3.8-3.13 (deploy.stub_python)"
        )
    libs_dir = dist.parent.parent / "nvidia_pytriton.libs"
    version = metadata.version("nvidia-pytriton")
    root = Path(cache_root) / f"tritonserver-{version}-py{python_version}"
    if not (root / "bin" / "tritonserver").is_file():
        tmp = root.parent / f".{root.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(dist, tmp, ignore=shutil.ignore_patterns("python_backend_stubs"))
        shutil.copy2(stub, tmp / "backends" / "python" / "triton_python_backend_stub")
        shutil.rmtree(root, ignore_errors=True)
        os.rename(tmp, root)
    home = ServerHome(root=root, libs_dir=libs_dir, python=python)
    check_stub_libraries(home)
    return home


def check_stub_libraries(home: ServerHome) -> None:
    """A stub that cannot load its libpython makes Triton hang while loading the python models;
    say so before starting instead (ldd with the server's environment)."""
    stub = home.backends_dir / "python" / "triton_python_backend_stub"
    try:
        result = subprocess.run(
            ["ldd", str(stub)], env=home.env(home.root), capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # no ldd here: the readiness timeout still bounds a hang
    missing = [line.split()[0] for line in result.stdout.splitlines() if "not found" in line]
    if missing:
        raise StageError(
            f"serve: the python backend stub {stub} cannot load {missing}; install "
            f"the shared libpython of {home.python.bin_dir / 'python3'} (Debian/Ubuntu: apt "
            f"install libpython{home.python.version}) or use a Python built with --enable-shared"
        )
