"""The CLI turns bad config values into one line naming every problem, before writing anything."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bad_values_are_one_line_and_nothing_is_written(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    out = _cli(
        "convert",
        "parallel.tp_size=0",
        "parallel.pp_size=0",
        "model.name=../../x",
        f"workdir={a_file}",
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text
    (line,) = [ln for ln in text.splitlines() if "config:" in ln]
    for problem in (
        "parallel.tp_size: 0",
        "parallel.pp_size: 0",
        "model.name: '../../x'",
        f"workdir: '{a_file}' is a file",
    ):
        assert problem in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.fixture
def read_only_dir():
    """A directory this process cannot write: mode 0555, or for root (which ignores the mode)
    the immutable attribute."""
    path = Path(tempfile.mkdtemp(prefix="pipeline-ro-"))
    is_root = os.geteuid() == 0
    if is_root:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", path]).returncode:
            shutil.rmtree(path)
            pytest.skip("running as root on a filesystem without the immutable attribute")
    else:
        path.chmod(0o555)
    yield path
    if is_root:
        subprocess.run(["chattr", "-i", path], check=True)
    path.chmod(0o755)
    shutil.rmtree(path)


def test_read_only_workdir_is_refused_with_the_fix(read_only_dir):
    out = _cli("fetch", f"workdir={read_only_dir / 'artifacts'}")
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text
    assert f"workdir: '{read_only_dir / 'artifacts'}' cannot be made: {read_only_dir}" in text
    assert "not writable" in text and "set workdir to a writable directory" in text


def test_a_stage_that_fills_a_real_disk_ends_in_one_line(small_disk):
    """fetch of the real SmolLM2 into a 512 KiB workdir: safetensors hits ENOSPC writing the
    weights, and the CLI prints one line: the workdir, the file, the space left and the fix."""
    workdir = small_disk / "workdir"
    out = _cli("fetch", f"workdir={workdir}")
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text and "SafetensorError" not in text
    (line,) = [ln for ln in text.splitlines() if "no space left" in ln]
    assert f"fetch: no space left on the disk of workdir={workdir} (" in line
    assert "/fetch-" in line and "model.safetensors;" in line and " free once" in line
    assert line.endswith("set workdir= to a directory on a larger disk")
    assert list((workdir / "smollm2-135m").iterdir()) == []


def test_every_unknown_key_is_named_at_once(tmp_path):
    """Hydra alone stops at the first key the config lacks; each one reaches the check that
    names them all, beside a bad value."""
    out = _cli("convert", "model.colour=red", "build.foo=1", "parallel.tp_size=0",
               f"workdir={tmp_path}")  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text and "Could not override" not in text
    (line,) = [ln for ln in text.splitlines() if "config:" in ln]
    for problem in ("model.colour: unknown key", "build.foo: unknown key", "parallel.tp_size: 0"):
        assert problem in line
    assert list(tmp_path.iterdir()) == []
