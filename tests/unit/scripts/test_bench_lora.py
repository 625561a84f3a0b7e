"""scripts.bench_lora --tiny: the GPU acceptance run's code path on CPU (a subprocess, as the GPU
machine runs it)."""

import json
import subprocess
import sys

from tests.conftest import REPO


def test_bench_lora_tiny_measures_base_and_adapters(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_lora", "--tiny", "--out", str(tmp_path)],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "bench_lora.json").read_text())
    lora = result["lora"]
    assert result["num_adapters"] == 16 and lora["kernel"] == "plain PyTorch"
    assert lora["base_tokens_equal"] and lora["adapter_tokens_differ"]
    assert lora["num_out_tokens"] == result["base"]["num_out_tokens"] == 8 * 8
    assert lora["adapter_device_mib"] > lora["adapter_host_mib"] > 0
    assert lora["decode_step_lora_launches"] == 0  # plain PyTorch: no LoRA kernels
    assert set(result["ratios"]) == {"offline", "offline_base_only", "decode", "decode_base_only"}
    assert "| LoRA engine, requests over the adapters |" in (tmp_path / "bench_lora.md").read_text()
