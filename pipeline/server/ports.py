"""Free local ports for servers started by tests and benchmark scripts."""

import socket


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
