"""AIPerf (NVIDIA's LLM benchmark client) in a venv of its own, never in the project's: its
dependencies (pandas, dash, datasets, pyarrow, its own prometheus-client and rich pins) would
fight the project's. The version is pyproject.toml's `aiperf` extra; the venv is kept outside the
checkout, keyed on that version and this Python's, so CI builds it once per machine.

    python -m tests.integration.openai_api.aiperf_venv   # `make aiperf-setup`: prints its python

uv installs it (tens of seconds, where pip takes minutes: it compiles no bytecode up front);
pip is the fallback.
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from filelock import FileLock

REPO = Path(__file__).resolve().parents[3]
UV = "uv==0.13.9"
INSTALL_TIMEOUT_S = 900
READY = ".ready"  # written last: a venv without it is half-built and built again


class AIPerfUnavailable(Exception):
    """The venv could not be built (no package index, an install that failed): the reason."""


def aiperf_requirement() -> str:
    """The pinned requirement of pyproject.toml's `aiperf` extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (requirement,) = project["optional-dependencies"]["aiperf"]
    return requirement


def venv_dir() -> Path:
    """$PIPELINE_AIPERF_VENV, or one per AIPerf version and Python under the user's cache."""
    if os.environ.get("PIPELINE_AIPERF_VENV"):
        return Path(os.environ["PIPELINE_AIPERF_VENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = aiperf_requirement().partition("==")[2] or "latest"
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache / "llm-pipeline" / f"aiperf-{version}-{python}"


def ensure_venv() -> Path:
    """The venv's python, AIPerf installed; built once (a lock keeps two builders apart)."""
    root = venv_dir()
    python = root / "bin" / "python"
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if (root / READY).exists():
            return python
        shutil.rmtree(root, ignore_errors=True)
        requirement = aiperf_requirement()
        _run([sys.executable, "-m", "venv", str(root)], "create the venv")
        try:
            _run([str(python), "-m", "pip", "install", "-q", UV], f"install {UV}")
            uv = [str(root / "bin" / "uv"), "pip", "install", "-q", "--python", str(python)]
            _run([*uv, requirement], f"install {requirement} with uv")
        except AIPerfUnavailable:  # pip's own index settings may reach what uv's did not
            _run([str(python), "-m", "pip", "install", "-q", requirement], f"pip {requirement}")
        _run([str(python), "-m", "aiperf", "--version"], "run aiperf --version")
        (root / READY).write_text(requirement + "\n")
    return python


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AIPerfUnavailable(f"could not {what}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise AIPerfUnavailable(f"could not {what} (exit {done.returncode}): {' '.join(tail)}")


if __name__ == "__main__":
    print(ensure_venv())
