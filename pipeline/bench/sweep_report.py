"""Sweep results on disk: sweep.json, sweep.md (one row per size), sweep.png."""

import json
import math
from pathlib import Path

from pipeline.bench.sweep_plots import plot_sweep

COLUMNS = (
    ("output_tok_s", "out tok/s"),
    ("request_per_s", "req/s"),
    ("ttft_ms_p50", "TTFT p50 ms"),
    ("ttft_ms_p99", "TTFT p99 ms"),
    ("itl_ms_p50", "ITL p50 ms"),
    ("e2e_ms_p50", "e2e p50 ms"),
    ("peak_memory_gib", "peak mem GiB"),
    ("kv_used_gib", "KV used GiB"),
    ("peak_running", "ran at once"),
)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return (
            "nan" if math.isnan(value) else f"{value:,.3g}" if abs(value) < 1 else f"{value:,.1f}"
        )
    return str(value)


def markdown(data: dict) -> str:
    lines = [
        f"# sweep: {data['model']} ({data['backend']}, {data['hardware']}, target "
        f"{data['target']})",
        "",
        "| size | result | " + " | ".join(label for _, label in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for r in data["results"]:
        status = "ok" if r["is_ok"] else f"FAIL ({r['failure']})"
        lines.append(
            f"| {r['size']} | {status} | "
            + " | ".join(_cell(r["metrics"].get(key)) for key, _ in COLUMNS)
            + " |"
        )
    lines.append("")
    capacity = data.get("kv_capacity")
    if capacity:
        lines.append(
            f"KV cache: {capacity['num_total_blocks']} blocks x "
            f"{capacity['tokens_per_block']} tokens ({capacity['kv_gib']:.2f} GiB); "
            f"{capacity['blocks_per_sequence']} blocks per sequence, so at most "
            f"{capacity['max_sequences']} sequences at once."
        )
    if data["threshold_size"] is None:
        lines.append(f"No failure up to size {data['max_ok_size']}.")
    else:
        lines.append(
            f"Threshold: size {data['threshold_size']} fails "
            f"({data['threshold_failure']}): {data['threshold_detail']}. Largest size "
            f"that fits: {data['max_ok_size']}."
        )
    return "\n".join(lines) + "\n"


def write_sweep(out_dir: Path, data: dict) -> dict[str, Path]:
    paths = {"json": out_dir / "sweep.json", "markdown": out_dir / "sweep.md"}
    paths["json"].write_text(json.dumps(data, indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown(data))
    title = (
        f"{data['model']} {data['backend']} on {data['hardware']}: {data['target']}, "
        f"{data['settings']['input_len']}+{data['settings']['output_len']} tokens"
    )
    paths["plot"] = plot_sweep(data, out_dir / "sweep.png", title)
    return paths
