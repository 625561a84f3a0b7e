"""scripts.tune_kernels' outputs: tune_kernels.json, tune_kernels.md (strategies at the same
number of measurements, cache reuse, the engine with and without the cache, the instruction
search) and the annealing traces."""

import json
from pathlib import Path

from pipeline.tune.trace_plot import plot_traces

UNIT = "ms per launch"


def _best(result: dict | None, default_ms: float) -> str:
    if not result or "tuned_cost" not in result:
        return (result or {}).get("note", "-")
    gain = 1 - result["tuned_cost"] / default_ms if default_ms else 0.0
    mark = "" if result.get("is_improved") else " (no gain beyond noise)"
    return f"{result['tuned_cost']:.4f} ({100 * gain:+.1f}%){mark}"


def strategy_table(strategies: dict) -> list[str]:
    lines = [
        "| kernel [shape class] | default ms | anneal | random | autotune list | trials each "
        "| anneal accepted | anneal refused (correctness) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in strategies.items():
        anneal = row["anneal"]
        if anneal.get("error"):
            lines.append(f"| {name} | error: {anneal['error'][:100]} | | | | | | |")
            continue
        default_ms = anneal["default_ms"]
        refused = anneal.get("num_rejected_for_correctness", "-")
        lines.append(
            f"| {name} | {default_ms:.4f} | {_best(anneal, default_ms)} | "
            f"{_best(row.get('random'), default_ms)} | "
            f"{_best(row.get('autotune_list'), default_ms)} | {anneal['num_trials']} | "
            f"{anneal.get('num_accepted', '-')} | {refused} |"
        )
    return lines


def engine_table(engine: dict) -> list[str]:
    lines = [
        "| engine | batch-1 decode tok/s | offline out tok/s | TTFT p50 / p99 s |",
        "|---|---|---|---|",
    ]
    for name in ("without_cache", "with_cache"):
        r = engine.get(name, {})
        if "error" in r or not r:
            lines.append(f"| {name} | error: {str(r.get('error'))[-200:]} | | |")
            continue
        lines.append(
            f"| {name.replace('_', ' ')} | {r['decode_tok_s']:.1f} | "
            f"{r['throughput_out_tok_s']:,.0f} | {r['ttft_p50_s']:.2f} / {r['ttft_p99_s']:.2f} |"
        )
    record = engine.get("kernel_tuning", {})
    lines.append(
        f"\nCache lookup for the engine: {record.get('num_hits')} hits, "
        f"{record.get('num_misses')} misses."
    )
    return lines


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [
        "# Kernel tuning: annealing vs random search vs triton.autotune's list",
        "",
        f"{env['gpu']}, driver {env['driver']}, CUDA {env['cuda']}, Triton {env['triton']}, "
        f"torch {env['torch']}. Same number of measurements per strategy "
        f"({results['options']['max_trials']} trials x {results['options']['repeats']} repeats, "
        f"CUDA events over CUDA-graph replays); a gain counts only beyond the noise.",
        "",
        *strategy_table(results.get("strategies", {})),
    ]
    if reuse := results.get("cache_reuse"):
        lines += [
            "",
            f"Second pass on the same GPU: {reuse['num_from_cache']} of "
            f"{reuse['num_items']} items from the cache, {reuse['num_trials']} trials.",
        ]
    if instructions := results.get("instructions"):
        text = instructions.get("summary") or instructions["error"]
        lines += ["", "## Instruction schedules (SIP, PTX level)", "", text]
    if engine := results.get("engine"):
        lines += ["", "## Engine with and without the cache (512 x 128/128, batch-1)", ""]
        lines += engine_table(engine)
    return "\n".join(lines) + "\n"


def write_outputs(results: dict, out: Path) -> None:
    """The JSON names files under `out` as OUT/..., not by the GPU host's paths."""
    text = json.dumps(results, indent=1, default=str)
    for prefix in {str(out.resolve()), str(out)}:
        text = text.replace(json.dumps(prefix)[1:-1], "OUT")
    (out / "tune_kernels.json").write_text(text + "\n")
    (out / "tune_kernels.md").write_text(markdown(results))
    rows = [r["anneal"] for r in results.get("strategies", {}).values() if "trials" in r["anneal"]]
    if instructions := results.get("instructions"):
        rows += [instructions["search"]] if "search" in instructions else []
    plot_traces(rows, UNIT, out)
