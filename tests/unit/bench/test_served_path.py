"""Client records joined with Triton's trace (the format tritonserver 2.51 writes at level
TIMESTAMPS): consecutive hops that add up to each request's end-to-end time."""

import json

import pytest

from pipeline.bench import served_path
from pipeline.bench.records import RequestRecord
from pipeline.bench.session import check_bench_spec
from pipeline.errors import ConfigError
from pipeline.specs.bench import BenchSpec

ORIGIN_S = 1000.0
MS = 1_000_000  # ns


def ns(ms_after_origin: float) -> int:
    return int(round((ORIGIN_S * 1e3 + ms_after_origin) * MS))


def entries(trace_id: int, request_id: str, start_ms: float, llm_model: str = "ensemble"):
    """One request's trace as Triton writes it: the top model's header and stamps (one per item),
    and its tensorrt_llm child's. Sent at start_ms; each hop is a known length."""
    top = [
        {"id": trace_id, "model_name": llm_model, "model_version": 1, "request_id": request_id},
        ("GRPC_WAITREAD_START", start_ms - 50.0),  # the kept stream waited for this request
        ("GRPC_WAITREAD_END", start_ms + 1.0),
        ("REQUEST_START", start_ms + 1.1),
        ("GRPC_SEND_START", start_ms + 20.0),  # first response
        ("GRPC_SEND_END", start_ms + 20.2),
        ("GRPC_SEND_START", start_ms + 60.0),
        ("GRPC_SEND_START", start_ms + 100.0),  # final
        ("REQUEST_END", start_ms + 100.5),
    ]
    llm = [("QUEUE_START", start_ms + 1.2), ("COMPUTE_START", start_ms + 3.0)]
    llm += [("COMPUTE_END", start_ms + 7.0)]
    items = []
    if llm_model == "ensemble":
        child = trace_id + 1
        items.append(
            {"id": child, "model_name": "tensorrt_llm", "model_version": 1, "parent_id": trace_id}
        )
        items += [{"id": child, "timestamps": [{"name": n, "ns": ns(t)}]} for n, t in llm]
    else:
        top += llm
    items.append(top[0])
    items += [{"id": trace_id, "timestamps": [{"name": n, "ns": ns(t)}]} for n, t in top[1:]]
    return items


def record(request_id: str, start_ms: float) -> RequestRecord:
    rec = RequestRecord(request_id, 16, scheduled_s=start_ms / 1e3, start_s=start_ms / 1e3)
    rec.add_chunk((start_ms + 22.0) / 1e3, 1)
    rec.add_chunk((start_ms + 61.0) / 1e3, 5)
    rec.add_chunk((start_ms + 102.0) / 1e3, 2)
    rec.end_s = (start_ms + 102.0) / 1e3
    return rec


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "trace.json"
    # log-frequency splits the trace over .0, .1, ...; a request may span two files
    first = entries(1, "warmup-0", 0.0) + entries(3, "req-0", 200.0)
    second = entries(5, "req-1", 300.0, llm_model="tensorrt_llm")
    (tmp_path / "trace.json.0").write_text(json.dumps(first[:-3]))
    (tmp_path / "trace.json.1").write_text(json.dumps(first[-3:] + second))
    return path


def test_hops_are_consecutive_and_add_up_to_end_to_end(trace_file):
    traces = served_path.read_trace(trace_file)
    assert set(traces) == {"warmup-0", "req-0", "req-1"}
    rec = record("req-0", 200.0)
    hops = served_path.request_hops(rec, traces["req-0"], ORIGIN_S)
    expected = {
        "client_send": 1.0,
        "to_model": 2.0,
        "model_execute": 4.0,
        "to_first_response": 13.0,
        "to_final_response": 80.0,
        "final_to_client": 2.0,
        "first_to_client": 2.0,
    }
    assert hops == pytest.approx(expected, abs=1e-6)
    assert sum(hops[h] for h in served_path.HOPS) == pytest.approx(rec.e2e_s * 1e3)


def test_split_takes_the_traced_measured_requests_only(trace_file):
    traces = served_path.read_trace(trace_file)
    # req-2 was not traced (trace_rate); req-1 was sent to tensorrt_llm itself (no ensemble)
    records = [record("req-0", 200.0), record("req-1", 300.0), record("req-2", 400.0)]
    failed = record("req-3", 500.0)
    failed.error = "ClientError: gone"
    path = served_path.split(records + [failed], traces, ORIGIN_S)
    assert path["num_traced"] == 2 and path["request_ids"] == ["req-0", "req-1"]
    assert path["hops_ms"]["model_execute"] == pytest.approx({"mean": 4.0, "p50": 4.0, "p99": 4.0})
    lines = "\n".join(served_path.markdown_lines(path))
    assert "| to_first_response | 13.00 | 13.00 | 13.00 |" in lines
    assert served_path.split(records[2:], traces, ORIGIN_S) == {"num_traced": 0}
    assert served_path.markdown_lines({"num_traced": 0}) == []


def test_trace_args_and_a_negative_rate_is_refused(tmp_path):
    args = served_path.trace_args(tmp_path / "t.json", 8)
    assert f"--trace-config=triton,file={tmp_path / 't.json'}" in args
    assert "--trace-config=rate=8" in args and "--trace-config=level=TIMESTAMPS" in args
    with pytest.raises(ConfigError, match=r"bench.trace_rate=-1 \(must be >= 0\)"):
        check_bench_spec(BenchSpec(trace_rate=-1))
