"""scripts.bench_guided_host --tiny: the host-cost microbenchmark's code path (a subprocess,
as it runs elsewhere): every row stays under its grammar for the whole run, each phase is
timed, and the same seed draws the same tokens."""

import json

from tests.conftest import run_tiny_script


def test_bench_guided_host_tiny_times_the_guided_host_work_and_repeats_its_tokens(tmp_path):
    runs = []
    for name in ("a", "b"):
        run_tiny_script("scripts.bench_guided_host", tmp_path / name, "--clock", "cpu")
        runs.append(json.loads((tmp_path / name / "bench_guided_host.json").read_text()))
    rows = runs[0]["rows"]
    assert sorted(rows, key=int) == ["4", "16"]
    for row in rows.values():
        assert row["fill_us"] > 0 and row["append_us"] > 0
        assert row["total_us"] == row["fill_us"] + row["append_us"]
        assert {"guided.accept", "guided.fill"} <= set(row["phases_us"])
    assert [r["tokens_sha256"] for r in runs[0]["rows"].values()] == [
        r["tokens_sha256"] for r in runs[1]["rows"].values()
    ]
    assert "| 16 |" in (tmp_path / "a" / "bench_guided_host.md").read_text()
