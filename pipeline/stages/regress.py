"""regress: this engine's bench + accuracy vs baselines/<model>-<backend>-<hardware>.json, with a
tolerance per metric; prints a table; a regression fails the stage (exit 1, artifact kept with
status=failed). bench.regress.update_baseline=true (`make update-baseline`) rewrites the file."""

import json
import logging
from dataclasses import asdict
from pathlib import Path

from pipeline.artifacts import StageRequest, package_versions, produce_artifact
from pipeline.bench.baseline import (
    baseline_key,
    build_baseline,
    hardware_key,
    read_baseline,
    write_baseline,
)
from pipeline.bench.session import check_bench_spec, settings
from pipeline.errors import ConfigError, GateFailed
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import bench as bench_stage
from pipeline.stages import build

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def baseline_path(spec: PipelineSpec, hardware: str) -> Path:
    if spec.bench.regress.baseline:
        return Path(spec.bench.regress.baseline)
    key = baseline_key(spec.model.name, spec.backend.name, hardware)
    return REPO_ROOT / "baselines" / f"{key}.json"


def check_same_workload(path: Path, stored: dict, current: dict) -> None:
    diff = {k: (stored.get(k), v) for k, v in current.items() if stored.get(k) != v}
    if diff:
        what = ", ".join(f"bench.{k}={new!r} (baseline: {old!r})" for k, (old, new) in diff.items())
        raise ConfigError(
            f"regress: {path} was measured with other bench settings: {what}; "
            f"run with the baseline's settings or `make update-baseline`"
        )


def bench_result(spec: PipelineSpec) -> tuple[Path, dict]:
    """The bench to judge: bench.regress.bench_dir if set, else a fresh bench run."""
    bench_dir = Path(spec.bench.regress.bench_dir or bench_stage.run(spec))
    path = bench_dir / "bench.json"
    if not path.is_file():
        raise ConfigError(
            f"regress: bench.regress.bench_dir={bench_dir} has no bench.json; point "
            f"it at a bench or profile artifact dir, or leave it null"
        )
    return bench_dir, json.loads(path.read_text())


def measure_accuracy(spec: PipelineSpec, engine_dir: Path) -> dict:
    from pipeline.bench import accuracy
    from pipeline.bench.runner import load_tokenizer
    from pipeline.bench.session import direct_target

    options = spec.bench.regress
    with direct_target(spec, engine_dir) as target:
        return accuracy.measure_accuracy(
            target.engine,
            load_tokenizer(engine_dir),
            options.num_accuracy_prompts,
            options.accuracy_max_tokens,
            options.ppl_num_tokens,
            Path(spec.bench.corpus_path) if spec.bench.corpus_path else None,
        )


def run(spec: PipelineSpec) -> Path:
    from pipeline.bench.comparator import compare, format_table
    from pipeline.bench.regress_metrics import current_metrics, default_rules

    check_bench_spec(spec.bench)
    hardware = hardware_key(spec.hardware)
    path = baseline_path(spec, hardware)
    options = spec.bench.regress
    stored = None if options.update_baseline else read_baseline(path)
    if stored is not None and not options.bench_dir:  # fail before measuring anything
        check_same_workload(path, stored["workload"], settings(spec.bench))
    engine_dir = build.run(spec)
    bench_dir, report = bench_result(spec)
    if stored is not None:
        check_same_workload(path, stored["workload"], report["settings"])
    current = current_metrics(report, measure_accuracy(spec, engine_dir))
    if options.update_baseline:
        previous = read_baseline(path) if path.is_file() else None
        data = build_baseline(
            baseline_key(spec.model.name, spec.backend.name, hardware),
            spec.model.name,
            spec.backend.name,
            hardware,
            report["settings"],
            current,
            default_rules(current, options),
            previous,
            package_versions(),
        )
        write_baseline(path, data)
        print(f"regress: baseline written to {path} ({len(current)} metrics)")
        return path
    rows = compare(stored["metrics"], current)
    table = format_table(rows)
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage="regress",
        config={"bench": asdict(spec.bench), "hardware": hardware, "baseline": str(path)},
        upstream={"bench": bench_dir},
        force=True,
    )
    regressed = [r.metric for r in rows if r.is_regression]

    def produce(out_dir: Path) -> dict:
        (out_dir / "regress.md").write_text(f"# regress vs {path}\n\n{table}\n")
        (out_dir / "regress.json").write_text(
            json.dumps(
                {
                    "baseline": str(path),
                    "current": current,
                    "rows": [asdict(r) for r in rows],
                    "regressed": regressed,
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
        extra = {"baseline": str(path), "regressed": regressed}
        if regressed:
            error = GateFailed(
                f"regress: {len(regressed)} metric(s) regressed vs {path}: "
                f"{', '.join(regressed)}; see the table above, fix the cause, or "
                f"accept the new numbers with `make update-baseline`"
            )
            error.extra = extra
            raise error
        return extra

    print(table)
    return produce_artifact(request, produce)
