"""A series (mapping x kernels x workload): its engine, loaded once, and its cells in the order
grid.next_batch_size gives, each cell its own artifact (a finished one is read, not re-run).

After a GPU out-of-memory or another error the engine's state is unknown: run_series returns
RESTART and the caller starts a fresh process, which resumes from the cells written so far."""

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.artifacts import StageRequest, is_up_to_date, produce_artifact
from pipeline.errors import ArtifactError
from pipeline.study.faults import RequestFault
from pipeline.study.grid import Series, next_batch_size
from pipeline.synthetic.weights import HOOK
from pipeline.triton_models.engine_runtime import engine_runtime

log = logging.getLogger(__name__)
CELL_FILE = "cell.json"
DONE, RESTART, OUT_OF_TIME = "done", "restart", "out_of_time"


@dataclass(frozen=True)
class SeriesJob:
    series: Series
    engine_dir: Path  # what the engine loads
    engine_artifact: Path  # the artifact (with its manifest) that holds it: the cells' upstream
    model_name: str
    workdir: Path
    device: str
    num_threads: int
    study: object  # StudySpec
    bench: object  # BenchSpec: the seed and request timeout the cells keep
    deploy: object  # DeploySpec: the engine runs as deployed (engine_runtime)
    probes_dir: Path  # the probes artifact (probes.json): the cells' upstream
    fault: RequestFault | None = None
    deadline_s: float = 0.0  # time.time() past which no new cell starts; 0 = none

    @property
    def runtime(self) -> dict:
        runtime = engine_runtime(self.deploy, self.study.num_kv_blocks)
        is_fused = self.series.kernels == "fused"
        runtime |= {"use_cuda_graph": is_fused, "triton_kernels": is_fused}
        if self.study.synthetic_shape is not None:  # drawn on the GPUs as the engine loads
            runtime["weights_loader"] = HOOK
        return runtime


def cell_request(job: SeriesJob, batch_size: int) -> StageRequest:
    study = job.study
    config = {
        "series": dataclasses.asdict(job.series),
        "batch_size": batch_size,
        "runtime": job.runtime,
        "device": job.device,
        "num_waves": study.num_waves,
        "num_warmup_requests": study.num_warmup_requests,
        "sample_rate_hz": study.sample_rate_hz,
        "accuracy": dataclasses.asdict(study.accuracy),
        "seed": job.bench.seed,
        "fault": repr(job.fault) if job.fault else None,
    }
    return StageRequest(
        workdir=Path(job.workdir),
        model=job.model_name,
        stage=f"study-{job.series.cell_key(batch_size)}",
        config=config,
        upstream={"engine": Path(job.engine_artifact), "probes": Path(job.probes_dir)},
    )


def read_cell(job: SeriesJob, batch_size: int) -> dict | None:
    """The finished cell's result, None when it has not run (or ran under other settings)."""
    request = cell_request(job, batch_size)
    try:
        if not is_up_to_date(request):
            return None
    except ArtifactError:  # a changed file: run the cell again
        return None
    return json.loads((request.artifact_dir / CELL_FILE).read_text())


def pending_size(job: SeriesJob, done: dict[int, dict]) -> int | None:
    """The next batch size to run, reading finished cells into `done` on the way."""
    study = job.study
    while True:
        outcomes = {b: cell["failure"] for b, cell in done.items()}
        size = next_batch_size(
            outcomes, study.max_batch_size, study.bisect_steps, study.batch_sizes
        )
        if size is None:
            return None
        cell = read_cell(job, size)
        if cell is None:
            return size
        done[size] = cell


def is_finished(job: SeriesJob) -> bool:
    return pending_size(job, {}) is None


@dataclass
class SeriesContext:
    job: SeriesJob
    target: object  # DirectTarget
    sampler: object
    origin_s: float
    comm: object  # CollectiveBytes
    maker: object  # PromptMaker
    facts: object  # EngineFacts
    probes: object  # Probes


def _facts(engine_dir: Path):
    from pipeline.bench.engine_facts import EngineFacts
    from pipeline.study.cell import weights_bytes

    facts = EngineFacts.read(engine_dir)
    return dataclasses.replace(facts, weights_bytes=weights_bytes(engine_dir, facts))


def _load(job: SeriesJob, sampler, origin_s: float) -> SeriesContext:
    from pipeline.bench.direct_target import DirectTarget
    from pipeline.bench.workload import PromptMaker
    from pipeline.study.comm_bytes import CollectiveBytes
    from pipeline.study.probes import PROBES_FILE, Probes

    target = DirectTarget(job.engine_dir, job.device, job.runtime, job.num_threads)
    runner = target.engine.model_runner
    if runner.workers is not None:
        for rank, pid in sorted(runner.workers.pids.items()):
            sampler.watch_process(f"rank{rank}", pid)
    return SeriesContext(
        job,
        target,
        sampler,
        origin_s,
        CollectiveBytes(target.engine),
        PromptMaker(target.engine.tokenizer),  # the engine dir's own (synthetic ones too)
        _facts(job.engine_dir),
        Probes.read(Path(job.probes_dir) / PROBES_FILE),
    )


def run_series(job: SeriesJob) -> str:
    """Run the series' pending cells on one engine: DONE, RESTART after a failure that may have
    left the engine broken (OOM, error), or OUT_OF_TIME past job.deadline_s."""
    from pipeline.study.cell import measure_cell
    from pipeline.study.sampling import study_sampler

    done: dict[int, dict] = {}
    size = pending_size(job, done)
    if size is None:
        return DONE
    origin_s = time.perf_counter()
    sampler = study_sampler(job.study.sample_rate_hz, origin_s)
    with sampler:
        ctx = _load(job, sampler, origin_s)
        try:
            while size is not None:
                if job.deadline_s and time.time() > job.deadline_s:
                    return OUT_OF_TIME
                cell: dict = {}

                def produce(out_dir: Path, size=size, cell=cell) -> dict:
                    cell.update(measure_cell(ctx, size))
                    cell["profile_notes"] = list(sampler.notes)
                    cell["profile_sources"] = [s.describe() for s in sampler.sources]
                    (out_dir / CELL_FILE).write_text(json.dumps(cell, indent=1, default=str))
                    return {"is_ok": cell["is_ok"], "failure": cell["failure"]}

                produce_artifact(cell_request(job, size), produce)
                done[size] = cell
                if cell["failure"] in ("oom", "error"):
                    return RESTART
                size = pending_size(job, done)
        finally:
            ctx.target.engine.close()  # the worker ranks and the process group
            ctx.target.close()
    return DONE
