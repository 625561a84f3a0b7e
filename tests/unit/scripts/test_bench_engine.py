"""scripts.bench_engine --tiny: the GPU benchmark's code path on CPU, so it cannot rot.

It runs in a subprocess that reports every module imported, because the GPU machine has torch,
triton and transformers but not hydra, omegaconf, modelopt or tritonclient. The offline run's
time cap is checked in-process, on a fake engine.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts import engine_run

REPO = Path(__file__).resolve().parents[3]
ABSENT_ON_GPU_MACHINE = ("hydra", "omegaconf", "modelopt", "tritonclient")

RUNNER = """
import json, runpy, sys
sys.argv = ["bench_engine.py", "--tiny", "--out", *sys.argv[1:]]
try:
    runpy.run_module("scripts.bench_engine", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("MODULES=" + json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def run_tiny(out_dir: Path, *args: str) -> set[str]:
    """scripts.bench_engine --tiny in a subprocess; the top-level modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(out_dir), *args],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=600,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.split("MODULES=")[-1]))


@pytest.mark.slow
def test_bench_engine_tiny_runs_and_needs_no_pipeline_only_packages(tmp_path):
    assert not set(ABSENT_ON_GPU_MACHINE) & run_tiny(tmp_path)
    results = json.loads((tmp_path / "bench_engine.json").read_text())
    model = results["models"]["tiny-llama"]
    work = results["workload"]
    assert model["engine"]["num_out_tokens"] == work["num_requests"] * work["output_len"]
    assert model["engine"]["decode_tok_s"] > 0 and model["roofline_tok_s"] > 0
    # same random weights in HF and in the engine (through the checkpoint): same greedy tokens
    assert model["greedy_prefix_agreement"] == work["output_len"]
    assert all(c["ok"] for c in results["checks"]["linears"].values()), results["checks"]
    assert "batch-1 decode tok/s" in (tmp_path / "bench_engine.md").read_text()
    assert "quant" not in model and "quant_plan" not in results  # no --quant: as before


@pytest.mark.slow
def test_bench_engine_tiny_quant_formats_against_bf16(tmp_path):
    """--quant: each format's engine on the same weights, with its kernels and BF16 ratios."""
    assert not set(ABSENT_ON_GPU_MACHINE) & run_tiny(tmp_path, "--quant", "int8_wo,int4_wo")
    results = json.loads((tmp_path / "bench_engine.json").read_text())
    model, work = results["models"]["tiny-llama"], results["workload"]
    assert list(model["quant"]) == ["int8_wo", "int4_wo"]
    assert model["engine"]["kernels"] == {"dense": 2 * 4 + 1}  # 4 linears a layer + lm_head
    for fmt, q in model["quant"].items():
        assert q["decode_tok_s"] > 0 and q["throughput_out_tok_s"] > 0, (fmt, q)
        assert q["num_out_tokens"] == work["num_requests"] * work["output_len"]
        assert q["decode_speedup_vs_bf16"] > 0 and q["throughput_speedup_vs_bf16"] > 0
        assert len(q["greedy_tokens"]) == work["output_len"]  # agreement may be partial
        assert 0 <= q["greedy_prefix_agreement_vs_bf16"] <= work["output_len"]
        # every decoder linear on its quantized kernel, lm_head dense (as modelopt exports)
        assert q["kernels"].pop("dense") == 1 and len(q["kernels"]) == 1, q["kernels"]
        assert not next(iter(q["kernels"])).startswith("dequant"), q["kernels"]
    weights = [model["weight_bytes"]] + [q["weight_bytes"] for q in model["quant"].values()]
    assert weights == sorted(weights, reverse=True)  # fp32 > int8 > int4
    assert model["quant"]["int4_wo"]["quantization"]["group_size"] == 64
    assert "quantized vs BF16 (same run)" in (tmp_path / "bench_engine.md").read_text()


class TwoStepEngine:
    """LLMEngine's request API; every request yields one token a step for two steps."""

    def __init__(self):
        self.left, self.cancelled = {}, []

    def add_request(self, prompt, params) -> str:
        self.left[str(len(self.left))] = 2
        return str(len(self.left) - 1)

    def has_unfinished(self) -> bool:
        return bool(self.left or self.cancelled)

    def abort(self, request_id: str) -> bool:
        if self.left.pop(request_id, None) is None:
            return False
        self.cancelled.append(request_id)
        return True

    def step(self) -> list:
        deltas = [SimpleNamespace(request_id=r, token_ids=[]) for r in self.cancelled]
        self.cancelled = []
        for request_id in list(self.left):
            self.left[request_id] -= 1
            deltas.append(SimpleNamespace(request_id=request_id, token_ids=[7]))
            if not self.left[request_id]:
                del self.left[request_id]
        return deltas


def test_offline_run_reports_a_rate_only_when_it_finishes_within_its_cap():
    work = engine_run.Workload(input_len=3, output_len=2)
    prompts = [[1, 2, 3]] * 4
    done = engine_run.offline_throughput(TwoStepEngine(), prompts, work, cap_s=None)
    assert done["num_out_tokens"] == 8 and done["throughput_out_tok_s"] > 0
    capped = engine_run.offline_throughput(TwoStepEngine(), prompts, work, cap_s=0.0)
    assert capped["throughput_out_tok_s"] is None
    assert capped["throughput_error"].startswith("stopped at the 0 s cap: 0 of 8 tokens")
