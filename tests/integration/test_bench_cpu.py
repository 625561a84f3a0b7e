"""bench/profile/sweep on CPU with the real SmolLM2 engine, in-process and through tritonserver."""

import json
import math

import pytest

from pipeline.bench import served_path
from tests.conftest import make_spec

pytestmark = [pytest.mark.slow, pytest.mark.triton]


def timeline_phases(bench_profile_dir) -> list[dict]:
    return json.loads((bench_profile_dir / "timeline.json").read_text())["phases"]


def test_profile_writes_bench_json_markdown_plots_and_timeline(bench_profile_dir):
    report = json.loads((bench_profile_dir / "bench.json").read_text())
    assert set(report["targets"]) == {"direct", "server"}
    for target in ("direct", "server"):
        summary = report["targets"][target]["summary"]
        assert summary["num_ok"] == 6 and summary["num_errors"] == 0
        # token-exact synthetic prompts and end_id=-1: exactly output_len tokens each, served too
        assert summary["num_output_tokens"] == 6 * 8
        assert summary["num_input_tokens"] == 6 * 16
        for key in ("ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "e2e_ms_p99", "output_tok_s"):
            assert math.isfinite(summary[key]) and summary[key] > 0, key
        assert summary["ttft_ms_p50"] <= summary["e2e_ms_p50"]
        assert summary["peak_memory_gib"] > 0.1
        assert report["targets"][target]["warmup"]["num_requests"] == 1
    assert report["triton_vs_direct"]["output_tok_s_ratio"] > 0
    requests = json.loads((bench_profile_dir / "requests.json").read_text())
    assert [r["num_output_tokens"] for r in requests["server"]] == [8] * 6
    # the two client processes' records merge back in request order, on the bench's clock
    assert [r["request_id"] for r in requests["server"]] == [
        r["request_id"] for r in requests["direct"]
    ]
    measure = next(p for p in timeline_phases(bench_profile_dir) if p["name"] == "server:measure")
    assert all(
        measure["start_s"] <= r["start_s"] < r["end_s"] <= measure["end_s"] + 0.01
        for r in requests["server"]
    )
    markdown = (bench_profile_dir / "bench.md").read_text()
    assert "| TTFT p99 (ms) |" in markdown and "Triton vs direct" in markdown
    for name in ("latency_cdf.png", "request_timeline.png", "timeline.png"):
        assert (bench_profile_dir / name).stat().st_size > 10_000, name


def test_profile_splits_the_traced_requests_into_hops_that_add_up(bench_profile_dir):
    # bench.trace_rate=2: the real tritonserver traced every second request it got
    path = json.loads((bench_profile_dir / "bench.json").read_text())["targets"]["server"][
        "served_path"
    ]
    assert 1 <= path["num_traced"] <= 5
    requests = {
        r["request_id"]: r
        for r in json.loads((bench_profile_dir / "requests.json").read_text())["server"]
    }
    traced = [requests[i] for i in path["request_ids"]]
    hops = path["hops_ms"]
    assert all(stats["p50"] >= 0 for stats in hops.values()), hops
    # one clock (CLOCK_MONOTONIC) on both sides: the consecutive hops add up to end-to-end
    mean_e2e_ms = sum(r["e2e_s"] for r in traced) / len(traced) * 1e3
    assert sum(hops[h]["mean"] for h in served_path.HOPS) == pytest.approx(mean_e2e_ms, rel=1e-6)
    # on this CPU the engine's steps (first token, then the rest) are most of a request
    engine_ms = hops["to_first_response"]["mean"] + hops["to_final_response"]["mean"]
    assert engine_ms > 0.5 * mean_e2e_ms
    assert "served path (Triton trace of" in (bench_profile_dir / "bench.md").read_text()
    assert (bench_profile_dir / "served_path.png").stat().st_size > 10_000


def test_profile_timeline_marks_bench_phases_and_samples_the_server(bench_profile_dir):
    timeline = json.loads((bench_profile_dir / "timeline.json").read_text())
    names = [p["name"] for p in timeline["phases"]]
    for name in (
        "direct:load",
        "direct:warmup",
        "direct:measure",
        "server:start",
        "server:warmup",
        "server:measure",
    ):
        assert name in names
    measure = next(p for p in timeline["phases"] if p["name"] == "server:measure")
    during = [
        s
        for s in timeline["samples"]
        if measure["start_s"] <= s["t_s"] <= measure["end_s"] and "server" in s
    ]
    assert during and all(s["server"]["rss_bytes"] > 50 * 2**20 for s in during)
    if not any(s.get("source") == "nvml" for s in timeline["sources"]):
        assert "NVML unavailable" in timeline["notes"][0]


def test_sweep_finds_the_kv_capacity_threshold(session_workdir, smollm_engine_dir, bench_overrides):
    from pipeline.stages import sweep

    # 16+8 tokens = 2 blocks of 16 per sequence; 4 blocks hold 2 sequences, so 4 cannot all run
    out = sweep.run(
        make_spec(
            "sweep",
            *bench_overrides,
            "bench.sweep.num_kv_blocks=4",
            "bench.sweep.sizes=[1,2,4,8]",
            workdir=session_workdir,
        )
    )
    data = json.loads((out / "sweep.json").read_text())
    assert [r["size"] for r in data["results"]] == [1, 2, 4]
    assert data["max_ok_size"] == 2
    assert data["threshold_size"] == 4 and data["threshold_failure"] == "kv_capacity"
    assert "2 of 4 sequences" in data["threshold_detail"]
    ok = [r for r in data["results"] if r["is_ok"]]
    assert all(
        r["metrics"]["num_preemptions"] == 0 and r["metrics"]["output_tok_s"] > 0 for r in ok
    )
    # one wave of `size` equal requests: they share every step
    assert [r["metrics"]["seqs_per_step"] for r in ok] == [1.0, 2.0]
    assert (out / "sweep.png").stat().st_size > 10_000
    assert "FAIL (kv_capacity)" in (out / "sweep.md").read_text()


def test_poisson_rate_with_corpus_prompts_in_process(
    session_workdir, smollm_engine_dir, bench_overrides
):
    from pipeline.stages import bench

    out = bench.run(
        make_spec(
            "bench",
            *bench_overrides,
            "bench=poisson_corpus",
            "bench.target=direct",
            "bench.num_requests=4",
            "bench.output_len=4",
            "bench.request_rate=4.0",
            workdir=session_workdir,
        )
    )
    report = json.loads((out / "bench.json").read_text())
    assert set(report["targets"]) == {"direct"}
    assert report["settings"]["mode"] == "rate" and report["settings"]["workload"] == "corpus"
    records = json.loads((out / "requests.json").read_text())["direct"]
    planned = [r["scheduled_s"] for r in records]
    assert planned == sorted(planned) and len(set(planned)) == 4
    assert all(r["error"] is None and 1 <= r["num_output_tokens"] <= 4 for r in records)


def test_sweep_reports_a_request_that_can_never_fit(
    session_workdir, smollm_engine_dir, bench_overrides
):
    from pipeline.stages import sweep

    # one 16-token block cannot hold 16+8 tokens: the engine refuses every request
    out = sweep.run(
        make_spec(
            "sweep",
            *bench_overrides,
            "bench.sweep.num_kv_blocks=1",
            "bench.sweep.sizes=[1,2]",
            "bench.num_warmup_requests=0",
            workdir=session_workdir,
        )
    )
    data = json.loads((out / "sweep.json").read_text())
    assert data["max_ok_size"] is None and data["threshold_size"] == 1
    assert data["threshold_failure"] == "kv_capacity"
    assert "can never fit" in data["threshold_detail"]
