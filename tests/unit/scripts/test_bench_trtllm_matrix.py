"""The matrix script's tiny mode: rows measured, steady-state evidence, resume across calls."""

import json

import pytest

from scripts import bench_trtllm_matrix as matrix


@pytest.fixture(scope="module")
def first_call(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix")
    matrix.main(
        ["--out", str(out), "--tiny", "--rows", "16x8", "--dtypes", "bf16", "--profile-steps", "2"]
    )
    return out, json.loads((out / "bench_trtllm_matrix.json").read_text())


def test_a_row_counts_every_output_token_and_its_steady_window(first_call):
    _, results = first_call
    row = results["rows"]["16x8"]["bf16"]
    assert row["num_out_tokens"] == row["num_requests"] * 8
    assert row["out_tok_s"] > 0 and 0 < row["steady_share"] <= 1
    assert row["peak_running"] <= 8  # the tiny mode's batch limit
    assert row["ttft_p50_s"] <= row["ttft_p99_s"]


def test_a_later_call_keeps_the_rows_it_is_given_and_runs_the_rest(first_call, tmp_path):
    out, before = first_call
    matrix.main(
        [
            "--out",
            str(tmp_path),
            "--tiny",
            "--dtypes",
            "bf16",
            "--previous",
            str(out / "bench_trtllm_matrix.json"),
        ]
    )
    after = json.loads((tmp_path / "bench_trtllm_matrix.json").read_text())
    assert after["rows"]["16x8"]["bf16"] == before["rows"]["16x8"]["bf16"]  # not run again
    assert after["rows"]["48x4"]["bf16"]["num_out_tokens"] > 0
    assert "| 48x4 |" in (tmp_path / "bench_trtllm_matrix.md").read_text()


def test_the_request_count_covers_twice_the_kv_cache_and_stops_at_the_published_one():
    # 128/2048 with 100k KV tokens holds 45 at once: 90 requests, more than 1 s of work
    assert matrix.request_count((128, 2048), 100_000, 1024, 1) == 90
    assert matrix.request_count((128, 128), 10**9, 1024, 30) == 6758  # 30 s at 28,837 tok/s
    assert matrix.request_count((128, 128), 10**9, 1024, 10**4) == 30000


def test_a_row_not_in_the_matrix_is_refused():
    with pytest.raises(SystemExit, match="not in the matrix"):
        matrix.main(["--out", "unused", "--tiny", "--rows", "7x7"])


def test_a_requests_arithmetic_counts_linears_lm_head_and_causal_attention():
    # TINY: 2 layers of hidden 64 (4 heads of 16, 2 KV heads), MLP 128, vocabulary 256
    linear = 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128)
    expected = 2 * linear * 5 + 2 * 64 * 256 * 2 + 2 * 2 * 64 * 5 * 5
    assert matrix.request_flops(matrix.TINY, (3, 2)) == expected


def test_each_row_reports_the_arithmetic_rate_of_both_sides(first_call):
    out, results = first_call
    row = results["rows"]["16x8"]
    flops = matrix.request_flops(matrix.TINY, (16, 8))
    bf16 = row["bf16"]
    assert bf16["model_tflops"] == pytest.approx(
        flops * bf16["num_requests"] / bf16["wall_s"] / 1e12
    )
    assert row["trtllm_model_tflops"] == pytest.approx(flops * 100 / 8 / 1e12)
    assert "model TFLOP/s" in (out / "bench_trtllm_matrix.md").read_text()


def test_a_row_profiles_its_steady_steps_and_reports_where_their_time_went(first_call):
    out, results = first_call
    row = results["rows"]["16x8"]["bf16"]
    prof = row["profile"]
    assert prof["num_profiled_steps"] == 2  # the steps the run took under the profiler
    assert prof["wall_ms"] > 0 and set(prof["gpu_ms"]) == set(matrix.KERNEL_CLASS_NAMES)
    assert row["num_out_tokens"] == row["num_requests"] * 8  # profiled steps' tokens counted
    text = (out / "bench_trtllm_matrix.md").read_text()
    assert "| 16x8 | bf16 | 2 |" in text and "| GPU idle |" in text
