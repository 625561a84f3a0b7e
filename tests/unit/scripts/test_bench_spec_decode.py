"""scripts.bench_spec_decode --tiny: the GPU acceptance run's code path on CPU (a subprocess, as
the GPU machine runs it)."""

import json

import pytest

from tests.conftest import run_tiny_script


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
    markdown = (tmp_path / "bench_spec_decode.md").read_text()
    assert "| 8 |" in markdown and "batch8 offline throughput" in markdown
