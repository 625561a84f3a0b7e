"""tune: simulated annealing over one search space (the tune group), on real measurements.

serving: the engine's serving knobs on the bench workload -> a config overlay for `make deploy`.
kernels: the Triton kernels' launch configs per shape class of the built model -> the tuning
cache, which the next build puts into its engine dir. instructions: SIP-style PTX schedules of
one kernel. A measurement, so it always runs (tune.json, tune.md, trace.png each time).
"""

import logging
from dataclasses import asdict
from pathlib import Path

from pipeline.artifacts import StageRequest, produce_artifact
from pipeline.bench.baseline import hardware_key
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import build, deploy
from pipeline.tune.report import markdown, write_report
from pipeline.tune.spec_checks import check_tune_spec

log = logging.getLogger(__name__)


def gpu_unavailable() -> str | None:
    """Why the kernel spaces cannot run here (None: they can)."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False here)"
    if importlib.util.find_spec("triton") is None:
        return "needs triton (it ships with CUDA builds of torch)"
    return None


def run(spec: PipelineSpec) -> Path | None:
    tune = spec.tune
    check_tune_spec(tune)
    if tune.space != "serving" and (reason := gpu_unavailable()):
        print(
            f"tune: skipped: tune={tune.space} {reason}; run it on the GPU host "
            f"(`python -m pipeline tune tune={tune.space}` or `python -m scripts.tune_kernels`)"
        )
        return None
    engine_dir = build.run(spec)
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage=f"tune-{tune.space}",
        config={
            "tune": asdict(tune),
            "bench": asdict(spec.bench),
            "deploy": asdict(spec.deploy),
            "backend": asdict(spec.backend),
            "hardware": spec.hardware,
        },
        upstream={"engine": engine_dir},
        force=True,
    )
    reports = []

    def produce(out_dir: Path) -> dict:
        report = {
            "space": tune.space,
            "model": spec.model.name,
            "hardware": hardware_key(spec.hardware),
            "confidence": tune.anneal.confidence,
            "repeats": tune.anneal.repeats,
            "settings": asdict(tune),
            **_search(spec, engine_dir, out_dir, request.artifact_dir),
        }
        write_report(out_dir, report)
        reports.append(report)
        rows = report["items"]
        return {
            "num_items": len(rows),
            "num_trials": sum(r.get("num_trials", 0) for r in rows),
            "num_improved": sum(bool(r.get("is_improved")) for r in rows),
            **({"overlay": report["overlay"]} if "overlay" in report else {}),
        }

    out = produce_artifact(request, produce)
    print(markdown(reports[0]))
    return out


def _search(spec: PipelineSpec, engine_dir: Path, out_dir: Path, final_dir: Path) -> dict:
    if spec.tune.space == "serving":
        from pipeline.tune.serving_run import tune_serving

        return tune_serving(spec, engine_dir, out_dir, final_dir, deploy=deploy.run)
    if spec.tune.space == "kernels":
        from pipeline.tune.kernel_run import tune_kernels

        return tune_kernels(spec.tune, engine_dir, force=spec.force)
    from pipeline.tune.instruction_run import tune_instructions

    return tune_instructions(spec.tune, engine_dir, out_dir)
