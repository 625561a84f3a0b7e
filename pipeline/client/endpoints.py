"""Where the metrics of the server behind `--url` are served.

Triton does not say its metrics port over HTTP or gRPC, so it is read from the server's own
command line (`--metrics-port`, `--allow-metrics`) when the tritonserver listening on the URL's
port runs on this host (what `pipeline serve` starts, whatever deploy.*_port it was given).
Otherwise it is Triton's default metrics port on the URL's host.
"""

import socket
from pathlib import Path
from urllib.parse import urlsplit

import psutil

# tritonserver's --metrics-port default (and deploy.metrics_port's)
DEFAULT_METRICS_PORT = 8002
FALSE_WORDS = ("false", "0", "off", "no")


def host_and_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url if "://" in url else f"//{url}")
    return parts.hostname or "127.0.0.1", parts.port


def metrics_url_for(url: str) -> str | None:
    """The metrics URL of the server at `url` (host:port or http://host:port); None when that
    server runs with its metrics off (`--allow-metrics=false`)."""
    host, port = host_and_port(url)
    options = _server_options(host, port) if port is not None else None
    metrics_port = DEFAULT_METRICS_PORT
    if options is not None:
        if options.get("allow-metrics", "true").lower() in FALSE_WORDS:
            return None
        metrics_port = int(options.get("metrics-port", DEFAULT_METRICS_PORT))
    return f"http://{host}:{metrics_port}/metrics"


def _server_options(host: str, port: int) -> dict[str, str] | None:
    """`--key=value` / `--key value` options of the tritonserver on this host listening on
    host:port; None when none is found (another host, another user's server, not Triton)."""
    argv = next((a for a in _listener_argvs(host, port) if _is_tritonserver(a)), None)
    if argv is None:
        return None
    options = {}
    for i, arg in enumerate(argv[1:], start=1):
        if not arg.startswith("--"):
            continue
        key, has_value, value = arg[2:].partition("=")
        if not has_value and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
        options[key] = value
    return options


def _is_tritonserver(argv: list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name == "tritonserver"


def _listener_argvs(host: str, port: int) -> list[list[str]]:
    """The command lines of the process psutil says listens on host:port and of its parents: the
    python stubs tritonserver starts inherit its sockets, and psutil names one holder only."""
    try:
        address = socket.gethostbyname(host)
        connections = psutil.net_connections(kind="tcp")
    except (OSError, psutil.Error):
        return []
    argvs = []
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or conn.laddr.port != port or conn.pid is None:
            continue
        # gRPC listens on an IPv6 socket: 127.0.0.1 shows as ::ffff:127.0.0.1
        if conn.laddr.ip not in (address, f"::ffff:{address}", "0.0.0.0", "::"):
            continue
        try:
            process = psutil.Process(conn.pid)
            argvs += [p.cmdline() for p in (process, *process.parents())]
        except psutil.Error:
            continue
    return argvs
