"""The study's figures, after the paper's: time vs batch per mapping; TX and RX per GPU vs
batch; communication and utilisation on twin axes; memory vs batch with the threshold line.
Batch on a log2 axis; one line per mapping x kernels, one panel per workload. Without NVML the
traffic figures plot rank 0's collective bytes and the CPU instead of the GPU counters."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.study.summary import gpu_means, series_of  # noqa: E402


def _panels(cells: list[dict], title: str):
    workloads = sorted({c["workload"] for c in cells}, key=lambda w: int(w.split("x")[0]))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 3.8), squeeze=False)
    fig.suptitle(title, fontsize=10)
    return fig, dict(zip(workloads, axes[0], strict=True))


def _finish(fig, axes, ylabel: str, path: Path) -> Path:
    for workload, ax in axes.items():
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.set_title(f"workload {workload} (input x output tokens)", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _ok(series: list[dict]) -> list[dict]:
    return [c for c in series if c["is_ok"]]


def plot_time(cells: list[dict], path: Path) -> Path:
    fig, axes = _panels(cells, "inference time of the cell's requests vs batch size")
    for key, series in series_of(cells).items():
        ok = _ok(series)
        ax = axes[series[0]["workload"]]
        ax.plot(
            [c["batch_size"] for c in ok],
            [c["timing"]["duration_s"] for c in ok],
            marker="o",
            label=key.rsplit("-", 1)[0],
        )
    return _finish(fig, axes, "time (s)", path)


def plot_traffic(cells: list[dict], path: Path) -> Path:
    has_gpu = any(gpu_means(c, "pcie_tx_bytes_s") for c in cells if c["is_ok"])
    title = (
        "PCIe + NVLink TX and RX per GPU vs batch size"
        if has_gpu
        else "rank 0's collective bytes sent and received per output token (no NVML)"
    )
    fig, axes = _panels(cells, title)
    for key, series in series_of(cells).items():
        ok, ax, name = _ok(series), axes[series[0]["workload"]], key.rsplit("-", 1)[0]
        sizes = [c["batch_size"] for c in ok]
        if has_gpu:
            for direction, style in (("tx", "-"), ("rx", "--")):
                per_gpu: dict[str, list[float]] = {}
                for c in ok:
                    for metric in (f"pcie_{direction}_bytes_s", f"nvlink_{direction}_bytes_s"):
                        for gpu, v in gpu_means(c, metric).items():
                            per_gpu.setdefault(gpu, [0.0] * len(ok))[ok.index(c)] += v / 1e6
                for gpu, values in per_gpu.items():
                    ax.plot(sizes, values, style, marker="o", label=f"{name} {gpu} {direction}")
        else:
            sent = [
                sum(v for k, v in c["comm"]["by_kind"].items() if "recv" not in k)
                / max(c["timing"]["num_output_tokens"], 1)
                for c in ok
            ]
            recv = [
                sum(v for k, v in c["comm"]["by_kind"].items() if "recv" in k)
                / max(c["timing"]["num_output_tokens"], 1)
                for c in ok
            ]
            ax.plot(sizes, sent, "-", marker="o", label=f"{name} sent")
            ax.plot(sizes, recv, "--", marker="o", label=f"{name} received")
    return _finish(fig, axes, "MB/s" if has_gpu else "bytes per output token", path)


def plot_comm_util(cells: list[dict], path: Path) -> Path:
    has_gpu = any(gpu_means(c, "util_pct") for c in cells if c["is_ok"])
    fig, axes = _panels(cells, "communication (solid, left) and utilisation (dashed, right)")
    twins = {w: ax.twinx() for w, ax in axes.items()}
    for n, (key, series) in enumerate(series_of(cells).items()):
        ok, workload = _ok(series), series[0]["workload"]
        sizes = [c["batch_size"] for c in ok]
        comm = [c["comm"]["total_bytes"] / max(c["timing"]["duration_s"], 1e-9) / 1e6 for c in ok]
        if has_gpu:
            util = [
                sum(gpu_means(c, "util_pct").values()) / max(len(gpu_means(c, "util_pct")), 1)
                for c in ok
            ]
        else:
            util = [
                sum(v.get("cpu_pct_mean", 0) for v in (c.get("resources") or {}).values())
                for c in ok
            ]
        color = f"C{n % 10}"
        axes[workload].plot(sizes, comm, "-", marker="o", color=color, label=key.rsplit("-", 1)[0])
        twins[workload].plot(sizes, util, "--", marker="s", color=color)
    for twin in twins.values():
        twin.set_ylabel("GPU utilisation (%)" if has_gpu else "CPU (% of a core, all ranks)")
    return _finish(fig, axes, "collective MB/s (rank 0)", path)


def plot_memory(cells: list[dict], thresholds: list[dict], path: Path) -> Path:
    fig, axes = _panels(cells, "memory vs batch size (dotted: KV cache used; red: first failure)")
    for n, (key, series) in enumerate(series_of(cells).items()):
        ok, ax, color = _ok(series), axes[series[0]["workload"]], f"C{n % 10}"
        sizes = [c["batch_size"] for c in ok]
        ax.plot(
            sizes,
            [c["memory"]["peak_gib"] or 0 for c in ok],
            "-",
            marker="o",
            color=color,
            label=key.rsplit("-", 1)[0],
        )
        ax.plot(sizes, [c["memory"]["kv_used_gib"] for c in ok], ":", color=color)
    for t in thresholds:
        if t["threshold_batch"] is not None:
            axes[t["workload"]].axvline(t["threshold_batch"], color="C3", ls="--", lw=1)
    return _finish(fig, axes, "GiB (all GPUs, else all ranks' RSS)", path)


def plot_all(data: dict, out_dir: Path) -> dict[str, Path]:
    cells = data["cells"]
    if not any(c["is_ok"] for c in cells):
        return {}
    return {
        "time": plot_time(cells, out_dir / "time_vs_batch.png"),
        "traffic": plot_traffic(cells, out_dir / "traffic_vs_batch.png"),
        "comm_util": plot_comm_util(cells, out_dir / "comm_util_vs_batch.png"),
        "memory": plot_memory(cells, data["thresholds"], out_dir / "memory_vs_batch.png"),
    }
