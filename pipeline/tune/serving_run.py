"""`tune` on the serving space: anneal the knobs on the bench workload, then the report and the
overlay for `make deploy`."""

import logging
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.bench.runner import prompt_maker
from pipeline.bench.session import Workload
from pipeline.errors import StageError
from pipeline.tune.annealer import Annealer
from pipeline.tune.serving_overlay import write_overlay
from pipeline.tune.serving_space import KEYS, ServingSpace

log = logging.getLogger(__name__)
UNIT = "ms per output token x latency-budget penalty"


def _metrics_table(space: ServingSpace, default: dict, tuned: dict) -> str:
    rows = [
        "| | output tok/s | TTFT p99 (ms) | ITL p99 (ms) | within budget |",
        "|---|---|---|---|---|",
    ]
    for name, settings in (("default", default), ("tuned", tuned)):
        runs = space.metrics.get(tuple(settings.values()), [])
        if not runs:
            continue
        mean = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        rows.append(
            f"| {name} | {mean['output_tok_s']:.1f} | {mean['ttft_ms_p99']:.1f} | "
            f"{mean['itl_ms_p99']:.1f} | {'yes' if space.is_feasible(mean) else 'no'} |"
        )
    return "\n".join(rows)


def tune_serving(
    spec,
    engine_dir: Path,
    out_dir: Path,
    final_dir: Path,
    deploy: Callable | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict:
    workload = Workload.from_spec(spec.bench, prompt_maker(engine_dir))
    space = ServingSpace(spec, engine_dir, workload, deploy)
    try:
        result = Annealer(spec.tune.anneal, clock).run(space)
    except ValueError as exc:  # the configured knobs fail their own gate
        raise StageError(f"tune: {exc}") from exc
    finally:
        space.close()
    row = {"item": f"serving ({spec.tune.serving.target})", **result.to_dict()}
    budget = f"TTFT p99 <= {spec.tune.serving.ttft_p99_ms:g} ms, ITL p99 <= "
    budget += f"{spec.tune.serving.itl_p99_ms:g} ms"
    header = (
        f"Serving knobs tuned by `python -m pipeline tune` for {spec.model.name} "
        f"({spec.backend.name}, bench={spec.bench.name}, {budget}):\n"
        f"{100 * row['gain']:+.1f}% cost vs the configured values in {len(result.trials)} trials"
    )
    overrides = {KEYS[k]: v for k, v in result.tuned.items()}
    overlay = write_overlay(out_dir, final_dir, overrides, header)
    verdict = (
        "The tuned knobs beat the configured values beyond the noise."
        if result.is_improved
        else "No candidate beat the configured values beyond the noise: the overlay keeps them."
    )
    sections = {
        "Throughput and latency": f"Budget: {budget}.\n\n"
        + _metrics_table(space, result.default, result.tuned),
        "Deploy with the tuned knobs": f"{verdict}\n\n```\n"
        f"{overlay['make_deploy']}\n{overlay['with_overlay']}\n```",
    }
    log.info("tune: serving %s -> %s (%s)", result.default, result.tuned, verdict)
    return {"items": [row], "overlay": overlay, "sections": sections, "unit": UNIT}
