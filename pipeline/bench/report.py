"""Bench results on disk: bench.json (settings, per-target summaries, Triton-vs-direct ratio),
requests.json (every request's timings), bench.md (a table) and the figures."""

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.bench import served_path
from pipeline.bench.plots import plot_latency_cdfs, plot_request_timeline, plot_served_path
from pipeline.bench.records import RequestRecord

# (summary key, markdown label)
TABLE_ROWS = (
    ("num_ok", "requests ok"),
    ("num_errors", "errors"),
    ("duration_s", "measured window (s)"),
    ("output_tok_s", "output tok/s"),
    ("total_tok_s", "total tok/s (in+out)"),
    ("request_per_s", "requests/s"),
    ("output_tok_s_per_user", "tok/s per user (1/ITL)"),
    ("ttft_ms_p50", "TTFT p50 (ms)"),
    ("ttft_ms_p90", "TTFT p90 (ms)"),
    ("ttft_ms_p99", "TTFT p99 (ms)"),
    ("itl_ms_p50", "ITL p50 (ms)"),
    ("itl_ms_p90", "ITL p90 (ms)"),
    ("itl_ms_p99", "ITL p99 (ms)"),
    ("e2e_ms_p50", "end-to-end p50 (ms)"),
    ("e2e_ms_p90", "end-to-end p90 (ms)"),
    ("e2e_ms_p99", "end-to-end p99 (ms)"),
    ("achieved_weight_bw_gb_s", "weights GB/s (>=)"),
    ("peak_memory_gib", "peak memory (GiB)"),
)


def triton_overhead(targets: Mapping[str, dict]) -> dict | None:
    """Server vs direct on the same engine and workload: throughput ratio, added latency."""
    if "server" not in targets or "direct" not in targets:
        return None
    server, direct = targets["server"]["summary"], targets["direct"]["summary"]

    def ratio(key: str) -> float:
        return server[key] / direct[key] if direct[key] else math.nan

    return {
        "output_tok_s_ratio": ratio("output_tok_s"),
        "request_per_s_ratio": ratio("request_per_s"),
        "ttft_ms_p50_added": server["ttft_ms_p50"] - direct["ttft_ms_p50"],
        "ttft_ms_p99_added": server["ttft_ms_p99"] - direct["ttft_ms_p99"],
        "itl_ms_p50_added": server["itl_ms_p50"] - direct["itl_ms_p50"],
        "e2e_ms_p50_ratio": ratio("e2e_ms_p50"),
    }


def _cell(value) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:,.2f}"
    return "-" if value is None else str(value)


def markdown(report: dict) -> str:
    targets = report["targets"]
    names = list(targets)
    settings = report["settings"]
    lines = [
        f"# bench: {report['model']} ({report['backend']}, {report['hardware']})",
        "",
        "workload: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label in TABLE_ROWS:
        if any(key in targets[n]["summary"] for n in names):
            lines.append(
                f"| {label} | "
                + " | ".join(_cell(targets[n]["summary"].get(key)) for n in names)
                + " |"
            )
    for key, title in (
        ("triton_vs_direct", "Triton vs direct (same engine, same requests)"),
        ("openai_vs_server", "OpenAI API vs Triton gRPC (same server, same requests)"),
    ):
        if report.get(key):
            values = ", ".join(f"{k}={_cell(v)}" for k, v in report[key].items())
            lines += ["", f"{title}: {values}"]
    for name in names:
        warmup = targets[name]["warmup"]
        lines.append(
            f"\n{name}: warm-up {warmup['num_requests']} requests in "
            f"{_cell(warmup['duration_s'])} s (excluded)"
        )
        errors = targets[name]["summary"].get("error_messages")
        if errors:
            lines.append(f"{name} errors: " + "; ".join(errors))
    if "served_path" in targets.get("server", {}):
        lines += served_path.markdown_lines(targets["server"]["served_path"])
    return "\n".join(lines) + "\n"


def write_report(
    out_dir: Path, report: dict, records: Mapping[str, Sequence[RequestRecord]]
) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "bench.json",
        "markdown": out_dir / "bench.md",
        "requests": out_dir / "requests.json",
    }
    paths["json"].write_text(json.dumps(report, indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown(report))
    paths["requests"].write_text(
        json.dumps({name: [r.to_dict() for r in recs] for name, recs in records.items()}, indent=1)
        + "\n"
    )
    paths["latency_plot"] = plot_latency_cdfs(records, out_dir / "latency_cdf.png")
    paths["timeline_plot"] = plot_request_timeline(records, out_dir / "request_timeline.png")
    hops = report["targets"].get("server", {}).get("served_path", {}).get("hops_ms")
    if hops:
        paths["served_path_plot"] = plot_served_path(hops, out_dir / "served_path.png")
    return paths
