"""scripts/bench_engine.py --tiny: the GPU benchmark's code path on CPU, so it cannot rot.

It runs in a subprocess that reports every module imported, because the GPU machine has torch,
triton and transformers but not hydra, omegaconf, modelopt or tritonclient.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ABSENT_ON_GPU_MACHINE = ("hydra", "omegaconf", "modelopt", "tritonclient")

RUNNER = """
import json, runpy, sys
sys.argv = ["bench_engine.py", "--tiny", "--out", sys.argv[1]]
try:
    runpy.run_path("scripts/bench_engine.py", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("MODULES=" + json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


@pytest.mark.slow
def test_bench_engine_tiny_runs_and_needs_no_pipeline_only_packages(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path)],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=600,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    modules = json.loads(done.stdout.split("MODULES=")[-1])
    assert not set(ABSENT_ON_GPU_MACHINE) & set(modules)
    results = json.loads((tmp_path / "bench_engine.json").read_text())
    model = results["models"]["tiny-llama"]
    work = results["workload"]
    assert model["engine"]["num_out_tokens"] == work["num_requests"] * work["output_len"]
    assert model["engine"]["decode_tok_s"] > 0 and model["roofline_tok_s"] > 0
    # same random weights in HF and in the engine (through the checkpoint): same greedy tokens
    assert model["greedy_prefix_agreement"] == work["output_len"]
    assert all(c["ok"] for c in results["checks"]["linears"].values()), results["checks"]
    assert "batch-1 decode tok/s" in (tmp_path / "bench_engine.md").read_text()
