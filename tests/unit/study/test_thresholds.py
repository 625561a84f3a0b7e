"""A batch size the series' KV cache cannot hold is its threshold, reported with the KV the
engine reserved (on a CPU host: sized from the host's available memory), not a crash; an error
is named as an error, not capacity."""

from pipeline.study.report import threshold_table
from pipeline.study.summary import thresholds

KV_GIB = 9.67


def cell(batch: int, failure: str | None = None, detail: str = "") -> dict:
    out = {
        "key": f"pp2-unfused-128x128-b{batch}",
        "mapping": "pp2",
        "kernels": "unfused",
        "workload": "128x128",
        "batch_size": batch,
        "is_ok": failure is None,
        "failure": failure,
        "detail": detail,
    }
    if failure is None:
        out["memory"] = {"kv_reserved_gib": KV_GIB, "weights_gib": 0.6}
    return out


def test_a_batch_the_kv_cache_cannot_hold_is_the_threshold_with_the_kv_reserved():
    detail = "8 sequences x 8 KV blocks > the cache's 40 blocks (it holds 5 of this workload)"
    (limit,) = thresholds([cell(1), cell(4), cell(8, "kv_capacity", detail)])
    assert limit["max_ok_batch"] == 4 and limit["threshold_batch"] == 8
    assert limit["failure"] == "kv_capacity" and limit["detail"] == detail
    assert limit["bound_by"].startswith(f"KV cache ({KV_GIB:.2f} GiB")
    assert "the host's available" in limit["bound_by"]
    row = threshold_table([limit])[-1]
    assert row.startswith("| pp2-unfused-128x128 | 4 | 8 (kv_capacity) | KV cache")


def test_an_error_is_no_capacity_threshold_and_says_what_failed():
    why = "RuntimeError: engine: rank 1 (pid 7) exited with code -9"
    (limit,) = thresholds([cell(1), cell(4, "error", why)])
    assert limit["max_ok_batch"] == 1 and limit["threshold_batch"] == 4
    assert limit["bound_by"] == f"an error, not capacity: {why}"
