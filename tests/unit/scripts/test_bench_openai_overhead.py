"""scripts.bench_openai_overhead --tiny: the frontend-cost run's code path on CPU (a subprocess,
as the GPU machine runs it), with this tree as both sides of the comparison."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_bench_openai_overhead_tiny_measures_both_trees(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_openai_overhead", "--out", str(tmp_path), "--tiny"]
        + ["--before-tree", str(REPO)],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "openai_overhead.json").read_text())
    assert sorted(result["trees"]) == ["before", "this"]
    for tree in result["trees"].values():
        assert tree["num_errors"] == 0
        assert tree["per_request_us"] > 0 and tree["per_token_us"] > 0
        run = tree["rounds"][0]["runs"]["per_token"]
        # every token came back as an event: one a token, plus the finish, usage and [DONE]
        assert run["events"] == run["num_requests"] * (run["max_tokens"] + 3)
    assert "This tree / before" in (tmp_path / "openai_overhead.md").read_text()
