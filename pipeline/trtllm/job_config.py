"""The resolved job config of a stage, read through the CLI's own `--cfg job` in a subprocess, so
every override and config group applies exactly as `python -m pipeline <stage>` would see them.
The container launcher and the image check both start from it; it reads config, runs nothing."""

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline.errors import StageError

REPO = Path(__file__).resolve().parents[2]


def composed_config(stage: str, overrides: list[str]) -> dict:
    """The resolved job config exactly as `python -m pipeline <stage> <overrides>` would see it."""
    argv = [sys.executable, "-m", "pipeline", stage, *overrides, "--cfg", "job", "--resolve"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise StageError(
            f"{stage}: the config does not compose ({shlex.join(argv)} exited "
            f"{proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return yaml.safe_load(proc.stdout)
