"""scripts.profile_engine --tiny: the GPU profiling run's code path on CPU, so it cannot rot.

A subprocess, as for scripts.bench_engine: the GPU machine has no hydra, omegaconf, modelopt or
tritonclient, so the script must not import them.
"""

import gzip
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

ABSENT_ON_GPU_MACHINE = ("hydra", "omegaconf", "modelopt", "tritonclient")

RUNNER = """
import json, runpy, sys
sys.argv = ["profile_engine.py", "--tiny", "--num-profile-steps", "3", "--out", sys.argv[1]]
try:
    runpy.run_module("scripts.profile_engine", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("MODULES=" + json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


@pytest.mark.slow
def test_profile_engine_tiny_writes_every_phase_per_batch(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path)],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    modules = json.loads(done.stdout.split("MODULES=")[-1])
    assert not set(ABSENT_ON_GPU_MACHINE) & set(modules)
    results = json.loads((tmp_path / "profile_engine.json").read_text())
    rows = results["models"]["tiny-llama"]["rows"]
    assert [(r["phase"], r["batch_size"]) for r in rows] == [
        ("prefill", 1),
        ("decode", 1),
        ("mixed", 1),
        ("prefill", 4),
        ("decode", 4),
        ("mixed", 4),
    ]
    for r in rows:
        assert r["wall_ms"] > 0 and r["profiled_wall_ms"] > 0
        assert r["cpu_ms"]["engine.forward"] > 0
        assert r["gpu_idle_pct"] is None and not r["is_cuda_graph"]  # CPU: no device time
        trace = json.loads(gzip.decompress((tmp_path / r["trace_file"]).read_bytes()))
        assert trace["traceEvents"]
    prefill, decode, mixed = rows[3:]
    input_len = results["settings"]["input_len"]
    assert prefill["tokens_per_step"] == 4 * input_len
    assert decode["tokens_per_step"] == 4 and decode["num_profiled_steps"] == 3
    # one prompt joins each of 3 steps: 4, 5, 6 decodes beside it
    assert mixed["tokens_per_step"] == input_len + 5 and mixed["num_steps"] == 3
    table = (tmp_path / "profile_engine.md").read_text()
    assert "### tiny-llama" in table and "| decode | 4 | 4 |" in table
