"""What a server leaves when its wrapper dies, with real processes standing in for tritonserver,
its stubs and its engine: the parent-death signal, and the next start stopping what is provably
the dead wrapper's (and nothing else)."""

import dataclasses
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from pipeline.errors import StageError
from pipeline.server import server_records
from pipeline.server.ports import free_ports
from pipeline.server.server_records import ServerRecord, read_records, stop_orphans
from pipeline.server.triton_server import Endpoints, _exit_with_parent, exit_description

GONE_S = 30  # generous: these processes only sleep

# "tritonserver": starts a "stub" (the shm prefix in its argv), an "engine" (TMPDIR in its env)
# and a bystander in its process group that is neither, prints their pids, sleeps
FAKE_SERVER = """
import os, subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
stub = subprocess.Popen(sleep + [sys.argv[1] + "stub"])
engine = subprocess.Popen(sleep, env=dict(os.environ, TMPDIR=sys.argv[2]))
bystander = subprocess.Popen(sleep, env={k: v for k, v in os.environ.items() if k != "TMPDIR"})
print(stub.pid, engine.pid, bystander.pid, flush=True)
time.sleep(600)
"""


def alive(pids) -> list[int]:
    """Those still running (a zombie has exited)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def wait_gone(pids) -> list[int]:
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=GONE_S)
    return alive(pids)


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (a wrapper that died)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def fake_server(tmp_path):
    prefix = f"pipelinetest{os.getpid()}-{tmp_path.name}_"
    tmp_dir = tmp_path / f"tmp-{prefix}"
    tmp_dir.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-c", FAKE_SERVER, prefix, str(tmp_dir)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    children = [int(pid) for pid in server.stdout.readline().split()]
    shm = server_records.SHM_DIR / f"{prefix}region"
    shm.write_bytes(b"x")
    yield server, children, prefix, tmp_dir, shm
    for pid in [server.pid, *children]:
        if alive([pid]):
            os.kill(pid, signal.SIGKILL)
    server.wait()
    shm.unlink(missing_ok=True)


def test_the_next_start_stops_the_orphans_of_a_dead_wrapper_and_cleans_up(
    tmp_path, fake_server, dead_pid
):
    server, (stub, engine, bystander), prefix, tmp_dir, shm = fake_server
    record = ServerRecord.of(server.pid, ["tritonserver"], prefix, tmp_dir)
    record = dataclasses.replace(record, wrapper_pid=dead_pid)
    run_dir = tmp_path / "run"
    record.write(run_dir)
    assert [p.pid for p in record.processes()] == sorted([server.pid, stub, engine])

    assert stop_orphans(run_dir, grace_s=GONE_S) == [f"tritonserver pid {server.pid} (3 processes)"]
    server.wait(GONE_S)
    assert wait_gone([stub, engine]) == []
    assert alive([bystander]) == [bystander]  # in the group, but not provably the server's
    assert not shm.exists() and not tmp_dir.exists()
    assert read_records(run_dir) == []


def test_a_live_wrappers_server_is_left_alone(tmp_path, fake_server):
    server, children, prefix, tmp_dir, shm = fake_server
    ServerRecord.of(server.pid, ["tritonserver"], prefix, tmp_dir).write(tmp_path / "run")
    assert stop_orphans(tmp_path / "run", grace_s=GONE_S) == []
    assert alive([server.pid, *children]) == [server.pid, *children]
    assert shm.exists() and len(read_records(tmp_path / "run")) == 1


def test_a_gone_servers_record_and_leftovers_are_removed(tmp_path, dead_pid):
    prefix = f"pipelinetest{os.getpid()}-gone_"
    shm = server_records.SHM_DIR / f"{prefix}region"
    shm.write_bytes(b"x")
    tmp_dir = tmp_path / "tmp-gone"
    tmp_dir.mkdir()
    record = ServerRecord(dead_pid, 1.0, dead_pid, 1.0, ["tritonserver"], prefix, str(tmp_dir))
    record.write(tmp_path / "run")
    assert stop_orphans(tmp_path / "run", grace_s=GONE_S) == []
    assert not shm.exists() and not tmp_dir.exists()
    assert read_records(tmp_path / "run") == []


INTERMEDIATE = """
import subprocess, sys, os
from pipeline.server.triton_server import _exit_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True, preexec_fn=_exit_with_parent(os.getpid()))
print(child.pid, flush=True)
child.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_server_process_dies_with_its_wrapper():
    wrapper = subprocess.Popen([sys.executable, "-c", INTERMEDIATE], stdout=subprocess.PIPE)
    child = int(wrapper.stdout.readline())
    assert alive([child]) == [child]
    wrapper.send_signal(signal.SIGKILL)
    wrapper.wait()
    assert wait_gone([child]) == []


def test_exit_with_parent_is_a_preexec_fn_on_linux():
    assert callable(_exit_with_parent(os.getpid())) == sys.platform.startswith("linux")


def test_a_busy_port_names_the_process_listening_there():
    (port,) = free_ports(1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        others = free_ports(2)
        with pytest.raises(StageError, match=rf"pid {os.getpid()} \(`.*`\) listens there"):
            Endpoints("127.0.0.1", port, *others).check_free()


@pytest.mark.parametrize(
    ("code", "words"),
    [(1, "exited with code 1"), (-9, "killed by SIGKILL"), (-15, "stopped by SIGTERM")],
)
def test_exit_description_names_the_signal(code, words):
    assert words in exit_description(code)
