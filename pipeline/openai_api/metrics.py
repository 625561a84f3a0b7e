"""The frontend's Prometheus metrics (GET /metrics), in a registry of its own per app.

With several frontend processes on one port (workers.py) each writes its values to files in a
directory they share (prometheus_client's multiprocess mode) and /metrics, whichever process
answers it, sums the directory: counters and histograms over all processes, the gauge of
requests in flight over the live ones.
"""

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

# seconds: CPU serving (hundreds of ms to seconds) through GPU serving (ms)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def write_to_shared_dir(path: str) -> None:
    """From now on, this process's metric values live in files under path. prometheus_client
    picks its value class when first imported, from the environment, so it is picked again."""
    os.environ[MULTIPROC_ENV] = path
    values.ValueClass = values.get_value_class()


class FrontendMetrics:
    def __init__(self, shared_dir: str | None = None):
        """shared_dir: the directory of write_to_shared_dir, called before; None: this process
        alone."""
        self.shared_dir = shared_dir
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "pipeline_openai_requests",
            "HTTP requests answered, by endpoint and status",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "pipeline_openai_engine_requests_in_flight",
            "engine requests (choices) running for the frontend now",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.prompt_tokens = Counter(
            "pipeline_openai_prompt_tokens",
            "prompt tokens of answered requests",
            registry=self.registry,
        )
        self.completion_tokens = Counter(
            "pipeline_openai_completion_tokens",
            "tokens generated for answered requests",
            registry=self.registry,
        )
        self.ttft = Histogram(
            "pipeline_openai_time_to_first_token_seconds",
            "from the request's arrival to its first generated text",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.latency = Histogram(
            "pipeline_openai_request_seconds",
            "from the request's arrival to its last byte (generation requests)",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The text format of every metric: this process's, or all processes' on the port."""
        if self.shared_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.shared_dir)
        return generate_latest(registry)
