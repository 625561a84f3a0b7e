import math

import numpy as np
import pytest

from pipeline.bench.metrics import achieved_bandwidth_gb_s, percentiles, summarize
from pipeline.bench.records import RequestRecord


def record(rid, start, chunks, end, error=None, num_input=4):
    rec = RequestRecord(rid, num_input, scheduled_s=start, start_s=start, end_s=end, error=error)
    for t, n in chunks:
        rec.add_chunk(t, n)
    return rec


def test_percentiles_match_numpy_linear_interpolation():
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
    out = percentiles(values)
    for q in (50, 90, 99):
        assert out[f"p{q}"] == pytest.approx(np.percentile(values, q))
    assert out["min"] == 1.0 and out["max"] == 10.0 and out["mean"] == pytest.approx(25 / 6)


def test_percentiles_of_nothing_are_nan():
    assert all(math.isnan(v) for v in percentiles([]).values())


def test_record_ttft_itl_ignore_empty_final_chunk():
    rec = record("a", 1.0, [(1.5, 1), (1.7, 1), (2.1, 2), (2.2, 0)], 2.2)
    assert rec.ttft_s == pytest.approx(0.5)
    assert rec.num_output_tokens == 4
    # (last token - first token) / (tokens - 1): a 2-token chunk counts as two tokens
    assert rec.itl_s == pytest.approx((2.1 - 1.5) / 3)
    assert rec.e2e_s == pytest.approx(1.2)


def test_summarize_counts_errors_and_excludes_them_from_latency():
    ok1 = record("a", 0.0, [(0.1, 1), (0.2, 1), (0.3, 1)], 0.3)
    ok2 = record("b", 0.1, [(0.3, 1), (0.5, 1), (0.7, 1)], 0.7)
    bad = record("c", 0.2, [(0.25, 1)], 1.0, error="RuntimeError: boom")
    s = summarize([ok1, ok2, bad])
    assert s["num_requests"] == 3 and s["num_ok"] == 2 and s["num_errors"] == 1
    assert s["duration_s"] == pytest.approx(1.0)
    assert s["num_output_tokens"] == 6
    assert s["output_tok_s"] == pytest.approx(6.0)
    assert s["request_per_s"] == pytest.approx(2.0)
    assert s["ttft_ms_p50"] == pytest.approx(150.0)
    assert s["itl_ms_max"] == pytest.approx(200.0)
    assert s["output_tok_s_per_user"] == pytest.approx(1 / 0.15)
    assert s["error_messages"] == ["RuntimeError: boom"]


def test_bandwidth_from_itl():
    assert achieved_bandwidth_gb_s(2 * 10**9, 10.0) == pytest.approx(200.0)
    assert math.isnan(achieved_bandwidth_gb_s(10**9, math.nan))
