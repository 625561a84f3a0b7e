"""The annealing trace: each trial's cost by outcome, the incumbent and the best so far, and the
temperature; one panel per tuned item."""

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUTCOME_STYLE = {
    "initial": ("black", "s"),
    "accepted": ("tab:green", "o"),
    "rejected": ("tab:gray", "o"),
    "noise": ("tab:blue", "."),
    "restart": ("tab:orange", "D"),
}
PANELS_PER_FIGURE = 12


def _panel(ax, row: dict, unit: str) -> None:
    trials = row["trials"]
    costs = [t["cost"] for t in trials if t["cost"] is not None]
    top = max(costs) if costs else 1.0
    for outcome, (color, marker) in OUTCOME_STYLE.items():
        points = [(t["index"], t["cost"]) for t in trials if t["outcome"] == outcome]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(xs, ys, s=14, color=color, marker=marker, label=outcome, zorder=3)
    refused = [t["index"] for t in trials if t["outcome"] == "correctness"]
    if refused:  # no cost: drawn along the top
        ax.scatter(
            refused,
            [top] * len(refused),
            color="tab:red",
            marker="x",
            s=20,
            label="correctness",
            zorder=3,
        )
    for key, style, label in (("incumbent_cost", "-", "incumbent"), ("best_cost", "--", "best")):
        xs = [t["index"] for t in trials if t[key] is not None]
        ys = [t[key] for t in trials if t[key] is not None]
        ax.step(xs, ys, where="post", ls=style, lw=1, color="black", label=label)
    temps = [(t["index"], t["temperature"]) for t in trials if t.get("temperature") is not None]
    if temps:
        twin = ax.twinx()
        twin.plot(*zip(*temps, strict=True), color="tab:purple", lw=0.8, alpha=0.6)
        twin.set_ylabel("temperature", color="tab:purple", fontsize=7)
        twin.tick_params(labelsize=6, colors="tab:purple")
    gain = row.get("gain") or 0.0
    ax.set_title(f"{row['item']}: {100 * gain:+.1f}%", fontsize=8)
    ax.set_xlabel("trial", fontsize=7)
    ax.set_ylabel(unit, fontsize=7)
    ax.tick_params(labelsize=6)
    ax.grid(alpha=0.3)


def plot_traces(rows: list[dict], unit: str, out_dir: Path) -> list[Path]:
    """trace.png (trace-2.png, ... past PANELS_PER_FIGURE items) for the rows that were searched."""
    searched = [r for r in rows if r.get("trials")]
    paths = []
    for start in range(0, len(searched), PANELS_PER_FIGURE):
        chunk = searched[start : start + PANELS_PER_FIGURE]
        cols = min(3, len(chunk))
        nrows = math.ceil(len(chunk) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.2 * nrows), squeeze=False)
        for ax, row in zip(axes.flat, chunk, strict=False):
            _panel(ax, row, unit)
        for ax in list(axes.flat)[len(chunk) :]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=6, loc="upper right")
        fig.tight_layout()
        name = "trace.png" if start == 0 else f"trace-{start // PANELS_PER_FIGURE + 1}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        paths.append(out_dir / name)
    return paths
