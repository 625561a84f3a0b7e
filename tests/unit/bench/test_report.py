import math

from pipeline.bench.records import RequestRecord
from pipeline.bench.report import markdown, triton_overhead, write_report
from pipeline.bench.sweep_report import markdown as sweep_markdown


def summary(tok_s, ttft):
    return {
        "output_tok_s": tok_s,
        "request_per_s": tok_s / 8,
        "ttft_ms_p50": ttft,
        "ttft_ms_p99": ttft * 2,
        "itl_ms_p50": 10.0,
        "e2e_ms_p50": 100.0,
        "num_ok": 4,
        "num_errors": 0,
        "error_messages": [],
    }


def test_triton_overhead_is_server_over_direct():
    targets = {
        "direct": {"summary": summary(100.0, 20.0)},
        "server": {"summary": summary(90.0, 25.0)},
    }
    overhead = triton_overhead(targets)
    assert overhead["output_tok_s_ratio"] == 0.9
    assert overhead["ttft_ms_p50_added"] == 5.0
    assert triton_overhead({"direct": targets["direct"]}) is None


def test_report_files(tmp_path):
    rec = RequestRecord("r0", 4, 0.0, start_s=0.0, end_s=0.3)
    for t in (0.1, 0.2, 0.3):
        rec.add_chunk(t, 1)
    report = {
        "model": "m",
        "backend": "torch",
        "hardware": "cpu",
        "settings": {"input_len": 4},
        "targets": {
            "direct": {
                "summary": summary(10.0, 100.0),
                "warmup": {"num_requests": 1, "duration_s": 0.5},
            }
        },
        "triton_vs_direct": None,
    }
    paths = write_report(tmp_path, report, {"direct": [rec]})
    assert "| output tok/s | 10.00 |" in paths["markdown"].read_text()
    assert paths["latency_plot"].stat().st_size > 1000
    assert "served_path_plot" not in paths  # no traced server
    assert "warm-up 1 requests" in markdown(report)


def test_sweep_markdown_names_the_threshold():
    data = {
        "model": "m",
        "backend": "torch",
        "hardware": "cpu",
        "target": "direct",
        "results": [
            {"size": 1, "is_ok": True, "metrics": {"output_tok_s": 5.0}},
            {
                "size": 2,
                "is_ok": False,
                "failure": "kv_capacity",
                "metrics": {"output_tok_s": math.nan},
            },
        ],
        "max_ok_size": 1,
        "threshold_size": 2,
        "threshold_failure": "kv_capacity",
        "threshold_detail": "only 1 of 2",
        "kv_capacity": None,
    }
    text = sweep_markdown(data)
    assert "| 2 | FAIL (kv_capacity) |" in text and "Threshold: size 2 fails" in text
