"""scripts.bench_engine_hop on a few streams: the engine-hop run's code path on CPU (a subprocess,
as it is run), with this tree as both sides of the comparison."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_bench_engine_hop_counts_every_token_on_both_sides(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_engine_hop", "--out", str(tmp_path)]
        + ["--before-tree", str(REPO), "--streams=4", "--requests=8", "--output-len=8"]
        + ["--rounds=1", "--stacks"],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=600,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "engine_hop.json").read_text())
    assert sorted(result["trees"]) == ["before", "this"]
    for tree in result["trees"].values():
        run = tree["rounds"][0]
        assert run["tokens"] == 8 * 8 and run["complete_streams"] == 8
        assert run["stub_cpu_s"] > 0 and run["engine_cpu_s"] > 0
        assert 0 < run["ipc_messages"] and run["responses"] <= run["tokens"]
    assert "CPU ms by thread" in (tmp_path / "this-stacks.txt").read_text()
