"""The frontend's Prometheus metrics (GET /metrics), in a registry of its own per app.

With several frontend processes on one port (workers.py) each writes its values to files in a
directory they share (prometheus_client's multiprocess mode) and /metrics, whichever process
answers it, sums the directory: counters and histograms over all processes. The gauges of
requests in flight and waiting are read from the admission (admission.Admission), which already
counts them for every process on the port; the engine's gauges (running, waiting, KV blocks) are
read from tritonserver's metrics when scraped, so one scrape of this port feeds a dashboard.

vLLM's names (vllm/v1/metrics/loggers.py, v0.11) and these: num_requests_running:
pipeline_openai_engine_requests_in_flight; num_requests_waiting: pipeline_openai_requests_waiting
(this frontend's queue) and pipeline_engine_waiting_requests (the engine's); kv_cache_usage_perc:
pipeline_openai_kv_cache_usage_perc; time_to_first_token_seconds,
request_time_per_output_token_seconds, e2e_request_latency_seconds,
request_queue_time_seconds: pipeline_openai_time_to_first_token_seconds,
pipeline_openai_time_per_output_token_seconds, pipeline_openai_request_seconds,
pipeline_openai_queue_wait_seconds; prompt_tokens_total, generation_tokens_total:
pipeline_openai_prompt_tokens_total, pipeline_openai_completion_tokens_total.
"""

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from pipeline.client.errors import ClientError
from pipeline.client.metrics import fetch_metrics
from pipeline.openai_api.admission import Admission

# seconds: CPU serving (hundreds of ms to seconds) through GPU serving (ms)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# seconds per generated token: a GPU's ~1 ms through a busy CPU's ~1 s
TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
# the engine's gauges on tritonserver's port (torch_llm.METRICS) that /metrics passes on
ENGINE_GAUGES = (
    "pipeline_engine_ready",
    "pipeline_engine_running_requests",
    "pipeline_engine_waiting_requests",
    "pipeline_engine_free_kv_blocks",
    "pipeline_engine_kv_blocks",
    "pipeline_engine_prefix_cache_queried_tokens",
    "pipeline_engine_prefix_cache_hit_tokens",
    "pipeline_engine_host_kv_hit_blocks",
    "pipeline_engine_spec_acceptance_rate",
    "pipeline_engine_spec_mean_accepted_tokens",
)
ENGINE_SCRAPE_TIMEOUT_S = 2.0
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def write_to_shared_dir(path: str) -> None:
    """From now on, this process's metric values live in files under path. prometheus_client
    picks its value class when first imported, from the environment, so it is picked again."""
    os.environ[MULTIPROC_ENV] = path
    values.ValueClass = values.get_value_class()


class Gauges:
    """A collector, read when scraped: the admission's requests in flight and waiting, and the
    engine's gauges from tritonserver's metrics at engine_metrics_url (none when it cannot be
    read, or serves no torch engine: backend=trtllm)."""

    def __init__(self, admission: Admission, engine_metrics_url: str):
        self.admission, self.engine_metrics_url = admission, engine_metrics_url

    def collect(self):
        yield GaugeMetricFamily(
            "pipeline_openai_engine_requests_in_flight",
            "engine requests (choices) running for the frontend now",
            value=self.admission.num_in_flight,
        )
        yield GaugeMetricFamily(
            "pipeline_openai_requests_waiting",
            "requests waiting in the frontend's queue for room to run",
            value=self.admission.num_waiting,
        )
        yield from self._engine()

    def _engine(self):
        if not self.engine_metrics_url:
            return
        try:
            samples = fetch_metrics(self.engine_metrics_url, ENGINE_SCRAPE_TIMEOUT_S)
        except ClientError:
            return
        families: dict[str, GaugeMetricFamily] = {}
        for (name, labels), value in samples.items():
            if name in ENGINE_GAUGES:
                label_names = sorted(k for k, _ in labels)
                family = families.setdefault(
                    name, GaugeMetricFamily(name, f"{name} of tritonserver", labels=label_names)
                )
                family.add_metric([dict(labels)[k] for k in label_names], value)
        yield from families.values()
        free = [v for (n, _), v in samples.items() if n == "pipeline_engine_free_kv_blocks"]
        total = [v for (n, _), v in samples.items() if n == "pipeline_engine_kv_blocks"]
        if free and total and sum(total):
            yield GaugeMetricFamily(
                "pipeline_openai_kv_cache_usage_perc",
                "fraction of the engine's paged-KV blocks in use (1 = full)",
                value=1 - sum(free) / sum(total),
            )


class FrontendMetrics:
    def __init__(
        self, admission: Admission, engine_metrics_url: str, shared_dir: str | None = None
    ):
        """engine_metrics_url: tritonserver's metrics (the engine's gauges; "" = none).
        shared_dir: where the processes on the port write their values (write_to_shared_dir);
        None: this process alone."""
        if shared_dir is not None:
            write_to_shared_dir(shared_dir)
        self.shared_dir, self.gauges = shared_dir, Gauges(admission, engine_metrics_url)
        self.registry = CollectorRegistry()
        self.registry.register(self.gauges)
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
        self.time_per_token = Histogram(
            "pipeline_openai_time_per_output_token_seconds",
            "from a request's first generated text to its last, per token after the first",
            buckets=TOKEN_BUCKETS_S,
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "pipeline_openai_queue_wait_seconds",
            "from the request's admission check to its start (0: it found room)",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The text format of every metric: this process's, or all processes' on the port."""
        if self.shared_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        registry.register(self.gauges)
        MultiProcessCollector(registry, path=self.shared_dir)
        return generate_latest(registry)
