"""scripts.bench_ab --tiny: the GPU A/B run's code path on CPU (a subprocess, as the GPU
machine runs it), with this tree as both sides of the comparison."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_bench_ab_tiny_measures_both_trees_a_variant_and_a_quantized_format(tmp_path):
    argv = ["--tiny", "--num-requests", "3", "--before-tree", str(REPO), "--quant", "int8_wo"]
    argv += ["--variant", "num_scheduler_steps=3"]
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_ab", "--out", str(tmp_path), *argv],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((tmp_path / "bench_ab.json").read_text())["runs"]
    assert sorted(runs) == [
        "tiny/after bf16",
        "tiny/after int8_wo",
        "tiny/after num_scheduler_steps=3 bf16",
        "tiny/after num_scheduler_steps=3 int8_wo",
        "tiny/before bf16",
        "tiny/before int8_wo",
    ]
    for key, run in runs.items():
        assert "error" not in run, (key, run.get("error"))
        assert run["decode_tok_s"] > 0 and run["throughput_out_tok_s"] > 0
        assert run["ttft_p50_s"] >= 0
    assert any("int8" in kernel for kernel in runs["tiny/after int8_wo"]["kernels"])
    # the quantized engine runs in both trees too: the same greedy tokens
    assert (
        runs["tiny/before int8_wo"]["greedy_tokens"] == runs["tiny/after int8_wo"]["greedy_tokens"]
    )
    # the same greedy tokens, 3 steps a launch or one
    steps3 = runs["tiny/after num_scheduler_steps=3 bf16"]
    assert steps3["greedy_tokens"] == runs["tiny/after bf16"]["greedy_tokens"]
    assert "| tiny | after bf16 |" in (tmp_path / "bench_ab.md").read_text()
