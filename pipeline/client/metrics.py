"""Read Triton's Prometheus endpoint (:8002/metrics) into (name, labels) -> value."""

import re

import requests

from pipeline.client.errors import ClientError

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def fetch_metrics(
    metrics_url: str = "http://127.0.0.1:8002/metrics", timeout_s: float = 10.0
) -> dict[tuple[str, frozenset], float]:
    try:
        response = requests.get(metrics_url, timeout=timeout_s)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise ClientError(f"client: cannot read metrics from {metrics_url} ({exc})") from exc
    return parse_metrics(response.text)


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    samples = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = frozenset(LABEL.findall(match["labels"] or ""))
            samples[(match["name"], labels)] = float(match["value"])
    return samples


def metric_value(samples: dict, name: str, **labels: str) -> float | None:
    """The value of `name` whose labels include `labels` (summed when several match)."""
    wanted = set(labels.items())
    values = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    return sum(values) if values else None


def engines_up(samples: dict[tuple[str, frozenset], float]) -> bool:
    """False while a torch engine behind the server is down (pipeline_engine_ready 0, while it
    is started again after a failure), which Triton's own readiness cannot show. A server
    without that gauge (backend=trtllm) counts as up."""
    return all(v != 0 for (name, _), v in samples.items() if name == "pipeline_engine_ready")


def engines_ready(metrics_url: str) -> bool:
    """engines_up at metrics_url; a server whose metrics cannot be read counts as ready (the
    frontend's health check, which reads its own server's metrics)."""
    try:
        samples = fetch_metrics(metrics_url, timeout_s=5.0)
    except ClientError:
        return True
    return engines_up(samples)
