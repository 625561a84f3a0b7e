"""The temp dirs a stage writes its artifact in, and removal of those a killed stage left behind.

A stage writes `.<artifact>.tmp-<space>-<pid>/` and renames it into place; the artifact it replaces
goes to `.<artifact>.old-<space>-<pid>/` until removed. A stage killed in between (SIGKILL, power
loss) leaves these behind. `<space>` names the host and pid namespace the pid belongs to, so a
workdir shared with other hosts or containers never has their live dirs judged by our pids.
"""

import hashlib
import logging
import os
import re
import shutil
import socket
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

# dirs from before <space> was in the name have none (and are judged as this space's)
TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?:tmp|old)-(?:(?P<space>[0-9a-f]{8})-)?(?P<pid>\d+)")
# psutil derives a start time from the boot time in whole seconds (up to 1 s early); a process
# counts as started after a dir was made only past this margin, so clock grain never removes a live
# owner's dir
START_TIME_MARGIN_S = 2.0


def _process_space() -> str:
    try:
        pid_namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}|{pid_namespace}".encode()).hexdigest()[:8]


def temp_path(target: Path, kind: str, pid: int | None = None) -> Path:
    """Where this process (or `pid`) writes `target` (kind "tmp") or parks the one it replaces
    (kind "old")."""
    pid = os.getpid() if pid is None else pid
    return target.parent / f".{target.name}.{kind}-{_process_space()}-{pid}"


def is_owner_gone(pid: int, made_at: float) -> bool:
    """Whether the process that made a dir at `made_at` (epoch s) has ended: no process has that
    pid, it is a zombie, or the one that has it started after the dir was made (a reused pid)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        started = process.create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False
    return started > made_at + START_TIME_MARGIN_S


def _num_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                continue
    return total


def remove_abandoned(workdir: Path) -> list[Path]:
    """Remove the temp dirs under `workdir/<model>/` whose process has ended; return them."""
    space, removed = _process_space(), []
    for path in sorted(Path(workdir).glob("*/.*")):
        match = TEMP_NAME.fullmatch(path.name)
        if match is None or match["space"] not in (None, space) or path.is_symlink():
            continue
        pid = int(match["pid"])
        try:
            # ctime: set by the kernel when the dir or its entries change; a copy's utime (as
            # shutil.copytree gives its destination) cannot move it back before the owner started
            made_at = path.stat().st_ctime
        except FileNotFoundError:
            continue
        if not path.is_dir() or pid == os.getpid() or not is_owner_gone(pid, made_at):
            continue
        num_bytes = _num_bytes(path)
        shutil.rmtree(path, ignore_errors=True)
        log.info(
            "removed %s (%.1f MB): left by process %d, which has ended",
            path,
            num_bytes / 1e6,
            pid,
        )
        removed.append(path)
    return removed
