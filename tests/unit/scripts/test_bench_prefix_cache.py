"""scripts.bench_prefix_cache --tiny: the GPU acceptance run's code path on the CPU (a
subprocess, as the GPU machine runs it)."""

import json

import pytest

from tests.conftest import run_tiny_script


@pytest.mark.slow
def test_bench_prefix_cache_tiny_measures_every_workload_on_and_off(tmp_path):
    run_tiny_script("scripts.bench_prefix_cache", tmp_path)
    tiny = json.loads((tmp_path / "bench_prefix_cache.json").read_text())["models"]["tiny"]
    for workload in ("shared_prefix", "unique"):
        for side in ("off", "on"):
            assert tiny[f"{workload}_{side}"]["throughput_out_tok_s"] > 0
    assert tiny["shared_prefix_off"]["prefix_hit_rate"] == 0
    assert tiny["shared_prefix_on"]["prefix_hit_rate"] > 0.5  # 40 of 48 prompt tokens shared
    off, on = tiny["multi_turn_host_off"], tiny["multi_turn_host_on"]
    assert off["host_hit_rate"] == 0 and off["host_copied_gb"] == 0
    assert on["host_hit_rate"] > 0 and on["prefix_hit_rate"] > off["prefix_hit_rate"]
    assert on["num_kv_blocks"] * 3 <= tiny["working_set_blocks"] + 3  # the pool a third of it
    assert tiny["pcie"]["offload_gb_s"] > 0 and tiny["pcie"]["load_gb_s"] > 0
    assert (
        "| tiny | (c) unique 128/128 | throughput_out_tok_s |"
        in (tmp_path / "bench_prefix_cache.md").read_text()
    )
