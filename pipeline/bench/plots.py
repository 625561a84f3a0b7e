"""Bench figures: latency CDFs (TTFT, ITL, end-to-end) per target, and a per-request timeline."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pipeline.bench.records import RequestRecord  # noqa: E402

LATENCIES = (
    ("ttft_s", "time to first token (ms)"),
    ("itl_s", "inter-token latency (ms)"),
    ("e2e_s", "end-to-end latency (ms)"),
)


def plot_latency_cdfs(records: Mapping[str, Sequence[RequestRecord]], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(LATENCIES), figsize=(12, 3.4))
    for ax, (attr, label) in zip(axes, LATENCIES, strict=True):
        for target, recs in records.items():
            values = np.sort(
                [getattr(r, attr) * 1e3 for r in recs if r.is_ok and getattr(r, attr) is not None]
            )
            if len(values):
                ax.step(
                    values,
                    np.arange(1, len(values) + 1) / len(values),
                    where="post",
                    label=f"{target} (n={len(values)})",
                )
        for q in (0.5, 0.9, 0.99):
            ax.axhline(q, color="grey", lw=0.6, ls=":")
        ax.set_xlabel(label)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    axes[-1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_request_timeline(records: Mapping[str, Sequence[RequestRecord]], path: Path) -> Path:
    """One row per request: a bar from send to completion, a dot at the first token; shows how
    requests overlapped (concurrency) and where they queued."""
    fig, axes = plt.subplots(
        len(records),
        1,
        figsize=(
            10,
            1.2 + 0.09 * max((len(r) for r in records.values()), default=1) * len(records),
        ),
        squeeze=False,
    )
    for ax, (target, recs) in zip(axes[:, 0], records.items(), strict=True):
        base = min((r.start_s for r in recs), default=0.0)
        for row, rec in enumerate(recs):
            color = "C0" if rec.is_ok else "C3"
            ax.plot([rec.start_s - base, rec.end_s - base], [row, row], color=color, lw=2)
            if rec.first_token_s is not None:
                ax.plot(rec.first_token_s - base, row, "k.", ms=3)
        ax.set_title(
            f"{target}: send -> done per request (dot: first token, red: error)", fontsize=9
        )
        ax.set_ylabel("request")
        ax.invert_yaxis()
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time since first send (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_served_path(hops_ms: Mapping[str, dict], path: Path) -> Path:
    """A bar per hop of the served path (bench.served_path): its mean, with ticks at p50 and p99,
    on a log axis: the engine's hops are 100x the transport's."""
    names = list(hops_ms)
    means = np.array([hops_ms[n]["mean"] for n in names])
    p50 = np.array([hops_ms[n]["p50"] for n in names])
    p99 = np.array([hops_ms[n]["p99"] for n in names])
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(names)))
    rows = np.arange(len(names))
    ax.barh(rows, means, color="C0", label="mean")
    ax.plot(p50, rows, "k|", ms=12, label="p50")
    ax.plot(p99, rows, "r|", ms=12, label="p99")
    for row, mean in zip(rows, means, strict=True):
        ax.annotate(
            f"{mean:.2f}", (mean, row), xytext=(3, -3), textcoords="offset points", fontsize=8
        )
    ax.set_yticks(rows, names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms (log)")
    ax.set_title("served path: where a traced request's time goes", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
