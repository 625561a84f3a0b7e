"""study: every parallel mapping x kernel mode x workload x batch size, each cell measured (time,
accuracy, communication, memory) and kept as its own artifact, then one report with figures.
A rerun skips finished cells."""

import dataclasses
import json
import logging
import time
from pathlib import Path

from pipeline.artifacts import StageRequest, produce_artifact, sha256_json
from pipeline.engine.engine_config import resolve_device
from pipeline.errors import PipelineError
from pipeline.specs.parallel import ParallelSpec
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import build, fetch, forced

log = logging.getLogger(__name__)


def _engine_spec(spec: PipelineSpec, tp: int, pp: int):
    """The configured model and build, at this mapping, with room for the study's batches and
    its longest workload and probes."""
    study, acc = spec.study, spec.study.accuracy
    longest = max(int(w.split("x")[0]) for w in study.workloads)
    prompts = max(longest, acc.ppl_window_tokens, acc.cloze_context_tokens)
    seq = max(
        prompts + 1,
        *(sum(map(int, w.split("x"))) for w in study.workloads),
        acc.greedy_prompt_tokens + acc.greedy_max_tokens,
    )
    limits = dataclasses.replace(
        spec.build,
        max_batch_size=study.max_batch_size,
        max_input_len=max(spec.build.max_input_len, prompts),
        max_seq_len=max(spec.build.max_seq_len, seq),
    )
    return dataclasses.replace(spec, parallel=ParallelSpec(tp, pp), build=limits)


def _engines(
    spec: PipelineSpec, mappings: set[tuple[int, int]], hf_dir: Path
) -> tuple[str, dict, dict]:
    """(model name the cells are filed under, {(tp, pp): (engine dir, its artifact)}, {(tp, pp):
    why that mapping has no engine}: a mapping the model does not split over is reported, and
    the others run)."""
    if spec.study.synthetic_shape is None:
        name = spec.model.name

        def make(tp: int, pp: int) -> tuple[Path, Path]:
            engine = build.run(_engine_spec(spec, tp, pp))
            return engine, engine
    else:
        from pipeline.study.synthetic_engine import synthetic_engine

        name = f"synthetic-{spec.study.synthetic_shape}"

        def make(tp: int, pp: int) -> tuple[Path, Path]:
            artifact = synthetic_engine(_engine_spec(spec, tp, pp), name, hf_dir)
            return artifact / "engine", artifact

    out, unbuilt = {}, {}
    for tp, pp in sorted(mappings):
        try:
            out[(tp, pp)] = make(tp, pp)
        except PipelineError as exc:  # e.g. heads that do not split over tp_size
            unbuilt[(tp, pp)] = str(exc)
            log.error("study: no engine for tp_size=%d pp_size=%d: %s", tp, pp, exc)
    return name, out, unbuilt


def _probes(spec: PipelineSpec, model: str, hf_dir: Path) -> Path:
    from transformers import AutoTokenizer

    from pipeline.study.probes import PROBES_FILE, build_probes

    quant = spec.quant
    config = {
        "accuracy": dataclasses.asdict(spec.study.accuracy),
        # the gate's evaluation windows (calibration.build_windows) of this text
        "text": [quant.calib_dataset, quant.calib_size, quant.eval_size, quant.seq_len],
    }
    request = StageRequest(Path(spec.workdir), model, "study-probes", config, {"hf": hf_dir})

    def produce(out_dir: Path) -> dict:
        probes = build_probes(AutoTokenizer.from_pretrained(hf_dir), quant, spec.study.accuracy)
        (out_dir / PROBES_FILE).write_text(json.dumps(probes.to_json()))
        return {"num_cloze_items": len(probes.cloze), "source": probes.source}

    return produce_artifact(request, produce)


def run(spec: PipelineSpec, fault=None) -> Path:
    """fault: a RequestFault the accuracy probes run under (pipeline.study.faults), for showing
    that the accuracy flag fires; its cells are kept apart from clean ones."""
    from pipeline.study.assemble import assemble, write_study
    from pipeline.study.grid import expand
    from pipeline.study.runner import run_all
    from pipeline.study.series import SeriesJob, pending_size

    study, device = spec.study, str(resolve_device(spec.backend.device))
    series, notes = expand(study), []
    if not device.startswith("cuda") and any(s.kernels == "fused" for s in series):
        series = [s for s in series if s.kernels != "fused"]
        notes.append("fused cells skipped: the Triton kernels and CUDA graphs need a CUDA GPU")
    hf_dir = fetch.run(spec)
    model, engines, unbuilt = _engines(spec, {(s.tp_size, s.pp_size) for s in series}, hf_dir)
    names = {(s.tp_size, s.pp_size): s.mapping for s in series}
    notes += [f"{names[k]}: not run, no engine: {why}" for k, why in sorted(unbuilt.items())]
    series = [s for s in series if (s.tp_size, s.pp_size) in engines]
    probes = _probes(spec, model, hf_dir)
    deadline = time.time() + study.time_budget_s if study.time_budget_s > 0 else 0.0
    jobs = [
        SeriesJob(
            series=s,
            engine_dir=engines[(s.tp_size, s.pp_size)][0],
            engine_artifact=engines[(s.tp_size, s.pp_size)][1],
            model_name=model,
            workdir=Path(spec.workdir),
            device=device,
            num_threads=spec.deploy.torch.num_threads,
            study=study,
            bench=spec.bench,
            deploy=spec.deploy,
            probes_dir=probes,
            fault=fault,
            deadline_s=deadline,
        )
        for s in series
    ]
    notes += run_all(jobs, study.isolate)
    cells = []
    for job in jobs:
        done: dict[int, dict] = {}
        pending_size(job, done)
        cells += [done[b] for b in sorted(done)]
    data = assemble(cells, study, model, device, notes)
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=model,
        stage="study",
        config={
            "study": dataclasses.asdict(study),
            "device": device,
            "fault": repr(fault) if fault else None,
        },
        fingerprint_extra=sha256_json([cells, notes]),
        force=forced(spec, "study"),
    )
    out = produce_artifact(request, lambda out_dir: {"paths": str(write_study(out_dir, data))})
    print((out / "study.md").read_text())
    return out
