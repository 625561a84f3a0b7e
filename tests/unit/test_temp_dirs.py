"""Temp dirs of stages killed mid-run are removed by the next stage; live owners' dirs are kept."""

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.artifacts import StageRequest, produce_artifact

# a stage that writes 3 MB into its temp dir, says where, and then hangs until killed
HANGING_STAGE = """
import sys, time
from pathlib import Path
from pipeline.artifacts import StageRequest, produce_artifact

def produce(out):
    (out / "part.bin").write_bytes(bytes(3 << 20))
    Path(sys.argv[2] + ".part").write_text(str(out))
    Path(sys.argv[2] + ".part").rename(sys.argv[2])  # whole, or not there yet
    time.sleep(600)

produce_artifact(StageRequest(Path(sys.argv[1]), "m", "build-x", {}), produce)
"""


def _other_stage(workdir: Path) -> Path:
    def produce(out):
        (out / "data.txt").write_text("ok")

    return produce_artifact(StageRequest(workdir, "m", "convert", {}, force=True), produce)


@pytest.fixture
def hanging_stage(tmp_path):
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", HANGING_STAGE, str(tmp_path / "w"), ready])
    deadline = time.monotonic() + 120
    while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), f"the stage never reached its producer (exit code {child.poll()})"
    yield child, Path(ready.read_text())
    child.kill()
    child.wait()


def test_killed_stage_temp_dir_is_removed_and_a_live_one_kept(tmp_path, hanging_stage, caplog):
    child, temp_dir = hanging_stage
    assert temp_dir.is_dir() and temp_dir.parent == tmp_path / "w" / "m"
    assert temp_dir.name.startswith(".build-x-") and str(child.pid) in temp_dir.name
    _other_stage(tmp_path / "w")
    assert (temp_dir / "part.bin").is_file()  # its process is alive and older than the dir
    child.send_signal(signal.SIGKILL)
    child.wait()
    with caplog.at_level(logging.INFO, logger="pipeline"):
        _other_stage(tmp_path / "w")
    assert not temp_dir.exists()
    removed = [r.getMessage() for r in caplog.records if temp_dir.name in r.getMessage()]
    assert len(removed) == 1 and "3.1 MB" in removed[0] and str(child.pid) in removed[0]


def test_temp_dirs_named_for_a_dead_pid_are_removed(tmp_path):
    from pipeline import temp_dirs

    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(ended.stdout)
    target = tmp_path / "m" / "deploy-x-0123456789"
    stale = [
        temp_dirs.temp_path(target, "tmp", pid=dead_pid),
        temp_dirs.temp_path(target, "old", pid=dead_pid),
        target.parent / f".{target.name}.tmp-{dead_pid}",  # named before the host tag
    ]
    other_host = target.parent / f".{target.name}.tmp-00000000-{dead_pid}"
    for path in [*stale, other_host]:
        (path / "sub").mkdir(parents=True)
        (path / "sub" / "f").write_bytes(bytes(1000))
    _other_stage(tmp_path)
    assert not any(path.exists() for path in stale)
    assert other_host.is_dir()  # another host's pid says nothing about its process


def test_reused_pid_counts_as_gone_and_an_older_live_process_does_not(tmp_path):
    from pipeline import temp_dirs

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        # a dir made an hour before this process started: its maker was another process
        assert temp_dirs.is_owner_gone(child.pid, made_at=time.time() - 3600)
        # a dir made now by a process that was already running: its owner may still write to it
        assert not temp_dirs.is_owner_gone(child.pid, made_at=time.time())
        assert not temp_dirs.is_owner_gone(os.getpid(), made_at=time.time())
    finally:
        child.kill()
        child.wait()
    assert temp_dirs.is_owner_gone(child.pid, made_at=time.time())
