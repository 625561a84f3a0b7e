"""sweep: batch size / concurrency 1, 2, 4, ... recording throughput, latency and memory up to
the first size that fails (GPU OOM or KV capacity), which is reported, never raised."""

import os
import time
from pathlib import Path

from pipeline.artifacts import produce_artifact
from pipeline.bench.baseline import hardware_key
from pipeline.bench.engine_facts import EngineFacts
from pipeline.bench.server_target import launches_server
from pipeline.bench.session import check_bench_spec, settings
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import build, deploy
from pipeline.stages.bench import measurement_request


def kv_capacity(results, facts, bench) -> dict | None:
    """How many sequences of this workload the engine's KV cache holds (direct sweeps only)."""
    total = next(
        (r.metrics["num_total_blocks"] for r in results if "num_total_blocks" in r.metrics), None
    )
    if total is None:
        return None
    per_seq = -(-(bench.input_len + bench.output_len - 1) // facts.tokens_per_block)
    return {
        "num_total_blocks": total,
        "tokens_per_block": facts.tokens_per_block,
        "blocks_per_sequence": per_seq,
        "max_sequences": total // per_seq,
        "kv_gib": total * facts.kv_bytes_per_block / 2**30,
    }


def run(spec: PipelineSpec) -> Path:
    from pipeline.bench.runner import prompt_maker, write_timeline
    from pipeline.bench.sweep_report import markdown, write_sweep
    from pipeline.bench.sweep_runner import sweep
    from pipeline.profiler import make_sampler

    check_bench_spec(spec.bench)
    options = spec.bench.sweep
    engine_dir = build.run(spec)
    deployed = deploy.run(spec) if launches_server(spec.bench, options.target) else None
    data = {}

    def produce(out_dir: Path) -> dict:
        origin_s = time.perf_counter()
        sampler = make_sampler(spec.bench.profile.sample_rate_hz, {"bench": os.getpid()}, origin_s)
        with sampler:
            maker = prompt_maker(engine_dir)
            result = sweep(spec, engine_dir, maker, sampler, origin_s, deployed)
        timeline = sampler.timeline()
        data["kv_capacity"] = kv_capacity(result.results, EngineFacts.read(engine_dir), spec.bench)
        data.update(
            model=spec.model.name,
            backend=spec.backend.name,
            hardware=hardware_key(spec.hardware),
            target=options.target,
            sizes=list(options.sizes),
            num_kv_blocks=options.num_kv_blocks,
            settings=settings(spec.bench),
            profile_notes=timeline["notes"],
            **result.to_dict(),
        )
        write_sweep(out_dir, data)
        write_timeline(out_dir, timeline)
        return {k: data[k] for k in ("max_ok_size", "threshold_size", "threshold_failure")}

    out = produce_artifact(measurement_request(spec, "sweep", engine_dir), produce)
    print(markdown(data))
    return out
