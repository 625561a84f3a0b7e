"""scripts.bench_multi_gpu --tiny: the multi-GPU benchmark's code path on CPU ranks (gloo)."""

import json

import pytest

from scripts import bench_multi_gpu

pytestmark = pytest.mark.slow


def test_the_four_rank_group_runs_and_is_measured_against_its_smallest_mapping(tmp_path):
    bench_multi_gpu.main(["--out", str(tmp_path), "--tiny", "--runs", "70b4", "--runtimes", "[{}]"])
    engines = json.loads((tmp_path / "bench_multi_gpu.json").read_text())["engines"]
    assert [(e["tp"], e["pp"]) for e in engines.values()] == [(2, 1), (4, 1)]
    assert all(e["decode_tok_s"] > 0 and e["throughput_out_tok_s"] > 0 for e in engines.values())
    assert len({e["model"] for e in engines.values()}) == 1  # one baseline: the TP=2 engine
    table = (tmp_path / "bench_multi_gpu.md").read_text()
    assert "| tiny_tp2  | 2 | 1 |" in table and " | 1.00 | " in table
