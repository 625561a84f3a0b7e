"""scripts.bench_linear_quant --tiny: the GPU microbenchmark's code path on CPU through
triton's interpreter (a subprocess: TRITON_INTERPRET must be set before triton is imported)."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_bench_linear_quant_tiny_reports_every_kernel_and_a_step_estimate(tmp_path):
    pytest.importorskip("triton")
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_linear_quant", "--tiny", "--rows", "2"]
        + ["--out", str(tmp_path)],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=120,
        env={
            # the parent's path too: triton may sit outside the venv
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "PATH": "/usr/bin:/bin",
            "TRITON_INTERPRET": "1",
            "OMP_NUM_THREADS": "1",
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "bench_linear_quant.json").read_text())
    # tinygemm's packing is CUDA-only
    assert report["kernels"] == ["bf16", "int8_dot", "int8_gemv"]
    for result in report["results"]:
        assert result["us"] > 0 and result["rel_err"] < 2e-2, result
    steps = {s["kernel"]: s for s in report["steps"]}
    assert sorted(steps) == sorted(report["kernels"]) and steps["bf16"]["vs_bf16"] == 1.0
    assert "| int8_gemv |" in (tmp_path / "bench_linear_quant.md").read_text()
