"""scripts.bench_host_step: the engine's host work a launch, model stubbed, on CPU."""

import json
import subprocess
import sys

from tests.conftest import REPO


def test_bench_host_step_measures_both_arrival_shapes(tmp_path):
    args = ["--batch", "2", "8", "--launches", "30", "--warmup-launches", "10"]
    args += ["--input-len", "8", "--output-len", "12", "--out", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench_host_step", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        (r["shape"], r["batch"]): r for r in json.loads((tmp_path / "host_step.json").read_text())
    }
    assert set(rows) == {(s, b) for s in ("lockstep", "staggered") for b in (2, 8)}
    for row in rows.values():
        assert 0 < row["host_cpu_ms_per_launch"] <= row["host_ms_per_launch"] * 1.05 + 0.05
        assert row["steps_a_launch"] == 3  # --steps default: the steps ahead run for any batch
        assert 0 < row["seqs_per_step"] <= row["batch"]
    # staggered arrivals put prompts into most launches; lockstep only into each wave's first
    assert (
        rows["staggered", 8]["prompt_launch_share"] > 2 * rows["lockstep", 8]["prompt_launch_share"]
    )
    assert "| staggered | 8 |" in (tmp_path / "host_step.md").read_text()
