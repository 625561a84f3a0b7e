"""The metrics URL of the server behind --url, read from the tritonserver's own command line."""

import os
import subprocess
import sys

import pytest

from pipeline.client.endpoints import DEFAULT_METRICS_PORT, host_and_port, metrics_url_for
from pipeline.server.ports import free_ports

# listens like tritonserver, and starts a child that inherits the socket, as its python stubs do
SERVER = """
import os, socket, sys, time
ipv6 = sys.argv[2] == "ipv6"  # as gRPC listens: 127.0.0.1 on an IPv6 socket
sock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET)
sock.bind(("::ffff:127.0.0.1" if ipv6 else "127.0.0.1", int(sys.argv[1])))
sock.listen()
sock.set_inheritable(True)
if os.fork() == 0:
    os.execv(sys.executable, ["triton_python_backend_stub", "-c", "import time; time.sleep(60)"])
time.sleep(0.5)  # the stub holds the socket too
print("listening", flush=True)
time.sleep(60)
"""


@pytest.fixture
def listener(tmp_path):
    """A process named tritonserver (its argv[0], as the wheel's server runs) on a free port."""
    started = []

    def start(*options: str, name: str = "tritonserver", family: str = "ipv4") -> int:
        binary = tmp_path / str(len(started)) / name
        binary.parent.mkdir()
        binary.symlink_to(sys.executable)
        (port,) = free_ports(1)
        process = subprocess.Popen(
            [str(binary), "-c", SERVER, str(port), family, *options],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        assert process.stdout.readline() == "listening\n"
        return port

    yield start
    for process in started:
        os.killpg(process.pid, 9)
        process.wait()


def test_the_metrics_port_is_the_servers_own(listener):
    port = listener("--grpc-port=1", "--metrics-port=18123", "--allow-metrics=true")
    assert metrics_url_for(f"127.0.0.1:{port}") == "http://127.0.0.1:18123/metrics"
    assert metrics_url_for(f"http://localhost:{port}") == "http://localhost:18123/metrics"


def test_a_server_with_metrics_off_has_none(listener):
    port = listener("--allow-metrics", "false")
    assert metrics_url_for(f"127.0.0.1:{port}") is None


def test_not_a_tritonserver_or_nothing_there_falls_back_to_the_default_port(listener):
    port = listener("--metrics-port=18123", name="python3")
    assert (
        metrics_url_for(f"127.0.0.1:{port}") == f"http://127.0.0.1:{DEFAULT_METRICS_PORT}/metrics"
    )
    assert metrics_url_for("10.1.2.3:8001") == f"http://10.1.2.3:{DEFAULT_METRICS_PORT}/metrics"


def test_host_and_port_of_either_form():
    assert host_and_port("127.0.0.1:8001") == ("127.0.0.1", 8001)
    assert host_and_port("http://example.com:9000") == ("example.com", 9000)
