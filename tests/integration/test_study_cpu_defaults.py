"""The study with its default engine limits on a CPU host (max_batch_size 512, max_seq_len 2048:
a KV cache of every sequence at its longest would want ~48 GB of float32 SmolLM2 KV): each engine
takes its KV cache from the memory the host has available, the cells are measured, and a mapping
the model cannot split over is named with its reason in the report's first lines."""

import json

import psutil
import pytest

from tests.conftest import make_spec

pytestmark = pytest.mark.slow

SMALL_CELLS = (
    "study.mappings=[tp1,tp2]",
    "study.kernels=[unfused]",
    "study.workloads=[16x8]",
    "study.batch_sizes=[1,2]",
    "study.num_warmup_requests=1",
    "study.isolate=false",
    "study.accuracy.num_cloze_items=8",
    "study.accuracy.cloze_context_tokens=24",
    "study.accuracy.num_ppl_windows=2",
    "study.accuracy.ppl_window_tokens=32",
    "study.accuracy.num_greedy_prompts=2",
    "study.accuracy.greedy_prompt_tokens=12",
    "study.accuracy.greedy_max_tokens=6",
    "deploy.torch.num_threads=1",
)


def test_default_limits_fit_the_host_and_an_unsplittable_mapping_is_named_first(
    session_workdir, smollm_hf_dir
):
    from pipeline.stages import study

    spec = make_spec("study", *SMALL_CELLS, workdir=session_workdir)
    assert spec.study.max_batch_size == 512 and spec.build.max_seq_len == 2048
    out = study.run(spec)
    data = json.loads((out / "study.json").read_text())
    cells = {c["key"]: c for c in data["cells"]}
    assert set(cells) == {"tp1-unfused-16x8-b1", "tp1-unfused-16x8-b2"}
    for cell in cells.values():
        assert cell["is_ok"], cell["detail"]
        assert cell["timing"]["num_output_tokens"] == cell["batch_size"] * 8
        kv_gib = cell["memory"]["kv_reserved_gib"]
        assert 0 < kv_gib <= 0.5 * psutil.virtual_memory().total / 2**30
    head = (out / "study.md").read_text().split("## Cells")[0]
    assert "tp2: not run, no engine:" in head
    assert "num_attention_heads=9 is not divisible by tp_size=2" in head
