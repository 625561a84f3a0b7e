"""Records of the tritonservers a workdir runs, so that a later start stops the ones whose wrapper
died without stopping them, and a busy port is reported with the process that holds it.

A server dies with its wrapper (TritonServer starts it with a parent-death signal), but not if
that signal failed to stop it, and not its python stubs and engine if the server itself was
SIGKILLed while its wrapper was gone too. Each started server leaves a record (one JSON file in
the run dir): its pid and start time, which identify the process even after the pid is reused,
its wrapper's pid and start time, its shm prefix and temp dir. A later start reads them all: a
server or stub still alive whose wrapper is gone is an orphan of ours and is stopped (SIGTERM to
its process group, SIGKILL after the grace time), its shared memory and temp dir are removed; a
record whose processes are all gone is cleaned up the same way; a live wrapper's is left alone.
"""

import json
import logging
import os
import shutil
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)
SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True, slots=True)
class ServerRecord:
    pid: int
    started_at: float  # psutil create_time(): with pid, the process
    wrapper_pid: int
    wrapper_started_at: float
    argv: list[str]
    shm_prefix: str
    tmp_dir: str

    def write(self, run_dir: Path) -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / f"tritonserver-{self.pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, path)
        return path

    @classmethod
    def of(cls, pid: int, argv: list[str], shm_prefix: str, tmp_dir: Path) -> "ServerRecord":
        return cls(
            pid=pid,
            started_at=_started_at(pid),
            wrapper_pid=os.getpid(),
            wrapper_started_at=_started_at(os.getpid()),
            argv=list(argv),
            shm_prefix=shm_prefix,
            tmp_dir=str(tmp_dir),
        )

    def processes(self) -> list[psutil.Process]:
        """The live processes that are provably this server's: the server itself (same pid and
        start time) and, in its process group, whatever names its shm prefix (the python stubs)
        or runs in its temp dir (their engine process)."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.pid == self.pid:
                    if _same_start(process.create_time(), self.started_at):
                        found.append(process)
                elif os.getpgid(process.pid) == self.pid and self._is_child(process):
                    found.append(process)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return found

    def _is_child(self, process: psutil.Process) -> bool:
        if process.create_time() < self.started_at:
            return False
        if any(self.shm_prefix in arg for arg in process.cmdline()):
            return True
        return process.environ().get("TMPDIR") == self.tmp_dir

    def is_wrapper_alive(self) -> bool:
        try:
            started = psutil.Process(self.wrapper_pid).create_time()
        except psutil.Error:
            return False
        return _same_start(started, self.wrapper_started_at)

    def remove_leftovers(self) -> None:
        """The python backend's shared memory and the temp dir (what a killed server keeps)."""
        for path in SHM_DIR.glob(f"{self.shm_prefix}*"):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


def _started_at(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _same_start(a: float, b: float) -> bool:
    return abs(a - b) < 0.05  # create_time() is derived from clock ticks since boot


def read_records(run_dir: Path) -> list[tuple[Path, ServerRecord]]:
    records = []
    for path in sorted(Path(run_dir).glob("tritonserver-*.json")):
        try:
            records.append((path, ServerRecord(**json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            log.warning("serve: ignoring unreadable server record %s", path)
    return records


def stop_orphans(run_dir: Path, grace_s: float) -> list[str]:
    """Stop the servers of run_dir whose wrapper is gone, clean up after them and after servers
    that are gone; one line per server stopped."""
    stopped = []
    for path, record in read_records(run_dir):
        if record.is_wrapper_alive():
            continue
        processes = record.processes()
        if processes:
            log.warning(
                "serve: stopping tritonserver pid %d and %d more of its processes, left "
                "running when its wrapper (pid %d) died",
                record.pid,
                len(processes) - 1,
                record.wrapper_pid,
            )
            _terminate(processes, grace_s)
            stopped.append(f"tritonserver pid {record.pid} ({len(processes)} processes)")
        record.remove_leftovers()
        path.unlink(missing_ok=True)
    return stopped


def _terminate(processes: list[psutil.Process], grace_s: float) -> None:
    for process in processes:
        _signal(process, signal.SIGTERM)
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        _signal(process, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=grace_s)


def _signal(process: psutil.Process, sig: int) -> None:
    try:
        process.send_signal(sig)
    except psutil.NoSuchProcess:
        pass


def listener(host: str, port: int) -> tuple[int, str] | None:
    """(pid, command) of this user's process listening on host:port, if one is."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or conn.laddr.port != port or conn.pid is None:
            continue
        if conn.laddr.ip not in (host, "0.0.0.0", "::"):
            continue
        try:
            command = " ".join(psutil.Process(conn.pid).cmdline())
        except psutil.Error:
            command = "?"
        return conn.pid, command[:160]
    return None
