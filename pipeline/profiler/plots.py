"""Resource timeline plots: one panel per metric, one line per device, bench phases shaded."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.profiler.sampler import devices  # noqa: E402

# metric -> (axis label, scale applied to the raw value)
UNITS = {
    "util_pct": ("GPU utilisation (%)", 1.0),
    "mem_used_bytes": ("GPU memory used (GiB)", 1 / 2**30),
    "pcie_tx_bytes_s": ("PCIe TX (MB/s)", 1e-6),
    "pcie_rx_bytes_s": ("PCIe RX (MB/s)", 1e-6),
    "cpu_pct": ("CPU (% of one core)", 1.0),
    "rss_bytes": ("RSS (GiB)", 1 / 2**30),
}


def plot_timeline(timeline: dict, path: Path) -> Path:
    samples = timeline["samples"]
    by_metric: dict[str, list[str]] = {}
    for device, metrics in devices(samples).items():
        for metric in metrics:
            by_metric.setdefault(metric, []).append(device)
    metrics = [m for m in UNITS if m in by_metric] + [m for m in by_metric if m not in UNITS]
    fig, axes = plt.subplots(
        len(metrics) or 1, 1, figsize=(9, 2.2 * max(len(metrics), 1)), sharex=True, squeeze=False
    )
    for ax, metric in zip(axes[:, 0], metrics, strict=False):
        label, scale = UNITS.get(metric, (metric, 1.0))
        for device in by_metric[metric]:
            points = [
                (s["t_s"], s[device][metric] * scale)
                for s in samples
                if device in s and s[device].get(metric) is not None
            ]
            if points:
                ax.plot(*zip(*points, strict=True), label=device, lw=1.2)
        for n, phase in enumerate(timeline["phases"]):
            ax.axvspan(phase["start_s"], phase["end_s"], color=f"C{n % 10}", alpha=0.08)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    top = axes[0, 0]
    for phase in timeline["phases"]:
        top.annotate(
            phase["name"],
            (phase["start_s"], 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=30,
            va="bottom",
        )
    axes[-1, 0].set_xlabel("time (s)")
    title = f"resource timeline ({timeline['achieved_rate_hz']:.1f} Hz)"
    if timeline["notes"]:
        title += "\n" + "; ".join(timeline["notes"])[:120]
    fig.suptitle(title, fontsize=9, y=1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
