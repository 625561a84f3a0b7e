"""The frontend's Prometheus metrics (GET /metrics), in a registry of its own per app.

With several frontend processes on one port (workers.py) each writes its values to files in a
directory they share (prometheus_client's multiprocess mode) and /metrics, whichever process
answers it, sums the directory: counters and histograms over all processes. The gauge of
requests in flight is read from the admission (admission.Admission), which already counts them
for every process on the port.
"""

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from pipeline.openai_api.admission import Admission

# seconds: CPU serving (hundreds of ms to seconds) through GPU serving (ms)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def write_to_shared_dir(path: str) -> None:
    """From now on, this process's metric values live in files under path. prometheus_client
    picks its value class when first imported, from the environment, so it is picked again."""
    os.environ[MULTIPROC_ENV] = path
    values.ValueClass = values.get_value_class()


class InFlight:
    """A collector: the admission's engine requests in flight, when scraped."""

    def __init__(self, admission: Admission):
        self.admission = admission

    def collect(self):
        yield GaugeMetricFamily(
            "pipeline_openai_engine_requests_in_flight",
            "engine requests (choices) running for the frontend now",
            value=self.admission.num_in_flight,
        )


class FrontendMetrics:
    def __init__(self, admission: Admission, shared_dir: str | None = None):
        """shared_dir: where the processes on the port write their values (write_to_shared_dir);
        None: this process alone."""
        if shared_dir is not None:
            write_to_shared_dir(shared_dir)
        self.shared_dir, self.in_flight = shared_dir, InFlight(admission)
        self.registry = CollectorRegistry()
        self.registry.register(self.in_flight)
        self.requests = Counter(
            "pipeline_openai_requests",
            "HTTP requests answered, by endpoint and status",
            ["endpoint", "status"],
            registry=self.registry,
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
        registry.register(self.in_flight)
        MultiProcessCollector(registry, path=self.shared_dir)
        return generate_latest(registry)
