"""What the bench and profile stages run: targets measured, report written, and (profile) the
resource timeline recorded around it."""

import json
import logging
import os
import time
from pathlib import Path

from pipeline.artifacts import Manifest
from pipeline.bench.baseline import hardware_key
from pipeline.bench.engine_facts import EngineFacts
from pipeline.bench.report import write_report
from pipeline.bench.session import report_dict, run_targets
from pipeline.bench.workload import PromptMaker
from pipeline.profiler import make_sampler
from pipeline.profiler.plots import plot_timeline

log = logging.getLogger(__name__)


def load_tokenizer(engine_dir: Path):
    """The tokenizer build recorded in its manifest (the fetched HF dir's)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Manifest.read(engine_dir).extra["tokenizer_dir"])


def prompt_maker(engine_dir: Path) -> PromptMaker:
    return PromptMaker(load_tokenizer(engine_dir))


def write_timeline(out_dir: Path, timeline: dict) -> dict[str, Path]:
    path = out_dir / "timeline.json"
    path.write_text(json.dumps(timeline, indent=1) + "\n")
    return {"timeline": path, "timeline_plot": plot_timeline(timeline, out_dir / "timeline.png")}


def run_bench(
    spec, engine_dir: Path, out_dir: Path, with_profiler: bool, deployed: Path | None = None
) -> dict:
    """Measure, write bench.json/bench.md/requests.json/plots (+ timeline.*); return the report.
    `deployed`: the deploy artifact a server is launched on (server_target.launches_server)."""
    maker = prompt_maker(engine_dir)
    facts = EngineFacts.read(engine_dir)
    origin_s = time.perf_counter()
    sampler = (
        make_sampler(spec.bench.profile.sample_rate_hz, {"bench": os.getpid()}, origin_s)
        if with_profiler
        else None
    )
    if sampler is None:
        results, records = run_targets(
            spec, engine_dir, maker, facts.weights_bytes, None, origin_s, deployed
        )
    else:
        with sampler:
            results, records = run_targets(
                spec, engine_dir, maker, facts.weights_bytes, sampler, origin_s, deployed
            )
    report = report_dict(
        spec, engine_dir, results, hardware_key(spec.hardware), facts.weights_bytes
    )
    paths = write_report(out_dir, report, records)
    if sampler is not None:
        timeline = sampler.timeline()
        report["profile"] = {
            "notes": timeline["notes"],
            "summary": timeline["summary"],
            "achieved_rate_hz": timeline["achieved_rate_hz"],
        }
        paths.update(write_timeline(out_dir, timeline))
        (out_dir / "bench.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    log.info("bench: wrote %s", ", ".join(p.name for p in paths.values()))
    return report
