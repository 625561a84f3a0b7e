"""scripts.bench_logprobs --tiny: the GPU acceptance run's code path on the CPU (a subprocess,
as the GPU machine runs it)."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_bench_logprobs_tiny_measures_on_and_off_with_equal_greedy_tokens(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_logprobs", "--out", str(tmp_path), "--tiny"],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((tmp_path / "bench_logprobs.json").read_text())["models"]["tiny"]
    assert sorted(run["batches"]) == ["1", "4"]
    for batch in run["batches"].values():
        assert batch["greedy_equal"]
        assert batch["off_out_tok_s"] > 0 and batch["top5_out_tok_s"] > 0
    assert run["prefill"]["prompt_tokens"] == 48 and run["prefill"]["plain_ms"] > 0
    assert "| tiny | 4 |" in (tmp_path / "bench_logprobs.md").read_text()
