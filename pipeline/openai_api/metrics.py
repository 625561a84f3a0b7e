"""The frontend's Prometheus metrics (GET /metrics), in a registry of its own per app."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# seconds: CPU serving (hundreds of ms to seconds) through GPU serving (ms)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class FrontendMetrics:
    def __init__(self):
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
