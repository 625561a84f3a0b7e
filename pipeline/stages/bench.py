"""bench: load-generate against the served ensemble (gRPC streaming) and the engine in-process;
TTFT / ITL / end-to-end percentiles, tok/s, req/s, errors -> bench.json, bench.md, plots.

A measurement, so it always runs (an earlier result in the same artifact dir is replaced)."""

import logging
from dataclasses import asdict
from pathlib import Path

from pipeline.artifacts import StageRequest, produce_artifact
from pipeline.bench.server_target import launches_server
from pipeline.bench.session import check_bench_spec
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import build, deploy

log = logging.getLogger(__name__)


def measurement_request(spec: PipelineSpec, stage: str, engine_dir: Path) -> StageRequest:
    """Artifact dir keyed by everything the numbers depend on; force: measurements re-run."""
    return StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage=stage,
        config={
            "bench": asdict(spec.bench),
            "deploy": asdict(spec.deploy),
            "backend": asdict(spec.backend),
            "hardware": spec.hardware,
        },
        upstream={"engine": engine_dir},
        force=True,
    )


def headline(report: dict) -> dict:
    """The numbers a manifest (and a reader skimming it) needs."""
    out = {}
    for name, result in report["targets"].items():
        summary = result["summary"]
        for key in (
            "output_tok_s",
            "ttft_ms_p50",
            "ttft_ms_p99",
            "itl_ms_p50",
            "num_errors",
            "peak_memory_gib",
        ):
            out[f"{name}.{key}"] = summary.get(key)
    if report.get("triton_vs_direct"):
        out["triton_vs_direct.output_tok_s_ratio"] = report["triton_vs_direct"][
            "output_tok_s_ratio"
        ]
    return out


def run_measurement(spec: PipelineSpec, stage: str, with_profiler: bool) -> Path:
    from pipeline.bench.report import markdown
    from pipeline.bench.runner import run_bench

    check_bench_spec(spec.bench)
    engine_dir = build.run(spec)
    deployed = deploy.run(spec) if launches_server(spec.bench, spec.bench.target) else None
    reports = []

    def produce(out_dir: Path) -> dict:
        reports.append(run_bench(spec, engine_dir, out_dir, with_profiler, deployed))
        return headline(reports[0])

    out = produce_artifact(measurement_request(spec, stage, engine_dir), produce)
    print(markdown(reports[0]))
    return out


def run(spec: PipelineSpec) -> Path:
    return run_measurement(spec, "bench", with_profiler=False)
