"""scripts.bench_weight_offload --tiny: the GPU acceptance run's code path on the CPU (a
subprocess, as the GPU machine runs it)."""

import json

import pytest

from tests.conftest import run_tiny_script


@pytest.mark.slow
def test_bench_weight_offload_tiny_reports_streamed_runs_against_bound_and_resident(tmp_path):
    run_tiny_script("scripts.bench_weight_offload", tmp_path)
    report = json.loads((tmp_path / "bench_weight_offload.json").read_text())
    runs = report["runs"]
    assert sorted(runs) == ["tiny_f32_half_streamed", "tiny_f32_resident", "tiny_fp8_streamed"]
    for name, run in runs.items():
        assert "error" not in run, (name, run.get("error"))
        assert run["decode_tok_s"] > 0 and run["throughput_out_tok_s"] > 0
    resident, half = runs["tiny_f32_resident"], runs["tiny_f32_half_streamed"]
    fp8 = runs["tiny_fp8_streamed"]
    assert "streamed_layers" not in resident and resident["decode_pct_of_bound"] is None
    assert (half["num_layers"], half["streamed_layers"]) == (6, 3)
    assert fp8["streamed_layers"] == 4
    for run in (half, fp8):
        assert run["bound_steps_per_s"] > 0 and run["offline_pct_of_bound"] > 0
    assert half["offline_vs_resident"] > 0 and half["decode_vs_resident"] > 0
    table = (tmp_path / "bench_weight_offload.md").read_text()
    assert "| tiny_f32_half_streamed | 3 |" in table
