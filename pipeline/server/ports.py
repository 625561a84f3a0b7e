"""Free local ports for servers started by tests and benchmark scripts, and whether a port
accepts connections."""

import socket
import time


def free_ports(num: int) -> list[int]:
    """Ports nothing listens on right now on 127.0.0.1 (bound to port 0, then closed)."""
    socks = [socket.socket() for _ in range(num)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def wait_accepting(host: str, ports: dict[str, int], timeout_s: float) -> list[str]:
    """Wait until each port accepts a connection; the names of those that still refuse after
    timeout_s (none: all accept)."""
    deadline = time.monotonic() + timeout_s
    refusing = dict(ports)
    while True:
        refusing = {name: port for name, port in refusing.items() if not accepts(host, port)}
        if not refusing or time.monotonic() > deadline:
            return [f"{name} {host}:{port}" for name, port in refusing.items()]
        time.sleep(0.05)
