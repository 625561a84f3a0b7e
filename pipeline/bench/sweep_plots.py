"""Sweep figures in the style of a paper's: throughput, latency and memory vs batch size (log2
x axis), with the first failing size marked."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (
    (
        "throughput",
        (("output_tok_s", "output tok/s"), ("request_per_s", "requests/s")),
        "throughput",
    ),
    (
        "latency",
        (
            ("ttft_ms_p50", "TTFT p50"),
            ("ttft_ms_p99", "TTFT p99"),
            ("itl_ms_p50", "ITL p50"),
            ("e2e_ms_p50", "end-to-end p50"),
        ),
        "latency (ms)",
    ),
    (
        "memory",
        (
            ("peak_memory_gib", "peak memory (NVML or RSS)"),
            ("torch_max_allocated_gib", "torch max allocated"),
        ),
        "memory (GiB)",
    ),
    ("kv", (("kv_used_gib", "KV cache used"),), "KV cache used (GiB)"),
)


def _points(results: list[dict], key: str) -> list[tuple]:
    return [
        (r["size"], r["metrics"][key])
        for r in results
        if r["is_ok"] and r["metrics"].get(key) is not None
    ]


def plot_sweep(sweep: dict, path: Path, title: str) -> Path:
    results = sweep["results"]
    # a panel without data (KV use is not visible through the server) is left out
    panels = [p for p in PANELS if any(_points(results, key) for key, _ in p[1])] or PANELS[:1]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for ax, (_, series, ylabel) in zip(axes[0], panels, strict=True):
        for key, label in series:
            if points := _points(results, key):
                ax.plot(*zip(*points, strict=True), marker="o", label=label)
        if sweep["threshold_size"] is not None:
            ax.axvline(
                sweep["threshold_size"],
                color="C3",
                ls="--",
                lw=1.2,
                label=f"fails at {sweep['threshold_size']} ({sweep['threshold_failure']})",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size / concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
