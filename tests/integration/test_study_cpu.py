"""The batch x parallelism study on the CPU (gloo), end to end on the real SmolLM2: TP=1, TP=3
and PP=2 at batch 1 and 2, each series in a process of its own; the report is filled from
measurements, accuracy does not move with batch size, a rerun skips every finished cell, and a
batch-dependent truncation of generated tokens is flagged."""

import json
import re

import pytest

from pipeline.study.faults import Truncation
from tests.conftest import make_spec

pytestmark = pytest.mark.slow

TINY_STUDY = (
    "study.kernels=[unfused]",
    "study.workloads=[16x8]",
    "study.batch_sizes=[1,2]",
    "study.max_batch_size=4",
    "study.num_warmup_requests=1",
    "study.accuracy.num_cloze_items=8",
    "study.accuracy.cloze_context_tokens=24",
    "study.accuracy.num_ppl_windows=2",
    "study.accuracy.ppl_window_tokens=32",
    "study.accuracy.num_greedy_prompts=2",
    "study.accuracy.greedy_prompt_tokens=12",
    "study.accuracy.greedy_max_tokens=6",
    "build.max_input_len=64",
    "build.max_seq_len=96",
    "build.max_num_tokens=128",
    "build.tokens_per_block=16",
    "deploy.torch.num_threads=1",
)


def study_spec(workdir, *overrides):
    return make_spec("study", *TINY_STUDY, *overrides, workdir=workdir)


@pytest.fixture(scope="module")
def study_run(session_workdir, smollm_hf_dir):
    from pipeline.stages import study

    spec = study_spec(session_workdir, "study.mappings=[tp1,tp3,pp2]")
    out = study.run(spec)
    return spec, out, json.loads((out / "study.json").read_text())


def cells_by_key(data: dict) -> dict[str, dict]:
    return {c["key"]: c for c in data["cells"]}


def test_every_cell_is_measured_and_the_tables_are_filled(study_run):
    _, out, data = study_run
    cells = cells_by_key(data)
    expected = {f"{m}-unfused-16x8-b{b}" for m in ("tp1", "tp3", "pp2") for b in (1, 2)}
    assert set(cells) == expected
    for cell in cells.values():
        assert cell["is_ok"], cell["detail"]
        timing = cell["timing"]
        assert timing["num_output_tokens"] == cell["batch_size"] * 8
        assert timing["output_tok_s"] > 0 and timing["ttft_ms_p99"] > 0
        assert cell["memory"]["peak_gib"] > 0 and cell["memory"]["kv_used_gib"] > 0
        ranks = [k for k, v in cell["resources"].items() if "rss_bytes_max" in v]
        world = cell["series"]["tp_size"] * cell["series"]["pp_size"]
        assert len(ranks) == world, cell["resources"].keys()  # every rank sampled
    markdown = (out / "study.md").read_text()
    table = markdown.split("## Cells")[1].split("##")[0]
    rows = [r for r in table.splitlines() if r.startswith("| tp") or r.startswith("| pp")]
    assert len(rows) == 6
    for row in rows:
        assert "nan" not in row.lower() and " - |" not in row, row
    for name in ("time_vs_batch", "traffic_vs_batch", "comm_util_vs_batch", "memory_vs_batch"):
        assert (out / f"{name}.png").stat().st_size > 10_000, name
    assert "NVML unavailable" in " ".join(data["profile_notes"])
    assert "not available" in data["nvlink_method"]


def test_accuracy_does_not_move_with_batch_size(study_run):
    _, _, data = study_run
    cells = cells_by_key(data)
    for mapping in ("tp1", "tp3", "pp2"):
        one, two = (cells[f"{mapping}-unfused-16x8-b{b}"]["accuracy"] for b in (1, 2))
        assert one["cloze"]["correct"] == two["cloze"]["correct"]
        assert one["greedy"]["tokens"] == two["greedy"]["tokens"]
        assert two["greedy"]["num_generated"] == two["greedy"]["num_requested"]
    # the split engines answer as the one-rank engine does
    assert (
        cells["tp3-unfused-16x8-b2"]["accuracy"]["cloze"]["correct"]
        == cells["tp1-unfused-16x8-b2"]["accuracy"]["cloze"]["correct"]
    )
    one, two = (cells[f"tp1-unfused-16x8-b{b}"]["accuracy"]["ppl"] for b in (1, 2))
    assert one == pytest.approx(two, rel=1e-4) and one > 1
    # tensor-parallel ranks score perplexity together, pipeline stages in turn
    assert cells["tp3-unfused-16x8-b2"]["accuracy"]["ppl"] == pytest.approx(one, rel=1e-4)
    assert cells["pp2-unfused-16x8-b2"]["accuracy"]["ppl"] == pytest.approx(one, rel=1e-4)
    assert all(c["accuracy_flags"] == [] for c in cells.values())


def test_tp_moves_more_collective_bytes_per_token_than_pp(study_run):
    _, out, data = study_run
    cells = cells_by_key(data)
    assert cells["tp1-unfused-16x8-b1"]["comm"]["total_bytes"] == 0
    tp = cells["tp3-unfused-16x8-b2"]["comm"]
    pp = cells["pp2-unfused-16x8-b2"]["comm"]
    assert tp["by_kind"]["tp_all_reduce"] > 0 and pp["by_kind"]["pp_send_hidden"] > 0
    assert pp["by_kind"]["tp_all_reduce"] == 0 and tp["by_kind"]["pp_send_hidden"] == 0
    ratio = data["comm_ratio"]
    assert ratio["num_pairs"] == 2  # batch 1 and 2
    pair = next(p for p in ratio["pairs"] if p["batch_size"] == 2)
    assert pair["tp_bytes_per_token"] == tp["bytes_per_token"]
    assert pair["pp_bytes_per_token"] == pp["bytes_per_token"]
    match = re.search(r"Measured TP/PP bytes ratio: ([0-9.]+)", (out / "study.md").read_text())
    assert match and float(match[1]) == pytest.approx(ratio["median"], abs=0.01)


def test_a_rerun_skips_every_finished_cell(study_run, monkeypatch):
    from pipeline.stages import study
    from pipeline.study import runner

    spec, out, _ = study_run
    started = []
    monkeypatch.setattr(runner, "run_series_until_done", lambda job, isolate: started.append(job))
    assert study.run(spec) == out
    assert started == []


def test_a_batch_dependent_truncation_is_flagged(study_run):
    from pipeline.stages import study

    spec, _, _ = study_run
    spec = study_spec(spec.workdir, "study.mappings=[tp1]", "study.isolate=false")
    out = study.run(spec, fault=Truncation(min_batch_size=2, max_tokens=2))
    cells = cells_by_key(json.loads((out / "study.json").read_text()))
    assert cells["tp1-unfused-16x8-b1"]["accuracy_flags"] == []
    flags = cells["tp1-unfused-16x8-b2"]["accuracy_flags"]
    assert flags and "returned 4 of 12 requested tokens" in flags[0]
    markdown = (out / "study.md").read_text()
    assert "FLAGGED" in markdown and "**tp1-unfused-16x8-b2**" in markdown
    assert "1 of 2 fitted cells differ from batch 1" in markdown
