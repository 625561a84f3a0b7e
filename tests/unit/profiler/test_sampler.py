import os
import subprocess
import sys
import time

import pytest

from pipeline.profiler import make_sampler
from pipeline.profiler.plots import plot_timeline
from pipeline.profiler.process_source import ProcessSource
from pipeline.profiler.sampler import Sampler, next_deadline, summarize_samples


def test_sleep_is_corrected_for_query_time():
    # a query that took 0.05 s of a 1/6 s period leaves a 0.1167 s sleep
    deadline, delay = next_deadline(10.0, now_s=10.05, period_s=1 / 6)
    assert deadline == pytest.approx(10.0 + 1 / 6) and delay == pytest.approx(1 / 6 - 0.05)


def test_overrun_restarts_schedule_without_a_burst():
    deadline, delay = next_deadline(10.0, now_s=10.5, period_s=1 / 6)
    assert (deadline, delay) == (10.5, 0.0)
    deadline, delay = next_deadline(deadline, now_s=10.5, period_s=1 / 6)
    assert delay == pytest.approx(1 / 6)


def test_process_source_follows_a_tree_started_later():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        source = ProcessSource({"bench": os.getpid(), "server": child.pid})
        first = source.sample()
        assert first["bench"]["rss_bytes"] > 10 * 2**20
        assert first["server"]["rss_bytes"] > 0
    finally:
        child.kill()
        child.wait()
    assert source.sample()["server"] == {"cpu_pct": None, "rss_bytes": None}


def test_a_root_added_during_a_sample_joins_the_next_one():
    # the bench adds the server's root from its own thread while the sampler thread is sampling
    source = ProcessSource({"bench": os.getpid()})
    walk = source._tree

    def tree_then_add_root(pid):
        source.add_root("server", os.getppid())
        return walk(pid)

    source._tree = tree_then_add_root
    assert set(source.sample()) == {"bench"}
    source._tree = walk
    assert set(source.sample()) == {"bench", "server"}


class FailingSource:
    name = "flaky"

    def describe(self) -> dict:
        return {"source": self.name}

    def sample(self) -> dict:
        raise RuntimeError("device lost")

    def close(self) -> None:
        pass


def test_a_failing_source_is_noted_and_the_others_go_on():
    sampler = Sampler(
        [FailingSource(), ProcessSource({"bench": os.getpid()})], rate_hz=100.0, origin_s=0.0
    )
    with sampler:
        time.sleep(0.1)
    timeline = sampler.timeline()
    assert timeline["num_samples"] >= 2
    assert all(s["bench"]["rss_bytes"] > 0 for s in timeline["samples"])
    (note,) = timeline["notes"]
    assert "flaky source failed" in note and "device lost" in note


def test_sampler_records_phases_and_plots(tmp_path):
    sampler = make_sampler(rate_hz=50.0)
    with sampler:
        with sampler.phase("warmup"):
            time.sleep(0.1)
        with sampler.phase("measure"):
            time.sleep(0.1)
    timeline = sampler.timeline()
    assert [p["name"] for p in timeline["phases"]] == ["warmup", "measure"]
    assert timeline["num_samples"] >= 2
    assert timeline["summary"]["bench"]["rss_bytes_max"] > 0
    try:
        import pynvml

        pynvml.nvmlInit()
        has_nvml = True
    except Exception:
        has_nvml = False
    if not has_nvml:
        assert "NVML unavailable" in timeline["notes"][0]
    assert plot_timeline(timeline, tmp_path / "t.png").stat().st_size > 1000


def test_summary_over_a_window():
    samples = [{"t_s": t, "gpu0": {"util_pct": u}} for t, u in ((0, 10.0), (1, 50.0), (2, 90.0))]
    assert summarize_samples(samples, 0.5, 2.5) == {
        "gpu0": {"util_pct_max": 90.0, "util_pct_mean": 70.0}
    }


def test_sampler_without_sources_of_a_kind_still_runs():
    sampler = Sampler([ProcessSource({"bench": os.getpid()})], rate_hz=100.0, origin_s=0.0)
    with sampler:
        time.sleep(0.05)
    assert sampler.samples and "query_s" in sampler.samples[0]


def test_a_process_in_two_trees_counts_once_for_the_later_root():
    # the child holds 200 MB so its share dwarfs this process's own RSS drift between samples
    child = subprocess.Popen(
        [sys.executable, "-c", 'import time; b = b"x" * 200_000_000; time.sleep(30)']
    )
    try:
        source = ProcessSource({"bench": os.getpid()})
        time.sleep(0.5)  # let the child allocate
        alone = source.sample()["bench"]["rss_bytes"]
        source.add_root("server", child.pid)
        both = source.sample()
        server_rss = both["server"]["rss_bytes"]
        assert server_rss > 0
        # "bench" alone held the child (a child of this process); now "server" holds it
        assert both["bench"]["rss_bytes"] == pytest.approx(alone - server_rss, abs=server_rss / 2)
    finally:
        child.kill()
        child.wait()
