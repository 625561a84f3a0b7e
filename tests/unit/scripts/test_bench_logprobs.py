"""scripts.bench_logprobs --tiny: the GPU acceptance run's code path on the CPU (a subprocess,
as the GPU machine runs it)."""

import json

import pytest

from tests.conftest import run_tiny_script


@pytest.mark.slow
def test_bench_logprobs_tiny_measures_on_and_off_with_equal_greedy_tokens(tmp_path):
    run_tiny_script("scripts.bench_logprobs", tmp_path)
    run = json.loads((tmp_path / "bench_logprobs.json").read_text())["models"]["tiny"]
    assert sorted(run["batches"]) == ["1", "4"]
    for batch in run["batches"].values():
        assert batch["greedy_equal"]
        assert batch["off_out_tok_s"] > 0 and batch["top5_out_tok_s"] > 0
    assert run["prefill"]["prompt_tokens"] == 48 and run["prefill"]["plain_ms"] > 0
    assert "| tiny | 4 |" in (tmp_path / "bench_logprobs.md").read_text()
