"""Prometheus text -> samples; the lookups the tests and bench use."""

from pipeline.client.metrics import metric_value, parse_metrics

TEXT = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 64
nv_inference_request_success{model="tensorrt_llm",version="1"} 65
pipeline_engine_batch_size{model="tensorrt_llm",version="1"} 8
nv_cpu_utilization 0.25
"""


def test_parse_and_look_up():
    samples = parse_metrics(TEXT)
    assert metric_value(samples, "nv_inference_request_success", model="ensemble") == 64
    assert metric_value(samples, "nv_inference_request_success") == 129  # summed
    assert metric_value(samples, "pipeline_engine_batch_size", model="tensorrt_llm") == 8
    assert metric_value(samples, "nv_cpu_utilization") == 0.25
    assert metric_value(samples, "missing") is None


def test_engines_ready_follows_the_engine_gauge(monkeypatch):
    from pipeline.client import metrics

    text = {"now": 'pipeline_engine_ready{model="tensorrt_llm",instance="a"} 1\n'}
    monkeypatch.setattr(metrics, "fetch_metrics", lambda url, timeout_s: parse_metrics(text["now"]))
    assert metrics.engines_ready("http://127.0.0.1:1/metrics")
    text["now"] += 'pipeline_engine_ready{model="tensorrt_llm",instance="b"} 0\n'
    assert not metrics.engines_ready("http://127.0.0.1:1/metrics")
    text["now"] = "nv_inference_count 3\n"  # no torch engine (trtllm): Triton's readiness rules
    assert metrics.engines_ready("http://127.0.0.1:1/metrics")
